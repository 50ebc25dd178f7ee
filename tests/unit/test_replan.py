"""Re-planning when coverage stalls: the step with a scripted LLM, and the Orchestrator's loop without Ray.

The scripted crew (tests/fakes.py) stands in for the workers (search, ingest, forage, write), not for the thing under test:
the Orchestrator's stall rule, the re-planning step, ids, state, events, budget and resume are all real.
"""

from __future__ import annotations

import asyncio
import json

from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from actors.steps.plan.replan import describe_progress, next_requirement_ids, replan_requirements
from actors.steps.schemas import ReplanDraft
from infra.errors import LLMTimeout
from infra.llm.fakes import ScriptedLLM
from infra.settings import Settings
from messages import Requirement, RequirementCoverage, RequirementsPlan, ResearchQuery
from messages.forage import ChunkJudgement
from tests.fakes import ScriptedCrew

RUN = "run-replan"
QUERY = ResearchQuery(run_id=RUN, text="How do microplastics affect freshwater fish?")
NEW = ["Which concentrations of microplastics were measured in the tissues of freshwater fish?",
       "How do laboratory exposure experiments with microplastics compare with field observations of fish?",
       "Which methods quantify microplastic ingestion by freshwater fish?"]


def cov(rid: str, text: str, coverage: float, iteration: int = 1, **kw) -> RequirementCoverage:
    return RequirementCoverage(run_id=RUN, requirement=Requirement(id=rid, text=text), iteration=iteration,
                               coverage=coverage, **kw)


def coverages() -> list[RequirementCoverage]:
    answers = (ChunkJudgement(chunk_id="c1", doc_id="d1", tag="answers", kind="background"),
               ChunkJudgement(chunk_id="c2", doc_id="d1", tag="interesting", kind="method"))
    return [cov("R1", "Physiological effects of microplastics on freshwater fish", 0.75, judgements=answers,
                answering_papers=1),
            cov("R2", "Routes by which microplastics enter freshwater fish", 0.0),
            RequirementCoverage(run_id=RUN, requirement=Requirement(id="R3", text="Microplastic sources in rivers"),
                                iteration=1, status="failed", coverage=0.0, error="boom")]


# -- the step ------------------------------------------------------------------------------------------
def test_new_requirements_get_fresh_ids_and_the_prompt_shows_progress_and_dimensions() -> None:
    llm = ScriptedLLM([ReplanDraft(missing=["quantitative", "comparison"], requirements=NEW[:2])])
    result = asyncio.run(replan_requirements(QUERY, coverages(), llm, max_new=3))
    assert [r.id for r in result.added] == ["R4", "R5"]
    assert [r.text for r in result.added] == NEW[:2]
    assert result.missing == ("quantitative", "comparison") and result.dropped == 0 and not result.degraded
    call = llm.calls_log[0]
    system = call.messages[0]["content"]
    for dimension in ("methods", "quantitative", "comparison", "measurement", "implementation", "source_diversity"):
        assert dimension in system
    user = call.last_user_message
    assert QUERY.text in user
    assert "R1 (coverage 0.75; answering papers 1; answering passages: 1 background)" in user
    assert "R2 (coverage 0.00; answering papers 0; answering passages: none)" in user
    assert "R3 (foraging failed" in user


def test_duplicates_and_garbage_are_dropped() -> None:
    draft = {"missing": ["methods", "not-a-dimension"], "requirements": [
        "Physiological effects of microplastics on FRESHWATER fish.",  # repeats R1
        "Find papers about " + NEW[2],  # the wrapper goes, the content stays
        "fish"]}  # too short to be a requirement
    result = asyncio.run(replan_requirements(QUERY, coverages(), ScriptedLLM([draft]), max_new=3))
    assert [(r.id, r.text) for r in result.added] == [("R4", NEW[2])]
    assert result.missing == ("methods",)  # an unknown dimension is dropped, not a failure
    assert result.dropped == 2


def test_near_duplicates_among_the_proposals_and_the_budget() -> None:
    draft = ReplanDraft(missing=["quantitative"], requirements=[NEW[0], NEW[0].upper(), NEW[1]])
    result = asyncio.run(replan_requirements(QUERY, coverages(), ScriptedLLM([draft]), max_new=1))
    assert [(r.id, r.text) for r in result.added] == [("R4", NEW[0])]
    assert result.dropped == 2


def test_a_failing_llm_adds_nothing_and_says_so() -> None:
    result = asyncio.run(replan_requirements(QUERY, coverages(), ScriptedLLM([LLMTimeout("no answer in 180 s")]), 3))
    assert result.added == () and "re-planning: the LLM failed (LLMTimeout" in result.degraded[0]


