"""The one owner of a run's state (:class:`~messages.run_state.RunState` in ``run.json``).

:class:`RunRecord` is what the Orchestrator's loop writes through: the proposal, the start (or the take-over
of an earlier process's progress: the resume point), each search's results before their ingestion, each
iteration's ingestion, each requirement's forage result as its Forager finishes, each iteration's coverage,
and the end (finished / cancelled / failed). Every write is a checkpoint, made only while this process owns
the run (:meth:`RunDir.claim`). The stop rule (:func:`settled` per requirement, :func:`stop_reason`) and the status a run is shown with
(:func:`shown_status`: "interrupted" for a running run whose owner is gone) live here too, each once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from actors.steps.run.rundir import RunDir
from infra.errors import ConfigError
from messages.forage import RequirementCoverage
from messages.ingest import IngestResult
from messages.plan import Requirement, RequirementsPlan
from messages.run_state import (DocumentEntry, FollowUp, Foraging, FromRun, Ingested, IterationRecord,
                                RecordedSettings, Replan, Resumed, RunState, Searched)
from messages.search import SearchResults
from messages.write import Report


class RunSuperseded(Exception):
    """Another process took this run over (``forage resume``): this one writes nothing more."""


# statuses under which an earlier process of the run got as far as approval: a start takes its progress over
TAKES_OVER = ("running", "cancelled", "failed")


def mean_coverage(coverages: Sequence[RequirementCoverage]) -> float:
    if not coverages:
        return 0.0
    return sum(c.coverage if c.status == "ok" else 0.0 for c in coverages) / len(coverages)  # a failed one: 0


ANSWERED, NOTHING_NEW, FAILED = "answered", "nothing new", "foraging failed"  # how a requirement settles


def new_passages(coverage: RequirementCoverage) -> int:
    """Passages an iteration brought the requirement (at or above the topic floor; its judgements where the Forager
    did not count them)."""
    return coverage.new_passages if coverage.new_passages is not None else len(coverage.judgements)


def settled(coverages: Sequence[RequirementCoverage], min_coverage: float, new_documents: int,
            failed_before: Collection[str] = ()) -> dict[str, str]:
    """Per requirement, why it is settled after the iteration ``coverages`` report ("" while it is not): answered
    (its coverage reached ``min_coverage``), its Forager failed in this iteration and in the one before
    (``failed_before``: the requirements whose Forager failed then), or the iteration brought it nothing new: it read
    no new document (``new_documents``: stored by the iteration) and found the requirement no new passage above the
    topic floor. A Forager that failed once gets one more iteration (a model server that kept failing for a minute,
    a killed process: a fresh Forager may well succeed; one that fails again is not retried). A requirement that got
    something new is not settled: more of the same may follow; nor is one whose iteration read new documents that
    held nothing for it, since the search's next batch may (the library is read most relevant first, but a
    requirement's papers can come later). Settling is read from each iteration afresh, so a later document that
    brings a settled requirement something unsettles it."""
    out: dict[str, str] = {}
    for c in coverages:
        if c.status == "failed":
            again = c.requirement.id in failed_before
            out[c.requirement.id] = (f"{FAILED} in iteration {c.iteration}, as in the one before "
                                     f"({c.error or 'unknown error'})" if again else "")
        elif c.coverage >= min_coverage:
            out[c.requirement.id] = (f"{ANSWERED}: coverage {c.coverage:.2f} reached the goal {min_coverage:.2f} "
                                     f"(iteration {c.iteration})")
        elif new_passages(c) == 0 and new_documents == 0:
            out[c.requirement.id] = (f"{NOTHING_NEW} in iteration {c.iteration}: no new document read, no new passage "
                                     f"above the topic floor (coverage {c.coverage:.2f})")
        else:
            out[c.requirement.id] = ""
    return out


def stop_reason(settle: dict[str, str], mean: float, min_coverage: float, iterations_done: int,
                max_iterations: int) -> str:
    """Why the loop stops after ``iterations_done`` iterations (``settle``: :func:`settled`); "" to go on. It stops
    when every requirement is settled, else at ``max_iterations``."""
    if settle and all(settle.values()):
        kinds = Counter(why.split(" in iteration", 1)[0].split(":", 1)[0] for why in settle.values())
        if kinds[ANSWERED] == len(settle):
            return f"coverage {mean:.2f} reached the goal {min_coverage:.2f}: every requirement answered"
        parts = [f"{kinds[k]} {k}" for k in (ANSWERED, NOTHING_NEW, FAILED) if kinds[k]]
        return f"every requirement settled (coverage {mean:.2f}): {', '.join(parts)}"
    if iterations_done >= max_iterations:
        return f"reached the maximum of {max_iterations} iterations (coverage {mean:.2f})"
    return ""


def final_settled(settle: dict[str, str], max_iterations: int, iterations_done: int) -> dict[str, str]:
    """``settle`` with a reason for each requirement the run ended on before it settled."""
    unsettled = (f"not settled: the run reached the maximum of {max_iterations} iterations"
                 if iterations_done >= max_iterations else "not settled when the run stopped")
    return {rid: why or unsettled for rid, why in settle.items()}


def shown_status(state: RunState | None, rundir: RunDir | None = None, *, live: bool = False) -> str:
    """The status to show for a run: run.json's, except "interrupted" for a "running" or "planning" run no one
    drives (not ``live`` here, and its owner process is gone: its driver was killed, its gateway stopped)."""
    if state is None:
        return "unknown"
    if (state.status in ("running", "planning") and not live and rundir is not None
            and rundir.owner_alive() is False):
        return "interrupted"
    return state.status


RESUMABLE = ("interrupted", "cancelled", "failed")  # shown statuses a resume continues


def resumable(state: RunState | None, rundir: RunDir | None = None, *, live: bool = False) -> bool:
    """A resume (`forage resume`, POST .../resume) continues it: approved, not finished, and driven by no one —
    or "running" with an owner that cannot be seen from here (on another machine): resuming takes it over."""
    if live or state is None or not state.approved:
        return False
    status = shown_status(state, rundir, live=live)
    return status in RESUMABLE or (status == "running" and (rundir is None or rundir.owner_alive() is None))


class RunRecord:
    """Writes the run's state; every method that changes it checkpoints it (while this process owns the run)."""

    def __init__(self, rundir: RunDir, run_id: str) -> None:
        self.rundir = rundir
        self.run_id = run_id
        self.state: RunState | None = None
        self._token: str | None = None

    # -- ownership and checkpoints -----------------------------------------------------------------------
    def claim(self) -> None:
        """From now on an earlier process still driving this run stops at its next checkpoint."""
        self._token = self.rundir.claim()

    def check_owner(self) -> None:
        if self._token is not None and self.rundir.owner() != self._token:
            raise RunSuperseded("another process took this run over (forage resume); this one stopped")

    def checkpoint(self) -> None:
        self.check_owner()
        assert self.state is not None
        self.rundir.save_state(self.state)

    @property
    def s(self) -> RunState:
        assert self.state is not None, "the run has no state yet"
        return self.state

    # -- the proposal and the start ----------------------------------------------------------------------
    def planning(self, query: str) -> None:
        """Planning starts: the run is listed from now on (shown "interrupted" should its process stop before a
        proposal; nothing to resume then)."""
        self.claim()
        self.state = RunState(run_id=self.run_id, status="planning", query=query)
        self.rundir.save_state(self.state)

    def propose(self, plan: RequirementsPlan) -> None:
        self.state = RunState(run_id=self.run_id, status="awaiting_approval", query=plan.query.text,
                              proposed_requirements=list(plan.requirements),
                              proposed_search_queries=list(plan.search_queries), degraded=list(plan.degraded))
        self.rundir.save_state(self.state)

    def plan_failed(self, query: str, reason: str) -> None:
        """No plan came: the run is recorded as failed with the reason (listed by `forage runs` and the
        dashboard; nothing to resume)."""
        self.state = RunState(run_id=self.run_id, status="failed", query=query, error=f"planning failed: {reason}")
        self.rundir.save_state(self.state)

    def start(self, plan: RequirementsPlan, settings: Any) -> tuple[list[RequirementCoverage], bool]:
        """Begin the approved run, taking over what an earlier process of it recorded (documents, iterations,
        the last coverages: the resume point). Returns (the last coverages, whether this is a resume)."""
        previous = None if self.state is not None else self.rundir.load_state()
        base = self.state or RunState(run_id=self.run_id, status="running")
        s = settings.run
        self.state = base.model_copy(update={
            "run_id": self.run_id, "status": "running", "query": plan.query.text,
            "requirements": list(plan.requirements), "search_queries": list(plan.search_queries),
            "settings": RecordedSettings(preset=settings.preset, min_coverage=s.min_coverage,
                                         max_iterations=s.max_iterations, llm=settings.llm.backend,
                                         embedder=settings.embed.backend, store=settings.store.backend,
                                         resolved=settings.record()),  # every value, for resume (no secrets)
            "store_path": str(settings.store.path), "library": str(settings.search.library or ""),
            "iterations": [], "documents": {}, "search_skipped": []})
        if previous is None:
            return [], False
        if previous.status in TAKES_OVER:
            # an earlier process of this run started it: this is a resume, so a cancel asked of that process is
            # over (also when it was asked before any progress was recorded)
            self.rundir.cancel_flag.unlink(missing_ok=True)
        if not (previous.documents or previous.iterations or previous.searched):
            return [], False
        taken = {key: getattr(previous, key) for key in (
            "iterations", "documents", "search_skipped", "acquisition", "last_coverages", "ingested", "searched",
            "foraging", "replans", "from_run", "proposed_requirements", "proposed_search_queries", "degraded")
            if key in previous.model_fields_set}
        self.state = self.state.model_copy(update={
            **taken, "resumed": [*previous.resumed, Resumed(after_iteration=len(previous.iterations),
                                                            status_was=previous.status)]})
        return list(previous.last_coverages), True

    def inherit(self, follow_up: FollowUp) -> tuple[int, int]:
        """A follow-up (:func:`follow_up_of`): the earlier run's stored documents become this run's, its evidence
        chunks the seeds. (documents, seeds)."""
        self.s.documents.update(follow_up.documents)
        self.s.from_run = FromRun(run_id=follow_up.earlier_run, documents=len(follow_up.documents),
                                  seed_chunk_ids=list(follow_up.seed_chunk_ids))
        return len(follow_up.documents), len(follow_up.seed_chunk_ids)

    def requirements_with_replanned(self, plan: RequirementsPlan) -> RequirementsPlan:
        """``plan`` plus the requirements an earlier process of this run added by re-planning."""
        known = {r.id for r in plan.requirements}
        added = [r for rep in self.s.replans for r in rep.added if r.id not in known]
        if not added:
            return plan
        plan = plan.model_copy(update={"requirements": (*plan.requirements, *added)})
        self.s.requirements = list(plan.requirements)
        return plan

    # -- the resume point ----------------------------------------------------------------------------------
    def iterations_done(self) -> int:
        return len(self.s.iterations)

    def already_ingested(self, iteration: int) -> SearchResults | None:
        """When an earlier process searched and ingested ``iteration`` but did not forage it: no new search
        (its documents are in the store and in ``documents``), only the forage is left."""
        ingested = self.s.ingested
        if ingested is None or ingested.iteration != iteration or self.iterations_done() >= iteration:
            return None
        return SearchResults(run_id=self.run_id, iteration=iteration, exhausted=ingested.exhausted)

    def follow_up_start(self, iteration: int) -> SearchResults | None:
        """A follow-up's first iteration forages the earlier run's documents before searching for more."""
        if iteration != 1 or self.s.from_run is None:
            return None
        return SearchResults(run_id=self.run_id, iteration=iteration)

    def already_searched(self, iteration: int) -> SearchResults | None:
        """When an earlier process searched ``iteration`` but did not finish ingesting its documents: the
        recorded candidates, not a new search (documents it did ingest are found in the store: skipped)."""
        searched, ingested = self.s.searched, self.s.ingested
        if (searched is None or searched.iteration != iteration or self.iterations_done() >= iteration
                or (ingested is not None and ingested.iteration == iteration)):
            return None
        return SearchResults(run_id=self.run_id, iteration=iteration, exhausted=searched.exhausted,
                             candidates=tuple(searched.candidates))

    def resume_stop(self, coverages: Sequence[RequirementCoverage], min_coverage: float, max_iterations: int) -> str:
        """The stop reason when the recorded iterations already met the stop rule (then only the report is left)."""
        if not coverages or not self.iterations_done():
            return ""
        return stop_reason(settled(coverages, min_coverage, self.s.iterations[-1].new_documents, self.failed_in(2)),
                           mean_coverage(coverages), min_coverage, self.iterations_done(), max_iterations)

    def failed_in(self, back: int = 1) -> set[str]:
        """The requirements whose Forager failed in the recorded iteration ``back`` from the last (1: the last
        recorded one); :func:`settled` settles a requirement on its second failure in a row."""
        if len(self.s.iterations) < back:
            return set()
        return {rid for rid, status in self.s.iterations[-back].status.items() if status == "failed"}

    def scope(self, whole_store: bool) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
        """(doc_ids the Foragers search, seed chunk ids): the run's own documents (its library, the papers its
        searches found, a follow-up's earlier run's) and a follow-up's seeds; (None, ()) with ``whole_store``."""
        follow = self.s.from_run
        if whole_store and follow is None:
            return None, ()
        return tuple(self.s.stored_doc_ids()), tuple(follow.seed_chunk_ids if follow else ())

    # -- the loop's records --------------------------------------------------------------------------------
    def record_search(self, iteration: int, results: SearchResults) -> None:
        """A search's results, before their ingestion: a resume after a crash during the ingestion takes them
        over (:meth:`already_searched`) instead of searching (and downloading) again."""
        for c in results.candidates:
            if c.source != "library":  # where an online paper came from and how it was acquired
                self.s.acquisition[c.key] = c.model_dump(
                    mode="json", include={"title", "source", "doi", "arxiv_id", "openalex_id", "year",
                                          "found_by", "score", "score_reason", "abstract_only", "path",
                                          "download_failures", "landing_url"})
        self.s.search_skipped.extend(results.skipped)
        self.s.searched = Searched(iteration=iteration, exhausted=results.exhausted,
                                   candidates=list(results.candidates))
        self.checkpoint()

    def record_ingest(self, iteration: int, results: SearchResults, ingested: Sequence[IngestResult]) -> None:
        for res in ingested:
            self.s.documents[res.key] = DocumentEntry.model_validate(
                res.model_dump(mode="json", exclude={"run_id", "created_at"}))
        if self.s.ingested is None or self.s.ingested.iteration != iteration:  # for resume: only forage is left
            self.s.ingested = Ingested(iteration=iteration, new_documents=len(results.candidates),
                                       exhausted=results.exhausted)
        self.checkpoint()

    def foraged_before(self, iteration: int, requirements: Sequence[Requirement]) -> dict[str, RequirementCoverage]:
        """Results an earlier process of this run recorded for ``iteration`` (same requirement, finished well):
        taken over, not foraged again. A failed one (its Forager died) is tried again."""
        partial = self.s.foraging
        recorded = partial.done if partial is not None and partial.iteration == iteration else {}
        done = {r.id: recorded[r.id] for r in requirements
                if r.id in recorded and recorded[r.id].requirement == r and recorded[r.id].status == "ok"}
        self.s.foraging = Foraging(iteration=iteration, done=dict(done))
        return done

    def record_foraged(self, coverage: RequirementCoverage) -> None:
        """One Forager's result, as it finishes."""
        assert self.s.foraging is not None
        self.s.foraging.done[coverage.requirement.id] = coverage
        self.checkpoint()

    def record_iteration(self, iteration: int, coverages: Sequence[RequirementCoverage],
                         settle: dict[str, str] | None = None) -> float:
        """The finished iteration (it replaces the partial ``foraging`` record), with what it brought each requirement
        and which are settled (``settle``: :func:`settled`); returns its mean coverage."""
        mean = mean_coverage(coverages)
        self.s.iterations.append(IterationRecord(
            iteration=iteration, mean_coverage=mean,
            new_documents=self.s.ingested.new_documents if self.s.ingested else 0,
            coverage={c.requirement.id: c.coverage for c in coverages},
            status={c.requirement.id: c.status for c in coverages},
            llm_calls={c.requirement.id: c.llm_calls for c in coverages},
            answering_papers={c.requirement.id: c.answering_papers for c in coverages},
            overruled={c.requirement.id: c.overruled for c in coverages},  # by the relevance check
            unconfirmed={c.requirement.id: c.unconfirmed for c in coverages},
            errors={c.requirement.id: c.error for c in coverages if c.status == "failed"},
            new_passages={c.requirement.id: new_passages(c) for c in coverages},
            settled=dict(settle or {})))
        self.s.last_coverages = list(coverages)  # for resume
        self.s.foraging = None
        self.checkpoint()
        return mean

    def replans_used(self) -> int:
        return sum(len(rep.added) for rep in self.s.replans)

    def record_replan(self, replan: Replan, requirements: Sequence[Requirement]) -> None:
        self.s.replans.append(replan)
        if replan.degraded:
            self.s.degraded = [*self.s.degraded, *replan.degraded]
        if replan.added:
            self.s.requirements = list(requirements)
        self.checkpoint()

    # -- the end -------------------------------------------------------------------------------------------
    def finish(self, reason: str, coverages: Sequence[RequirementCoverage], report: Report, seconds: float,
               settle: dict[str, str] | None = None) -> None:
        self.s.status = "finished"
        self.s.stop_reason = reason
        self.s.settled = dict(settle or {})
        self.s.final_coverage = mean_coverage(coverages)
        self.s.coverage = {c.requirement.id: c.coverage for c in coverages}
        self.s.failed_requirements = {c.requirement.id: c.error for c in coverages if c.status == "failed"}
        self.s.degraded = sorted({*self.s.degraded,
                                  *(f"{c.requirement.id}: {f}" for c in coverages for f in c.failed_steps),
                                  *(f"writer: {f}" for f in report.failed_steps)})
        self.s.sources = list(report.sources)
        self.s.removed_citations = report.removed_citations
        self.s.report = str(self.rundir.report_md)
        self.s.seconds = round(seconds, 1)
        self.checkpoint()

    def cancelled(self, reason: str) -> None:
        self.s.status = "cancelled"
        self.s.stop_reason = reason
        self.checkpoint()

    def failed(self, reason: str) -> None:
        self.s.status = "failed"
        self.s.error = reason
        self.checkpoint()

    def documents_stored(self) -> int:
        return sum(1 for d in self.s.documents.values() if d.status in ("stored", "skipped"))

    def documents_failed(self) -> int:
        return sum(1 for d in self.s.documents.values() if d.status == "failed")


