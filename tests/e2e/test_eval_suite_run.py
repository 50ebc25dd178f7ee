"""`forage eval suite FILE --judge MODEL` as a user runs it: every query end to end on Ray, then judged.

Nothing of the suite is replaced: the CLI builds its settings from the environment, each query runs
through ResearchSession (Orchestrator, Searcher over a folder of PDFs, Ingestors with PyMuPDF + MiniLM +
LanceDB, Foragers, Writer), and the product's own Ollama client talks to both models — the research
model and the judge — on a loopback Ollama (tests/loopback_ollama.py). Its answers are computed from the
prompts by the end-to-end brain (tests/e2e/brain.py); the judge answers with a fixed rubric score. This
is the path a lab machine with Ollama takes, with the model server swapped for the loopback one.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

PAPERS = ("dvt_prophylaxis_trauma_bmc2010.pdf",)  # 4 pages: the first query is covered, the JIT one an honest gap
QUERIES = ("Anticoagulation after trauma and its complications", "Type specialization in trace-based JIT compilers")
JUDGED = {"correctness": 4, "usefulness": 3, "scope": 2, "rationale": "Supported but narrow.",
          "unsupported_claims": ["The sources describe the mechanism."]}


def responder(messages: list[dict[str, str]], fmt: object) -> dict:
    """The research model answers as the end-to-end brain would; the judge with JUDGED."""
    from tests.e2e.brain import brain

    name = fmt.get("title", "") if isinstance(fmt, dict) else ""
    if name == "JudgeVerdict":
        return JUDGED
    return asyncio.run(brain(messages, SimpleNamespace(__name__=name)))


def test_eval_suite_runs_each_query_through_ray_and_judges_it(ray_cluster, shared_pdfs, ingest_cache,
                                                               tmp_path: Path, monkeypatch) -> None:
    from gateway.cli import app
    from tests.loopback_ollama import LoopbackOllama

    library = tmp_path / "library"
    library.mkdir()
    pdfs = {p.name: p for p in shared_pdfs}
    for name in PAPERS:
        (library / name).symlink_to(pdfs[name])
    suite = tmp_path / "suite.yaml"
    suite.write_text("queries:\n" + "".join(f"  - {q}\n" for q in QUERIES) + "preset: quick\n")
    with LoopbackOllama(models=("lab-model", "judge-model"), responder=responder) as server:
        for key, value in {"FORAGE_LLM__BACKEND": "ollama", "FORAGE_LLM__HOST": server.url,
                           "FORAGE_LLM__MODEL": "lab-model", "FORAGE_STORE__PATH": str(tmp_path / "store"),
                           "FORAGE_RUN__MAX_ITERATIONS": "2", "FORAGE_INGEST__POOL_SIZE": "1",
                           "FORAGE_INGEST__CACHE_DIR": str(ingest_cache)}.items():
            monkeypatch.setenv(key, value)
        result = CliRunner().invoke(app, ["eval", "suite", str(suite), "--judge", "judge-model", "--library",
                                          str(library), "--runs-dir", str(tmp_path / "runs"),
                                          "--out", str(tmp_path / "results")])
        chats = [r for r in server.requests if r.path == "/api/chat"]
    assert result.exit_code == 0, result.output
    assert "results:" in result.output and "judged by judge-model" in result.output

    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["query"] for r in rows] == list(QUERIES)
    covered, gap = rows
    assert covered["coverage"] > 0 and covered["sources"] >= 1, covered
    # the library holds no JIT paper, and the plan keeps to the query (no requirement of the first query's topic
    # slips into it): nothing is credited, nothing cited
    assert gap["coverage"] == 0 and gap["sources"] == 0, gap
    for row in rows:
        assert row["status"] == "finished" and row["llm_calls"] > 0, row
        assert (row["correctness"], row["usefulness"], row["scope"], row["unsupported"]) == (4, 3, 2, 1), row
        assert row["judgement"]["judge"] == "judge-model"
    table = (tmp_path / "results.md").read_text().splitlines()
    assert len(table) == 2 + len(QUERIES) and all("| finished |" in line for line in table[2:])
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == len(QUERIES) and all((r / "report.md").is_file() for r in runs)
    # both models were asked through the real client: the research model for the runs, the judge once per run
    models = [r.body.get("model") for r in chats]
    assert models.count("judge-model") == len(QUERIES) and models.count("lab-model") > len(QUERIES)
