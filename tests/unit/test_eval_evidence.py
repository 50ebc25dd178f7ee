"""`forage eval evidence` on a tiny BEIR folder: the real Forager (ForageStep), MiniLM, LanceStore and the
relevance check; the judge is a function LLM. Scored by the qrels alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.steps.evaluation.evidence import (
    QueryOutcome,
    answer_floor_sweep,
    coverage_at,
    evaluate_evidence,
    held_out_documents,
    split_answerable,
)
from actors.steps.schemas import BatchVerdict, DeepDiveBatchVerdict, DocumentGist, Reformulation, RelevanceGate
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from tests.tiny_beir import QUERIES, write_beir


def yes_man(messages, schema):
    """A weak judge: every passage answers with a method; other steps answered plainly."""
    if issubclass(schema, (BatchVerdict, DeepDiveBatchVerdict)):
        user = messages[-1]["content"]
        numbers = sorted({int(n) for n in re.findall(r"<<<PASSAGE (\d+)\n", user)})
        return {"verdicts": [{"passage": n, "tag": "answers", "kind": "method", "motive": "It answers."}
                             for n in numbers]}
    if schema is DocumentGist:
        return {"summary": "A study."}
    if schema is RelevanceGate:
        return {"continue_search": False, "reason": "Enough."}
    if schema is Reformulation:
        return {"query": "another query"}
    raise AssertionError(schema.__name__)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny")


def test_half_the_queries_are_made_unanswerable_by_seed() -> None:
    qids = ["q1", "q2", "q3", "q4"]
    assert split_answerable(qids, 0) == split_answerable(qids, 0) and len(split_answerable(qids, 0)) == 2
    assert any(split_answerable(qids, s) != split_answerable(qids, 0) for s in range(1, 10))
    qrels = {"q1": {"d1": 2, "d9": 1}, "q2": {"d4": 1, "d5": 0}}
    assert held_out_documents(qrels, {"q1", "q2"}) == {"d1", "d9", "d4"}  # grade 0 is not relevant


def test_coverage_at_an_answer_floor_follows_the_foragers_rule() -> None:
    verdicts = [("answers", "method", 0.5), ("answers", "background", 0.7), ("interesting", None, 0.2)]
    # at 0.8 every passage is below the floor: the answers count as interesting ones, and no interesting passage
    # under the floor stands as related evidence
    assert [coverage_at(verdicts, f) for f in (0.4, 0.6, 0.8)] == [1.0, 0.75, 0.0]
    assert coverage_at([*verdicts, ("interesting", None, 0.85)], 0.8) == 0.5
    assert coverage_at([("interesting", None, None)], 0.8) == 0.5  # no similarity (the check off): the judge's word
    assert coverage_at([("unrelated", None, 0.9)], 0.1) == 0.0
    # an answer the run's retrieval signals did not confirm counts at no floor
    assert coverage_at([("answers", "method", 0.7, False), ("answers", "method", 0.5, True)], 0.6) == 0.5
    assert coverage_at([("answers", "method", 0.7, False), ("answers", "method", 0.5, True)], 0.43) == 1.0
    outcomes = [QueryOutcome("a", True, 1.0, True, True, [], 1, 0, 1.0, 0, [("answers", "result", 0.6)]),
                QueryOutcome("u", False, 1.0, False, False, [], 1, 0, 1.0, 0, [("answers", "result", 0.45)])]
    sweep = {row["answer_floor"]: row for row in answer_floor_sweep(outcomes)}
    assert sweep[0.43]["false_coverage"] == 1.0 and sweep[0.5]["false_coverage"] == 0.0
    assert sweep[0.5]["answered_answerable"] == 1.0 and sweep[0.65]["answered_answerable"] == 0.0


def test_the_check_lowers_false_coverage_of_a_yes_man_judge(tiny: Path, minilm) -> None:
    """The judge's word alone gives every requirement coverage 1.0, the unanswerable ones too; the relevance
    check takes it away where the store holds nothing close, and the figures come from the qrels only."""
    settings = Settings.load().updated(forage={"max_deep_dives": 0, "min_papers": 0})
    out = evaluate_evidence(settings, tiny, n_queries=4, seed=1, llm=FunctionLLM(yes_man), embedder=minilm)
    assert out["n_queries"] == 3 and out["answerable"] + out["unanswerable"] == 3  # three judged test queries
    judge, checked = out["modes"]["judge"], out["modes"]["checked"]
    assert judge["false_coverage"] == 1.0 and judge["coverage_unanswerable"] == 1.0
    assert checked["false_coverage"] < judge["false_coverage"]
    assert checked["llm_calls"] < judge["llm_calls"]  # passages far from the requirement are never shown
    for mode in ("judge", "checked"):
        rows = out["queries"][mode]
        assert len(rows) == 3 and all(set(r["evidence"]) <= {f"d{i}" for i in range(1, 11)} for r in rows)
        relevant = {"q1": {"d1", "d9"}, "q2": {"d4"}, "q3": {"d8"}}  # TEST_QRELS
        for r in rows:  # an unanswerable query's documents were never in the store
            assert r["answerable"] or not set(r["evidence"]) & relevant[r["qid"]]
    assert [row["answer_floor"] for row in out["answer_floor_sweep"]][0] == 0.43


def test_cli_prints_the_table_and_writes_json(tiny: Path, tmp_path: Path, monkeypatch) -> None:
    import infra.llm
    from gateway.cli import app

    monkeypatch.setattr(infra.llm, "build_llm", lambda settings: FunctionLLM(yes_man))
    out = tmp_path / "evidence.json"
    result = CliRunner().invoke(app, ["eval", "evidence", "--beir", str(tiny), "--queries", "3", "--mode", "checked",
                                      "--out", str(out)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "false coverage" in result.output and "checked" in result.output
    data = json.loads(out.read_text())
    assert list(data["modes"]) == ["checked"] and set(QUERIES) >= {r["qid"] for r in data["queries"]["checked"]}
    bad = CliRunner().invoke(app, ["eval", "evidence", "--beir", str(tmp_path / "none")])
    assert bad.exit_code == 2 and "error" in bad.output
