"""The `forage` command line: bad input is refused with one clear sentence before any work starts,
and the approval step accepts, drops and edits requirements (with a real $EDITOR program)."""

from __future__ import annotations

import stat

import pytest
import typer
from typer.testing import CliRunner

from gateway.cli import app, approve
from messages import Requirement, RequirementsPlan, ResearchQuery
from tests.loopback_ollama import LoopbackOllama, closed_loopback_url

runner = CliRunner()


@pytest.fixture
def library(tmp_path, shared_pdfs):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "paper.pdf").symlink_to(shared_pdfs[0])
    return lib


def invoke(*args: str, env: dict[str, str] | None = None):
    result = runner.invoke(app, list(args), env=env)
    return result, " ".join(result.output.split())


def assert_no_run_started(out: str, runs_dir) -> None:
    """Preflight failed before a session (Ray, actors, a run folder) was created."""
    assert "→" not in out, "a run was started"
    assert not runs_dir.exists(), "a run folder was written"


def test_empty_query_is_refused(library, tmp_path) -> None:
    runs = tmp_path / "runs"
    result, out = invoke("research", "   ", "--library", str(library), "--yes", "--runs-dir", str(runs))
    assert result.exit_code == 2 and "query is empty" in out
    assert_no_run_started(out, runs)


def test_query_from_standard_input(library, tmp_path) -> None:
    runs = tmp_path / "runs"
    result = runner.invoke(app, ["research", "-", "--library", str(library), "--yes", "--runs-dir", str(runs)],
                           input="  \n\t\n")  # read from stdin (not the literal '-'), and empty there
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and "query is empty" in out
    assert_no_run_started(out, runs)


def test_missing_library(tmp_path) -> None:
    result, out = invoke("research", "q?", "--library", str(tmp_path / "nope"), "--yes")
    assert result.exit_code == 2 and "does not exist" in out


