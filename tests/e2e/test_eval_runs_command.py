"""`forage eval runs SUITE.yaml` as a user runs it: a 2-query suite over 3 small real PDFs in two folders, each
query end to end on Ray (Orchestrator, library Searcher, Ingestors with PyMuPDF + MiniLM + LanceDB, Foragers,
Writer), scored from the runs' own records.

The product's Ollama client talks to a loopback Ollama (tests/loopback_ollama.py) whose answers the end-to-end
brain (tests/e2e/brain.py) computes from the prompts: it proposes its three fixed requirements for any query, and
calls a passage naming "heparin" or "bleeding" an answer to the anticoagulation requirement.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

DVT = "dvt_prophylaxis_trauma_bmc2010.pdf"  # answers the anticoagulation query
OTHERS = ("bosonic_dark_matter_arxiv0908.0054.pdf", "beyond_summarization_arxiv2304.02623v1.pdf")
QUERIES = (("What complications does anticoagulant prophylaxis against venous thrombosis cause after an injury?",
            [DVT]),
           ("How do trace-based just-in-time compilers specialize types in dynamic languages?", []))


def responder(messages: list[dict[str, str]], fmt: object) -> dict:
    from tests.e2e.brain import brain

    name = fmt.get("title", "") if isinstance(fmt, dict) else ""
    return asyncio.run(brain(messages, SimpleNamespace(__name__=name)))


def test_eval_runs_scores_each_query_from_its_run(ray_cluster, shared_pdfs, tmp_path: Path, monkeypatch) -> None:
    from gateway.cli import app
    from tests.loopback_ollama import LoopbackOllama

    pdfs = {p.name: p for p in shared_pdfs}
    for folder, names in (("a", (DVT,)), ("b", OTHERS)):
        (tmp_path / folder).mkdir()
        for name in names:
            (tmp_path / folder / name).symlink_to(pdfs[name])
    suite = tmp_path / "suite.yaml"
    suite.write_text("library: [a, b]\nqueries:\n" + "".join(
        f"  - query: {json.dumps(q)}\n    answering: {json.dumps(a)}\n" for q, a in QUERIES))
    with LoopbackOllama(models=("lab-model",), responder=responder) as server:
        for key, value in {"FORAGE_LLM__HOST": server.url, "FORAGE_RUN__MAX_ITERATIONS": "2",
                           "FORAGE_INGEST__POOL_SIZE": "1",
                           "FORAGE_INGEST__CACHE_DIR": str(tmp_path / "cache")}.items():
            monkeypatch.setenv(key, value)
        result = CliRunner().invoke(app, ["eval", "runs", str(suite), "--llm", "ollama", "--model", "lab-model",
                                          "--preset", "quick", "--runs-dir", str(tmp_path / "runs"),
                                          "--store", str(tmp_path / "store"), "--out", str(tmp_path / "out.json")])
    assert result.exit_code == 0, result.output
    assert "totals" in result.output and "cited-file precision" in result.output

    out = json.loads((tmp_path / "out.json").read_text())
    rows = out["rows"]
    assert [r["query"] for r in rows] == [q for q, _ in QUERIES] and not out["plan_only"]
    library = {DVT, *OTHERS}
    for row in rows:
        run = json.loads((tmp_path / "runs" / row["run_id"] / "run.json").read_text())
        assert row["status"] == run["status"] == "finished", row
        assert [r["text"] for r in row["requirements"]] == [r["text"] for r in run["requirements"]]
        assert row["fidelity"]["requirements"] == len(run["requirements"])
        assert row["iterations"] == len(run["iterations"]) >= 1 and row["stop_reason"] == run["stop_reason"]
        # the library (3 files) fits in one batch: iteration 1 reads all of it, later ones nothing new
        assert set(row["read_first"]) == library
        assert row["iterations_nothing_new"] == len(run["iterations"]) - 1
        assert set(row["cited"]) <= library and row["llm_calls"] > 0 and row["wall_s"] > 0
    answerable, unanswerable = rows
    assert answerable["answering_read_first"] == 1.0
    assert DVT in answerable["cited"] and answerable["cited_recall"] == 1.0
    assert unanswerable["answering_read_first"] is None and unanswerable["cited_recall"] is None
    assert unanswerable["false_coverage"] == any(c >= 0.75 for c in unanswerable["coverage"].values())
    t = out["totals"]
    assert (t["queries"], t["failed"], t["answerable"], t["unanswerable"]) == (2, 0, 1, 1)
    assert t["answering_read_first"] == 1.0 and t["median_iterations"] is not None