def test_no_budget_no_call() -> None:
    llm = ScriptedLLM([])
    assert asyncio.run(replan_requirements(QUERY, coverages(), llm, max_new=0)).added == ()
    assert llm.calls == 0


def test_ids_and_progress_helpers() -> None:
    assert next_requirement_ids(["R1", "R2", "R10"], 2) == ["R11", "R12"]
    assert next_requirement_ids([], 1) == ["R1"]
    assert describe_progress([]) == ""


# -- the Orchestrator's loop ------------------------------------------------------------------------------
def make_crew(table: dict[int, dict[str, float]], default: float = 1.0, **script) -> ScriptedCrew:
    """Two documents per search; each requirement's coverage per iteration comes from ``table``
    (iteration -> id -> coverage; a requirement not listed gets ``default``); each iteration brings every
    requirement a new passage (none settles by "nothing new")."""
    return ScriptedCrew(documents=2, coverage=table, default=default, new_passages=1, **script)


def plan() -> RequirementsPlan:
    reqs = (Requirement(id="R1", text="Physiological effects of microplastics on freshwater fish"),
            Requirement(id="R2", text="Routes by which microplastics enter freshwater fish"))
    return RequirementsPlan(run_id=RUN, query=QUERY, requirements=reqs, approved=True)


def run(tmp_path, crew: ScriptedCrew, llm: ScriptedLLM, **run_settings):
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_iterations": 4, "min_coverage": 0.85,
                                            **run_settings})
    emit = RecordingEmit(RUN)
    summary = asyncio.run(Orchestrator(settings, RUN, crew=crew, llm=llm, emit=emit).run(plan()))
    return summary, json.loads((tmp_path / RUN / "run.json").read_text()), emit


STALLED = {1: {"R1": 0.5, "R2": 0.0}, 2: {"R1": 0.5, "R2": 0.0}, 3: {"R1": 1.0, "R2": 0.5}, 4: {"R1": 1.0, "R2": 1.0}}


def test_a_stall_adds_requirements_that_are_foraged_next_and_reach_the_report(tmp_path) -> None:
    llm = ScriptedLLM([ReplanDraft(missing=["quantitative"], requirements=NEW[:2])])
    crew = make_crew(STALLED)
    summary, state, emit = run(tmp_path, crew, llm)
    assert summary.status == "finished", summary.stop_reason
    # iteration 2 did not rise above iteration 1 (0.25 → 0.25): re-planned once, then foraged with R3, R4 until
    # every requirement is answered (R2 at 0.5 after iteration 3 still got new passages: not settled)
    assert crew.foraged_ids() == [["R1", "R2"], ["R1", "R2"], ["R1", "R2", "R3", "R4"], ["R1", "R2", "R3", "R4"]]
    assert [r["id"] for r in state["requirements"]] == ["R1", "R2", "R3", "R4"]
    (replan,) = state["replans"]
    assert replan["after_iteration"] == 2 and replan["missing"] == ["quantitative"]
    assert replan["mean_coverage"] == replan["previous_mean_coverage"] == 0.25
    assert [r["text"] for r in replan["added"]] == NEW[:2]
    (event,) = [e for e in emit.events if e.kind == "replanned"]
    assert event.iteration == 2 and [r["id"] for r in event.payload["requirements"]] == ["R3", "R4"]
    assert [c.requirement.id for c in crew.written[0].coverages] == ["R1", "R2", "R3", "R4"]
    assert set(state["coverage"]) == {"R1", "R2", "R3", "R4"}
    assert state["iterations"][-1]["mean_coverage"] == 1.0 and "every requirement answered" in state["stop_reason"]
    assert llm.calls == 1


def test_rising_coverage_never_replans(tmp_path) -> None:
    llm = ScriptedLLM([])  # a call would exhaust the script and fail the run
    table = {1: {"R1": 0.0, "R2": 0.0}, 2: {"R1": 0.5, "R2": 0.0}, 3: {"R1": 1.0, "R2": 0.0}, 4: {"R1": 1.0, "R2": 1.0}}
    summary, state, emit = run(tmp_path, make_crew(table), llm)
    assert summary.status == "finished" and summary.iterations == 4
    assert not state.get("replans") and "replanned" not in emit.kinds() and llm.calls == 0


