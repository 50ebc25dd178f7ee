"""The Writer with grounding, regeneration and comparison on a weak model: time, LLM calls, what survived.

    .venv/bin/python bench/writer_weak_model.py

Writes the report of the unit tests' photosynthesis run (three hand-made documents, four
requirements, one uncovered and one failed) with the embedded SmolLM2-135M, in-process on the CPU,
and prints the seconds, LLM calls, sections regenerated, citations and sentences removed, compliant
contribution records, degraded steps and whether the citation check passes, then the report. A speed
and robustness figure, not a test.
"""

from __future__ import annotations

import asyncio
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "unit"))

from finished_run import fill_store  # noqa: E402
from test_write_step import request  # noqa: E402

from actors.steps.write.citations import check_citations  # noqa: E402
from actors.steps.write.step import WriteStep  # noqa: E402
from infra.llm import build_llm  # noqa: E402
from infra.settings import Settings  # noqa: E402


def main() -> None:
    settings = Settings.load().updated(llm={"backend": "embedded", "n_ctx": 4096, "max_tokens": 512})
    with tempfile.TemporaryDirectory() as tmp:
        store = fill_store(pathlib.Path(tmp) / "store")
        started = time.monotonic()
        report = asyncio.run(WriteStep(settings, store, build_llm(settings)).write(request()))
        seconds = time.monotonic() - started
    comparison = report.comparison
    print(f"seconds {seconds:.1f} · llm_calls {report.llm_calls} · regenerated {report.regenerated_sections} · "
          f"removed citations {report.removed_citations}, sentences {report.removed_sentences}")
    if comparison is not None:
        print(f"contribution records complete: {comparison.compliant} of {len(comparison.records)}")
    print("degraded:", *report.failed_steps, sep="\n  ")
    print("citation check:", check_citations(report.markdown, report.sources, report.sections) or "passes")
    print(report.markdown)


if __name__ == "__main__":
    main()
