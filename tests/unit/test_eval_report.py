"""`forage eval report` and `forage eval suite` with scripted models on runs produced in-process."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from actors.steps.evaluation.report_judge import judge_run, run_metrics
from actors.steps.run.rundir import RunDir
from actors.steps.schemas import JudgeVerdict
from gateway.eval_suite import DEFAULT_SUITE, load_suite, markdown_table, run_suite, save_results
from infra.llm.fakes import ScriptedLLM
from infra.settings import Settings
from infra.store.lancedb import LanceStore
from tests.finished_run import RUN, make_run

VERDICT = {"correctness": 4, "usefulness": 3, "scope": 5, "rationale": "Mostly supported, somewhat generic.",
           "unsupported_claims": ["Study 2 reports a finding on this requirement."]}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("judged"))


def test_judge_sees_query_report_and_cited_passages(finished):
    settings, folder = finished
    judge = ScriptedLLM({JudgeVerdict: [VERDICT]})
    verdict = asyncio.run(judge_run(RunDir(folder.parent, RUN), LanceStore(settings.store.path, dim=384), judge,
                                    "judge-model"))
    assert (verdict.correctness, verdict.usefulness, verdict.scope, verdict.mean) == (4, 3, 5, 4.0)
    assert verdict.unsupported_claims == ["Study 2 reports a finding on this requirement."]
    prompt = judge.calls_log[0].last_user_message
    assert "<<<QUERY\nHow do plants turn sunlight into chemical energy?\nQUERY>>>" in prompt
    assert "## Sources Consulted" in prompt
    assert "[3] Results: The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars." in prompt


def test_a_score_outside_the_rubric_is_refused(finished):
    settings, folder = finished
    bad = {**VERDICT, "correctness": 9}
    judge = ScriptedLLM({JudgeVerdict: [bad, bad, bad]})
    from infra.errors import LLMOutputError

    with pytest.raises(LLMOutputError):
        asyncio.run(judge_run(RunDir(folder.parent, RUN), LanceStore(settings.store.path, dim=384), judge))


def test_run_metrics(finished):
    _, folder = finished
    row = run_metrics(RunDir(folder.parent, RUN))
    report = json.loads((folder / "report.json").read_text())
    assert row["status"] == "finished" and row["sources"] == 3 and row["iterations"] == 2
    assert row["removed_citations"] == 0 and row["records"] == 3 and row["compliance"] == 0.667
    assert row["llm_calls"] == report["llm_calls"] > 0
    assert row["coverage"] == json.loads((folder / "run.json").read_text())["final_coverage"]


def test_cli_eval_report_writes_eval_json(finished, monkeypatch):
    import gateway.eval_suite
    from gateway.cli import app

    _, folder = finished
    judge = ScriptedLLM({JudgeVerdict: [VERDICT]})
    monkeypatch.setattr(gateway.eval_suite, "judge_llm", lambda settings, model: judge)
    result = CliRunner().invoke(app, ["eval", "report", RUN, "--runs-dir", str(folder.parent), "--judge", "j"],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "unsupported claims: 1" in result.output and "4.00" in result.output
    saved = json.loads((folder / "eval.json").read_text())
    assert saved["judgement"]["scope"] == 5 and saved["metrics"]["sources"] == 3


def test_default_suite_holds_the_thesis_queries():
    queries = load_suite(DEFAULT_SUITE).queries
    assert len(queries) == 3
    assert "agriculture" in queries[0] and "microplastics" in queries[1] and "sleep quality" in queries[2]


def test_bad_suites_are_refused_with_a_reason(tmp_path):
    cases = {"notalist.yaml": "- just\n- a list\n", "empty.yaml": "queries: []\n", "typo.yaml": "querys: [a]\n",
             "broken.yaml": "queries: [unclosed\n"}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError):
            load_suite(tmp_path / name)


def test_suite_runs_every_query_and_tabulates(tmp_path):
    (tmp_path / "suite.yaml").write_text("queries:\n  - first query about plants\n  - second query that fails\n"
                                         "judge: judge-model\n")
    suite = load_suite(tmp_path / "suite.yaml")

    def run_query(settings: Settings, query: str) -> RunDir:
        if "fails" in query:
            raise RuntimeError("the library is empty")
        _, folder = make_run(tmp_path / "one")
        return RunDir(folder.parent, folder.name)

    judge = ScriptedLLM({JudgeVerdict: [VERDICT]})
    rows = run_suite(Settings.load(), suite, judge=judge, judge_name="judge-model", run_query=run_query)
    assert [r["status"] for r in rows] == ["finished", "failed"]
    assert rows[0]["correctness"] == 4 and rows[0]["unsupported"] == 1 and rows[0]["compliance"] == 0.667
    assert rows[1]["error"] == "RuntimeError: the library is empty"
    json_path, md_path = save_results(rows, tmp_path / "results")
    assert json.loads(json_path.read_text())[0]["judgement"]["judge"] == "judge-model"
    table = md_path.read_text().splitlines()
    assert table[0].startswith("| query | status | coverage | sources | removed_citations | compliance |")
    assert len(table) == 4 and "| 4 | 3 | 5 | 1 |" in table[2] and "| failed |" in table[3]
    assert markdown_table(rows) == md_path.read_text()


def test_cli_eval_suite_refuses_a_bad_file(tmp_path):
    from gateway.cli import app

    (tmp_path / "bad.yaml").write_text("queries: []\n")
    result = CliRunner().invoke(app, ["eval", "suite", str(tmp_path / "bad.yaml")])
    assert result.exit_code == 2 and "error" in result.output