def test_library_without_pdfs(tmp_path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    result, out = invoke("research", "q?", "--library", str(tmp_path), "--yes")
    assert result.exit_code == 2 and "holds no .pdf files" in out


def test_no_library_given() -> None:
    result, out = invoke("research", "q?", "--yes")
    assert result.exit_code == 2 and "--library" in out


def test_ollama_unreachable_is_one_sentence(library, tmp_path) -> None:
    url = closed_loopback_url()
    runs = tmp_path / "runs"
    result, out = invoke("research", "q?", "--library", str(library), "--yes", "--llm", "ollama",
                         "--runs-dir", str(runs), env={"FORAGE_LLM__HOST": url})
    assert result.exit_code == 2
    assert f"Ollama is not reachable at {url}" in out and "ollama serve" in out
    assert_no_run_started(out, runs)


def test_ollama_model_missing_names_the_pull_command(library) -> None:
    with LoopbackOllama(models=("llama3.2:1b",)) as server:
        result, out = invoke("research", "q?", "--library", str(library), "--yes", "--llm", "ollama",
                             "--model", "qwen2.5:7b-instruct", env={"FORAGE_LLM__HOST": server.url})
    assert result.exit_code == 2 and "ollama pull qwen2.5:7b-instruct" in out


def plan() -> RequirementsPlan:
    q = ResearchQuery(run_id="r", text="query")
    reqs = tuple(Requirement(id=f"R{i}", text=f"requirement number {i}") for i in (1, 2, 3))
    return RequirementsPlan(run_id="r", query=q, requirements=reqs)


def run_approval(input_text: str, env: dict[str, str] | None = None) -> RequirementsPlan:
    captured: list[RequirementsPlan] = []
    cmd = typer.Typer()

    @cmd.command()
    def go() -> None:
        captured.append(approve(plan(), yes=False, interactive=True))

    result = runner.invoke(cmd, [], input=input_text, env=env)
    assert result.exit_code == 0, result.output
    return captured[0]


def test_yes_accepts_as_derived() -> None:
    assert approve(plan(), yes=True).approved


def test_without_terminal_and_without_yes_asks_for_a_flag() -> None:
    with pytest.raises(Exception, match="--yes"):
        approve(plan(), yes=False, interactive=False)


def test_drop_then_accept() -> None:
    approved = run_approval("d 2\na\n")
    assert approved.approved and [r.id for r in approved.requirements] == ["R1", "R3"]


def test_cannot_drop_everything() -> None:
    approved = run_approval("d 1 2 3\na\n")
    assert len(approved.requirements) == 3


def test_edit_with_a_real_editor(tmp_path) -> None:
    editor = tmp_path / "editor.sh"
    # an "editor" that rewrites the requirements file the way a researcher would
    editor.write_text("#!/bin/sh\nprintf '# mine\\nR1: anticoagulant bleeding risk after injury\\n"
                      "- trace compilation of dynamic languages\\n' > \"$1\"\n")
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    approved = run_approval("e\na\n", env={"EDITOR": str(editor), "VISUAL": str(editor)})
    assert [r.text for r in approved.requirements] == ["anticoagulant bleeding risk after injury",
                                                      "trace compilation of dynamic languages"]
    assert approved.approved


def test_chunk_reports_unknown_ids(tmp_path) -> None:
    result, out = invoke("chunk", "nope:00001", "--json", "--store", str(tmp_path / "store"))
    assert result.exit_code == 1 and "no chunk" in out



class RecordingSession:
    """Stands in for the Ray-backed ResearchSession: what is under test is what the CLI prints and which
    search strings it hands to the run, not the run itself (no Ray here)."""

    ran: list[RequirementsPlan] = []

    def __init__(self, settings, *, llm=None, quiet=False) -> None:
        self.run_id = "20261122-000000-0123456789abcdef"
        self.rundir = type("RunDir", (), {"path": settings.run.runs_dir / self.run_id})()

    def plan(self, query: str) -> RequirementsPlan:
        return RequirementsPlan(run_id=self.run_id, query=ResearchQuery(run_id=self.run_id, text=query),
                                requirements=(Requirement(id="R1", text="soil moisture sensing methods"),))

    def run(self, plan: RequirementsPlan, on_event=None, follow_up=None):
        from messages import RunSummary

        RecordingSession.ran.append(plan)
        return RunSummary(run_id=self.run_id, status="finished", iterations=1, stop_reason="coverage reached",
                          mean_coverage=1.0, run_dir="runs/x", report_path="runs/x/report.md")

    def close(self) -> None:
        pass


def research_with_searches(tmp_path, library, monkeypatch, *flags: str,
                           lines: str = "soil moisture sensing | 2019- | pdf | author: Jane Doe | venue: Water Research",
                           exit_code: int = 0):
    """`forage research --searches FILE` with a session that records the plan it is handed; (output, plans)."""
    monkeypatch.setattr("gateway.session.ResearchSession", RecordingSession)
    RecordingSession.ran = []
    searches = tmp_path / "searches.txt"
    searches.write_text(lines + "\n")
    with LoopbackOllama() as server:
        result, out = invoke("research", "soil moisture?", "--library", str(library), "--yes", "--llm", "ollama",
                             "--searches", str(searches), "--runs-dir", str(tmp_path / "runs"), *flags,
                             env={"FORAGE_LLM__HOST": server.url, "FORAGE_NET__OFFLINE": "false",
                                  "COLUMNS": "200"})  # a table row on one line
    assert result.exit_code == exit_code, result.output
    return out, RecordingSession.ran


def test_offline_searches_file_says_nothing_is_sent(tmp_path, library, monkeypatch) -> None:
    out, [ran] = research_with_searches(tmp_path, library, monkeypatch, "--offline")
    assert "Search strings sent" not in out
    assert "the 1 search string(s) in" in out and "are not sent; nothing leaves this machine" in out
    assert "Nothing leaves this machine" in out
    assert ran.search_queries == ()  # and the run is handed none


def test_online_searches_file_shows_every_filter_that_is_sent(tmp_path, library, monkeypatch) -> None:
    out, [ran] = research_with_searches(tmp_path, library, monkeypatch)
    assert "Search strings sent to the online databases" in out
    for shown in ("soil moisture sensing", "years 2019–…", "with a PDF", "by Jane Doe", "in Water Research"):
        assert shown in out
    [q] = ran.search_queries
    assert (q.authors, q.venue, q.has_pdf, q.year_from) == (("Jane Doe",), "Water Research", True, 2019)


def test_a_bad_searches_file_is_refused_before_a_run_starts(tmp_path, library, monkeypatch) -> None:
    out, ran = research_with_searches(tmp_path, library, monkeypatch, lines="soil moisture | sometimes", exit_code=2)
    assert "unknown filter 'sometimes'" in out
    assert "→" not in out and ran == []
