"""The judging rates each model was calibrated at, kept per model in the user's config (`forage calibrate`).

``$XDG_CONFIG_HOME/forage/judges.json`` (default ``~/.config/forage``, beside the gateway's token) maps a model's
key (:func:`judge_key`: the backend and the model it names, e.g. ``ollama:qwen2.5:7b-instruct``) to what
`forage calibrate` measured for it: ``{"tpr": …, "fpr": …, "calibrated": "YYYY-MM-DD", "labelled_set": …,
"relevant": n, "other": n}``. :meth:`infra.settings.Settings.judge_rates` reads it when ``forage.judge_tpr`` /
``judge_fpr`` are not set, so a run weighs its judge by the rates measured for that model
(actors/steps/forage/credit.py). The file is written whole and replaced atomically; a file that cannot be read is
a ConfigError naming it, never silently ignored (a run would otherwise trust a judge by the wrong rates).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from infra.errors import ConfigError


def judges_file() -> Path:
    """``$XDG_CONFIG_HOME/forage/judges.json`` (default ``~/.config/forage/judges.json``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "forage" / "judges.json"


def judge_key(backend: str, model: str, gguf_path: Path | str | None = None) -> str:
    """The key a model's rates are kept under: ``embedded:<GGUF file name>`` (``embedded:smollm2-135m`` for the
    packaged model), else ``<backend>:<model>``."""
    if backend == "embedded":
        return f"embedded:{Path(gguf_path).name if gguf_path else 'smollm2-135m'}"
    return f"{backend}:{model}"


def read_judges(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every model's kept calibration ({} when the file does not exist)."""
    path = path or judges_file()
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the judges' calibrated rates ({exc}); fix or remove the file "
                          "(`forage calibrate` writes it again)") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(f"{path}: expected a JSON object of model -> {{tpr, fpr, ...}}; fix or remove the file")
    return data


def calibrated_rates(key: str, path: Path | None = None) -> dict[str, Any] | None:
    """The kept calibration of the model ``key`` (None: never calibrated). Rates outside [0, 1] are a ConfigError."""
    record = read_judges(path).get(key)
    if record is None:
        return None
    rates = (record.get("tpr"), record.get("fpr"))
    if not all(isinstance(r, (int, float)) and 0.0 <= r <= 1.0 for r in rates):
        raise ConfigError(f"{path or judges_file()}: {key!r} has rates {rates}, expected numbers from 0 to 1")
    return record


def keep_rates(key: str, record: dict[str, Any], path: Path | None = None) -> Path:
    """Keep ``record`` (``tpr``, ``fpr`` and how they were measured) for the model ``key``, the other models' kept
    as they were; returns the file written."""
    path = path or judges_file()
    judges = read_judges(path)
    judges[key] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".judges-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(judges, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