def test_the_run_budget_bounds_added_requirements(tmp_path) -> None:
    llm = ScriptedLLM([ReplanDraft(missing=["methods"], requirements=NEW)])
    table = {i: {"R1": 0.0, "R2": 0.0, "R3": 0.0} for i in range(1, 6)}  # stalls every iteration
    summary, state, emit = run(tmp_path, make_crew(table, default=0.0), llm, max_iterations=5, max_added_requirements=1)
    assert summary.iterations == 5 and "maximum of 5" in summary.stop_reason
    assert [r["id"] for r in state["requirements"]] == ["R1", "R2", "R3"]
    assert len(state["replans"]) == 1 and llm.calls == 1  # budget spent: no second call
    assert emit.kinds().count("replanned") == 1


def test_a_replan_adds_no_more_requirements_than_the_cluster_has_room_for(tmp_path) -> None:
    stalls = {i: {"R1": 0.0, "R2": 0.0} for i in range(1, 5)}
    llm = ScriptedLLM([ReplanDraft(missing=["methods"], requirements=NEW)])
    one = make_crew(stalls, default=0.0, room=1)  # its cluster has room for one more Forager (room_for_foragers)
    summary, state, emit = run(tmp_path / "one", one, llm, max_iterations=3)
    assert summary.status == "finished"
    assert [r["id"] for r in state["requirements"]] == ["R1", "R2", "R3"]  # the model proposed more: room for one
    assert len(NEW) > 1 and [len(r["added"]) for r in state["replans"]] == [1]

    silent = ScriptedLLM([])  # no room at all: no re-planning call, and the run says why
    summary, state, emit = run(tmp_path / "none", make_crew(stalls, default=0.0, room=0), silent, max_iterations=3)
    assert summary.status == "finished" and not state.get("replans") and silent.calls == 0
    (skipped,) = [e for e in emit.events if e.kind == "replan_skipped"]
    assert skipped.iteration == 2 and "no room" in skipped.message and "ray.num_cpus" in skipped.message


def test_a_failed_replan_is_recorded_and_the_run_goes_on(tmp_path) -> None:
    llm = ScriptedLLM([LLMTimeout("no answer"), LLMTimeout("no answer"), LLMTimeout("no answer")])
    table = {i: {"R1": 0.5, "R2": 0.0} for i in range(1, 5)}
    summary, state, _ = run(tmp_path, make_crew(table), llm, max_iterations=3)
    assert summary.status == "finished"
    assert state["replans"][0]["added"] == [] and any("re-planning" in d for d in state["degraded"])


def test_a_resumed_run_keeps_the_added_requirements(tmp_path) -> None:
    llm = ScriptedLLM([ReplanDraft(missing=["comparison"], requirements=NEW[:1])])
    first = make_crew(STALLED, die_at=("forage", 3))  # the driver is killed while foraging iteration 3
    try:
        run(tmp_path, first, llm)
    except SystemExit:
        pass
    crashed = json.loads((tmp_path / RUN / "run.json").read_text())
    assert crashed["status"] == "running" and [r["id"] for r in crashed["requirements"]] == ["R1", "R2", "R3"]

    second = make_crew(STALLED)  # a fresh Orchestrator given the original plan (R1, R2) continues the run
    summary, state, _ = run(tmp_path, second, ScriptedLLM([]))
    assert summary.status == "finished"
    assert second.foraged_ids()[0] == ["R1", "R2", "R3"]
    assert [c.requirement.id for c in second.written[0].coverages] == ["R1", "R2", "R3"]
    assert len(state["replans"]) == 1


def test_the_progress_view_shows_added_requirements() -> None:
    from rich.console import Console

    from gateway.cli import ProgressView
    from messages.status import Stage, StatusEvent

    view = ProgressView(plan(), live=True)
    view.update(StatusEvent(run_id=RUN, seq=1, stage=Stage.RUN, kind="replanned", iteration=2,
                            payload={"requirements": [{"id": "R3", "text": NEW[0]}]}))
    view.update(StatusEvent(run_id=RUN, seq=2, stage=Stage.FORAGE, kind="coverage", iteration=3,
                            requirement_id="R3", payload={"coverage": 1.0, "llm_calls": 4}))
    console = Console(width=200, record=True)
    console.print(view)
    row = next(line for line in console.export_text().splitlines() if "R3" in line)
    assert "Which concentrations of microplastics" in row and "1.0" in row and "4" in row


