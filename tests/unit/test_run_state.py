"""run.json is one typed model (messages/run_state.py): run.json files of the format before it load and
round-trip (every value kept, unknown fields too), a write that does not fit is refused before it reaches the
disk, and the status shown for a run comes from one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.steps.run.record import RunRecord, resumable, settled, shown_status, stop_reason
from actors.steps.run.rundir import RunDir
from messages.forage import RequirementCoverage
from messages.plan import Requirement
from messages.run_state import RunState

OLD = Path(__file__).resolve().parents[1] / "data" / "run_json"
FILES = sorted(OLD.glob("*.json"))


def holds(new, old) -> bool:
    """Every value of ``old`` is in ``new`` as it was (``new`` may add fields a later Forage records, e.g. a
    judgement's ``model_kind``)."""
    if isinstance(old, dict):
        return isinstance(new, dict) and all(k in new and holds(new[k], v) for k, v in old.items())
    if isinstance(old, list):
        return isinstance(new, list) and len(new) == len(old) and all(holds(n, o) for n, o in zip(new, old))
    return new == old


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_an_older_run_json_loads_typed_and_round_trips(path: Path) -> None:
    original = json.loads(path.read_text(encoding="utf-8"))
    state = RunState.load(path)
    assert state is not None and state.status == original["status"] == "finished"
    assert [r.id for r in state.requirements] == [r["id"] for r in original["requirements"]]
    assert set(state.documents) == set(original["documents"])
    assert [it.coverage for it in state.iterations] == [it["coverage"] for it in original["iterations"]]
    assert state.final_coverage == original["final_coverage"]
    again = json.loads(state.to_json())
    for key, value in original.items():  # every value it held, as it held it
        assert holds(again.get(key), value), key
    assert RunState.from_json(state.to_json()) == state


def test_what_each_older_file_records_is_there_typed() -> None:
    replanned = RunState.load(OLD / "replanned.json")
    assert replanned.replans and replanned.replans[0].added and replanned.replans[0].after_iteration >= 2
    resumed = RunState.load(OLD / "resumed.json")
    assert resumed.resumed and resumed.resumed[0].status_was == "running"
    follow = RunState.load(OLD / "follow_up.json")
    assert follow.from_run is not None and follow.from_run.run_id and follow.stored_doc_ids()
    ray_run = RunState.load(OLD / "ray_run_with_faults.json")
    assert ray_run.settings is not None and ray_run.settings.resolved and ray_run.last_coverages
    assert all(d.in_store for d in ray_run.documents.values()) and len(ray_run.stored_doc_ids()) == 4


def test_fields_another_version_wrote_are_kept(tmp_path) -> None:
    data = json.loads((OLD / "resumed.json").read_text(encoding="utf-8"))
    data["written_by_a_newer_forage"] = {"x": [1, 2]}
    data["iterations"][0]["also_newer"] = "kept"
    rundir = RunDir(tmp_path, data["run_id"])
    rundir.save_state(data)
    back = json.loads(rundir.run_json.read_text(encoding="utf-8"))
    assert back["written_by_a_newer_forage"] == {"x": [1, 2]} and back["iterations"][0]["also_newer"] == "kept"


def test_a_write_that_is_not_a_runs_state_never_reaches_the_disk(tmp_path) -> None:
    rundir = RunDir(tmp_path, "r")
    rundir.save_state({"run_id": "r", "status": "running"})
    before = rundir.run_json.read_text(encoding="utf-8")
    for bad in ({"run_id": "r", "status": "sleeping"}, {"run_id": "r", "status": "running", "iterations": [{}]},
                {"run_id": "r", "status": "running", "documents": {"k": {"status": "lost"}}}):
        with pytest.raises(ValueError):
            rundir.save_state(bad)
    assert rundir.run_json.read_text(encoding="utf-8") == before
    (tmp_path / "r" / "run.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="not a JSON object"):
        rundir.load_state()
    assert RunDir(tmp_path, "none").load_state() is None


def test_the_stop_rule_and_the_shown_status_live_in_one_place(tmp_path) -> None:
    # the loop stops when every requirement is settled (answered, failed, nothing new), else at the limit
    answered = {"R1": "answered: coverage 0.90 reached the goal 0.85 (iteration 1)"}
    assert stop_reason(answered, 0.9, 0.85, 1, 6) == "coverage 0.90 reached the goal 0.85: every requirement answered"
    mixed = {**answered, "R2": "nothing new in iteration 1: …", "R3": "foraging failed in iteration 1 (boom)"}
    assert stop_reason(mixed, 0.5, 0.85, 1, 6) == ("every requirement settled (coverage 0.50): 1 answered, "
                                                   "1 nothing new, 1 foraging failed")
    assert stop_reason({**answered, "R2": ""}, 0.5, 0.85, 6, 6) == "reached the maximum of 6 iterations (coverage 0.50)"
    assert stop_reason({**answered, "R2": ""}, 0.5, 0.85, 2, 6) == ""
    rundir = RunDir(tmp_path, "r")
    record = RunRecord(rundir, "r")
    state = RunState(run_id="r", status="running", requirements=[{"id": "R1", "text": "Fin regrowth"}])
    rundir.save_state(state)
    assert shown_status(None) == "unknown"
    assert shown_status(state, rundir) == "running"  # no owner recorded: cannot tell
    record.claim()  # this process: alive
    assert shown_status(state, rundir) == "running" and not resumable(state, rundir)
    owner = json.loads(rundir.owner_file.read_text())
    rundir.owner_file.write_text(json.dumps({**owner, "pid": 2 ** 22 + 7, "started": 1.0}))  # a process long gone
    assert shown_status(state, rundir) == "interrupted" and resumable(state, rundir)
    assert shown_status(state, rundir, live=True) == "running" and not resumable(state, rundir, live=True)
    assert not resumable(state.model_copy(update={"requirements": []}), rundir)  # never approved


def test_nothing_new_needs_an_iteration_that_read_no_new_document() -> None:
    """A requirement its iteration's new documents held nothing for waits for the search's next batch (the run that
    stopped after iteration 1 with two requirements at 0.00 and their papers still unread, tests/e2e/test_kill_driver);
    only an iteration that read no new document and found it no new passage settles it."""
    cov = [RequirementCoverage(run_id="r", requirement=Requirement(id="R1", text="Fin regrowth"), iteration=1,
                               coverage=0.0, new_passages=0),
           RequirementCoverage(run_id="r", requirement=Requirement(id="R2", text="Scale pigment"), iteration=1,
                               coverage=0.5, new_passages=3)]
    assert settled(cov, 0.85, new_documents=2) == {"R1": "", "R2": ""}
    after = settled(cov, 0.85, new_documents=0)
    assert after["R1"].startswith("nothing new in iteration 1") and after["R2"] == ""


def test_a_failed_forager_gets_one_more_iteration_and_settles_on_its_second_failure_in_a_row() -> None:
    """A Forager that failed once (a model server down for a minute, a killed process) may succeed next time: its
    requirement is not settled, so the run does not stop on it; failing again in the next iteration settles it."""
    failed = RequirementCoverage(run_id="r", requirement=Requirement(id="R1", text="Fin regrowth"), iteration=2,
                                 status="failed", coverage=0.0, error="LLMUnavailable: HTTP 500")
    assert settled([failed], 0.85, new_documents=0) == {"R1": ""}
    assert settled([failed], 0.85, new_documents=0, failed_before={"R2"}) == {"R1": ""}
    again = settled([failed], 0.85, new_documents=0, failed_before={"R1"})["R1"]
    assert again.startswith("foraging failed in iteration 2") and "HTTP 500" in again


def test_a_run_is_listed_from_the_start_of_planning_and_shown_interrupted_when_its_process_stopped(tmp_path) -> None:
    """A gateway stopped (SIGTERM) while a run plans leaves run.json "planning": listed, shown "interrupted" once
    its process is gone, never resumable (nothing was approved)."""
    rundir = RunDir(tmp_path, "r")
    record = RunRecord(rundir, "r")
    record.planning("Fin regrowth in zebrafish")
    state = rundir.require_state()
    assert state.status == "planning" and state.query == "Fin regrowth in zebrafish"
    assert shown_status(state, rundir) == "planning" and not resumable(state, rundir)  # its process: this one
    owner = json.loads(rundir.owner_file.read_text())
    rundir.owner_file.write_text(json.dumps({**owner, "pid": 2 ** 22 + 7, "started": 1.0}))  # a process long gone
    assert shown_status(state, rundir) == "interrupted" and not resumable(state, rundir)