__all__ = ["RESUMABLE", "RunRecord", "RunSuperseded", "final_settled", "mean_coverage", "new_passages", "resumable",
           "settled", "shown_status", "stop_reason"]


def follow_up_of(earlier: RunState, from_run: str, seed_chunks: int) -> FollowUp:
    """What a follow-up of ``earlier`` (run ``from_run``) takes from it, read once: its store, embedder and library,
    its stored documents (status "skipped": already in the store, "from run X"), and up to ``seed_chunks`` chunks of
    its evidence, taken in turn from each of its requirements. Its query is not copied (forgetting it stays
    complete). ConfigError when it has no stored document."""
    docs = {key: entry.model_copy(update={"status": "skipped", "reason": f"from run {from_run}"})
            for key, entry in earlier.documents.items() if entry.in_store}
    if not docs:
        raise ConfigError(f"run {from_run!r} has no stored documents to follow up: start a new run instead")
    lists = [[cid for ev in cov.evidence for cid in ev.chunk_ids] for cov in earlier.last_coverages]
    seeds: list[str] = []
    for turn in range(max((len(x) for x in lists), default=0)):  # in turn: each requirement's best first
        seeds.extend(x[turn] for x in lists if turn < len(x) and x[turn] not in seeds)
    return FollowUp(earlier_run=from_run, store_path=earlier.store_path,
                    embedder=earlier.settings.embedder if earlier.settings else None, library=earlier.library,
                    documents=docs, seed_chunk_ids=tuple(seeds[:seed_chunks]))