def test_a_proposal_restating_several_of_the_querys_questions_is_dropped() -> None:
    """Seen with the embedded model on the held-out query: re-planning added the query itself, lower-cased, and its
    first question again."""
    query = ResearchQuery(run_id=RUN, text="How do tracing JIT compilers specialize types, and how are recurrent "
                                           "networks used to predict sepsis early?")
    existing = [cov("R1", "How do tracing JIT compilers specialize types?", 0.5),
                cov("R2", "How are recurrent networks used to predict sepsis early?", 0.5)]
    gap = "Which sepsis prediction accuracy do recurrent networks reach on hospital data?"
    draft = ReplanDraft(missing=["quantitative"], requirements=[query.text.lower(), "how do tracing jit compilers "
                                                                "specialize types", gap])
    result = asyncio.run(replan_requirements(query, existing, ScriptedLLM([draft]), max_new=3))
    assert [(r.id, r.text) for r in result.added] == [("R3", gap)] and result.dropped == 2


# -- re-planned requirements pass the derive path's checks (issue 45) ------------------------------------------
def echo_progress(messages, schema):
    """A weak model that answers the re-plan with the lines of the progress it was shown."""
    progress = messages[-1]["content"].split("<<<PROGRESS\n", 1)[1].split("\nPROGRESS>>>", 1)[0]
    lines = [line.split(": ", 1)[0].split("(", 1)[-1].rstrip(")") for line in progress.splitlines()]
    return ReplanDraft(missing=[], requirements=lines[:3])


def test_a_replan_echoing_the_progress_text_adds_nothing() -> None:
    from infra.llm.fakes import FunctionLLM

    result = asyncio.run(replan_requirements(QUERY, coverages(), FunctionLLM(echo_progress), max_new=3))
    assert result.added == ()
    assert result.dropped == 3 and result.rejected == ("3 as Forage's own progress text",)


def test_a_replan_repeating_requirements_or_the_query_or_about_requirements_adds_nothing() -> None:
    draft = ReplanDraft(missing=["methods"], requirements=[
        "Effects of microplastics on the physiology of freshwater fish",  # R1's words only, reordered
        "How do microplastics affect freshwater fish?",  # the query restated
        "The requirement to report microplastic concentrations is a critical aspect of fish studies",  # meta text
    ])
    result = asyncio.run(replan_requirements(QUERY, coverages(), ScriptedLLM([draft]), max_new=3))
    assert result.added == () and result.dropped == 3
    assert set(result.rejected) == {"1 as repeating a requirement the run has", "1 as restating the query",
                                    "1 as a statement about the requirements, not the query's subject"}
    off = ReplanDraft(missing=[], requirements=["Which crop yields do fertilisers raise in drylands?"])
    result = asyncio.run(replan_requirements(QUERY, coverages(), ScriptedLLM([off]), max_new=3))
    assert result.added == () and result.rejected == ("1 as no word of the query's subject",)


def test_added_requirements_are_marked_with_the_iteration_after_which_they_came() -> None:
    llm = ScriptedLLM([ReplanDraft(missing=["quantitative"], requirements=NEW[:1])])
    later = [c.model_copy(update={"iteration": 3}) for c in coverages()]
    (added,) = asyncio.run(replan_requirements(QUERY, later, llm, max_new=3)).added
    assert added.id == "R4" and added.added_after == 3


def test_a_stall_whose_replan_echoes_progress_adds_nothing_and_says_so(tmp_path) -> None:
    from infra.llm.fakes import FunctionLLM

    crew = make_crew(STALLED)
    summary, state, emit = run(tmp_path, crew, FunctionLLM(echo_progress))
    assert summary.status == "finished", summary.stop_reason
    assert [r["id"] for r in state["requirements"]] == ["R1", "R2"]  # nothing added, nothing foraged beyond them
    assert all(ids == ["R1", "R2"] for ids in crew.foraged_ids())
    (replan,) = state["replans"]
    assert replan["added"] == [] and replan["rejected"] == ["2 as Forage's own progress text"]
    (event,) = [e for e in emit.events if e.kind == "replanned"]
    assert "nothing new to add" in event.message and event.payload["requirements"] == []


def test_added_requirements_are_shown_with_their_text_before_they_are_searched(tmp_path) -> None:
    llm = ScriptedLLM([ReplanDraft(missing=["quantitative"], requirements=NEW[:1])])
    crew = make_crew(STALLED)
    summary, state, emit = run(tmp_path, crew, llm)
    assert [r.get("added_after") for r in state["requirements"]] == [None, None, 2]
    kinds = [(e.kind, e.iteration) for e in emit.events if e.kind in ("replanned", "iteration")]
    assert kinds.index(("replanned", 2)) < kinds.index(("iteration", 3))  # shown before iteration 3 searches
    (event,) = [e for e in emit.events if e.kind == "replanned"]
    assert f"R3 “{NEW[0]}”" in event.message and "accepted and searched from iteration 3" in event.message
    assert crew.written[0].coverages[-1].requirement.added_after == 2
