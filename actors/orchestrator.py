"""Orchestrator: requirements, then the search → ingest → forage loop, then the Writer.

The loop (thesis "Knowledge Orchestrator"): search and ingest a first batch, forage every
requirement in parallel (one Forager each); while a requirement is not settled and fewer than
``run.max_iterations`` iterations ran, ask the Searcher for more documents, ingest them and forage
again; then write the report. A requirement is settled (``record.settled``) when it is answered (its
coverage reached ``run.min_coverage``), when its Forager failed, or when an iteration brought it
nothing new (no new document read for it, no new passage above the topic floor): an iteration after
every requirement settled could read nothing new, so it does not run. run.json and the run's summary
say per requirement why it settled (``settled``). The run's state (``RunState``) is checkpointed to ``run.json`` by its
one writer, :class:`~actors.steps.run.record.RunRecord`, after every stage:
the plan, each search's results (before their ingestion), each iteration's ingestion, each requirement's
forage result as its Forager finishes (``foraging``), each iteration's coverage, the end. A resume takes
over what was recorded: a searched batch is not searched again, a finished requirement not foraged again.
When coverage stalls (mean coverage rose by no more than ``run.replan_min_gain`` since the previous
iteration, still below the goal), the Orchestrator re-plans: the LLM names the missing dimensions and
adds 1-3 requirements with fresh ids (at most ``run.max_added_requirements`` per run), recorded in
``run.json`` (``replans``) and as a ``replanned`` event, and foraged from the next iteration on.
A follow-up run (``run(plan, follow_up=...)``, ``forage research --from RUN``; the caller reads the earlier run
once: :func:`~actors.steps.run.record.follow_up_of`) starts from it: its documents become this run's first
documents (no search in iteration 1), every search of its Foragers is limited to those documents and the ones this
run adds, and the earlier run's evidence chunks are judged first.

The logic lives in :class:`Orchestrator`, a plain class that talks to its workers through a
:class:`~actors.crew.Crew` (actors/crew.py): :class:`~actors.ray_crew.RayCrew` runs them as Ray actors,
:class:`~actors.crew.LocalCrew` in-process, for unit tests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from contextlib import aclosing
from typing import Any

from actors.crew import Crew
from actors.ray_crew import RayCrew
from actors.llm_endpoint import actor_llm
from actors.status_hub import HubEmit
from actors.steps.events import Emit
from actors.steps.plan.replan import replan_requirements
from actors.steps.plan.requirements import MAX_PLAN_REQUIREMENTS, derive_requirements
from actors.steps.plan.search_terms import propose_search_queries
from actors.steps.run.record import (
    ANSWERED, RunRecord, RunSuperseded, final_settled, mean_coverage, settled, stop_reason,
)
from actors.steps.run.rundir import RunDir
from infra.cluster import ray_node
from infra.errors import describe
from infra.settings import Settings
from messages.forage import ForageRequest, RequirementCoverage
from messages.ingest import IngestRequest
from messages.plan import PlanRequest, Requirement, RequirementsPlan
from messages.run_state import FollowUp, Replan, RunState
from messages.search import SearchRequest
from messages.status import RunSummary, Stage
from messages.write import WriteRequest

log = logging.getLogger(__name__)


class RunCancelled(Exception):
    """``forage cancel`` asked this run to stop (checked at every stage boundary)."""


class Orchestrator:
    def __init__(self, settings: Settings, run_id: str, hub: object | None = None, *, crew: Crew | None = None,
                 llm: Any | None = None, emit: Emit | None = None) -> None:
        self.settings = settings
        self.run_id = run_id
        self.hub = hub
        self.emit: Emit = emit or HubEmit(run_id, hub)
        self.rundir = RunDir(settings.run.runs_dir, run_id)
        self.record = RunRecord(self.rundir, run_id)  # the run's state and its checkpoints
        self._crew = crew
        self._llm = llm

    @property
    def state(self) -> RunState | None:
        return self.record.state

    # -- requirements -----------------------------------------------------------------------------
    async def plan(self, request: PlanRequest) -> RequirementsPlan:
        self.emit(Stage.PLAN, "started", "deriving requirements from the query")
        self.record.planning(request.query.text)
        try:
            plan = await derive_requirements(request.query, self._model(), self.settings.run.max_requirements)
            plan = await self.propose_search(plan)
        except Exception as exc:  # recorded, so the run is listed as failed with its reason, then raised
            self.record.plan_failed(request.query.text, describe(exc))
            raise
        self.emit(Stage.PLAN, "requirements", f"{len(plan.requirements)} requirements proposed",
                  requirements=[r.model_dump() for r in plan.requirements], degraded=list(plan.degraded),
                  search_queries=[q.model_dump() for q in plan.search_queries])
        self.record.propose(plan)
        return plan

    async def propose_search(self, plan: RequirementsPlan) -> RequirementsPlan:
        """Add proposed search strings to a plan when online sources may be used (never when offline)."""

        if not self.settings.online():
            return plan
        queries, degraded = await propose_search_queries(plan.query.text, plan.requirements, self._model(),
                                                         max_strings=self.settings.search.max_search_strings)
        return plan.model_copy(update={"search_queries": queries, "degraded": (*plan.degraded, *degraded)})

    # -- the loop ---------------------------------------------------------------------------------
    def _crew_or_default(self) -> Crew:
        if self._crew is None:
            # the crew reports through the Orchestrator's own emitter, so its events are ordered
            # before the run's final event
            self._crew = RayCrew(self.settings, self.run_id, self.hub, llm=self._llm_for_workers(),
                                 emit=self.emit)
        return self._crew

    def _model(self) -> Any:
        """The Orchestrator's own LLM (requirements, search strings, re-planning), built once. With
        ``ray.llm_slots`` each call is made like a Forager's by a node's LLM endpoint, to that node's Ollama
        (``ray.ollama_hosts``): the driver's node, where the Orchestrator lives, needs no model server."""
        if self._llm is None:
            self._llm = actor_llm(self.settings)
        return self._llm

    def _llm_for_workers(self) -> Any | None:
        # a fake LLM given to the Orchestrator (tests) is shipped to the workers too (``shippable``); otherwise
        # every worker builds its own client from Settings in its own process
        return self._llm if self._llm is not None and self._llm.shippable else None

    async def run(self, plan: RequirementsPlan, follow_up: FollowUp | None = None) -> RunSummary:
        """The loop, then the report. ``follow_up``: the earlier run this one follows up, as the caller read it
        (:func:`~actors.steps.run.record.follow_up_of`)."""
        if not plan.approved:
            raise ValueError("requirements must be approved before the run starts")
        s = self.settings.run
        record = self.record
        crew = self._crew_or_default()
        started = time.monotonic()
        record.claim()  # from now on an Orchestrator still running for this run stops
        coverages, resumed = record.start(plan, self.settings)  # an earlier process's progress: resume it
        if follow_up is not None and not resumed:
            self._inherit(follow_up)
        plan = record.requirements_with_replanned(plan)
        record.checkpoint()
        self.emit(Stage.RUN, "started", f"run {self.run_id} started", requirements=len(plan.requirements),
                  resumed_after_iteration=record.iterations_done() if resumed else None,
                  node=ray_node())  # the machine that coordinates the run (None outside Ray)
        offered: list[str] = list(record.s.documents)
        reason = record.resume_stop(coverages, s.min_coverage, s.max_iterations) if resumed else ""
        settle = settled(coverages, s.min_coverage, record.s.iterations[-1].new_documents if record.s.iterations else 0,
                         record.failed_in(2))
        iteration = record.iterations_done()
        warming: asyncio.Future[None] | None = None
        try:
            while not reason:
                self._check_cancel()
                iteration += 1
                self.emit(Stage.RUN, "iteration", f"iteration {iteration}", iteration=iteration)
                warming = self._start_foragers(crew, plan.requirements)  # beside the search and the ingest
                results = (record.already_ingested(iteration) or record.follow_up_start(iteration)
                           or record.already_searched(iteration))
                if results is None:
                    results = await crew.search(SearchRequest(
                        run_id=self.run_id, iteration=iteration, query=plan.query.text,
                        requirements=plan.requirements, max_results=self.settings.search.batch_size,
                        exclude_keys=tuple(offered), search_queries=plan.search_queries))
                    record.record_search(iteration, results)
                offered.extend(c.key for c in results.candidates)
                for c in results.candidates:  # each document's first ingest/progress phase
                    self.emit(Stage.INGEST, "progress", f"{c.key}: queued", iteration=iteration, key=c.key,
                              phase="queued")
                ingested = await crew.ingest([IngestRequest(run_id=self.run_id, candidate=c)
                                              for c in results.candidates])
                record.record_ingest(iteration, results, ingested)
                await self._started(warming)
                coverages = await self._forage(crew, iteration, plan.requirements)
                read = record.s.ingested.new_documents if record.s.ingested else 0
                settle = settled(coverages, s.min_coverage, read, record.failed_in(1))  # this one is not recorded yet
                mean = record.record_iteration(iteration, coverages, settle)
                done = [f"{rid} ({why.split(':', 1)[0].split(' in iteration', 1)[0]})" for rid, why in settle.items()
                        if why]
                self.emit(Stage.RUN, "coverage", f"iteration {iteration}: mean coverage {mean:.2f}"
                          + (f"; settled: {', '.join(done)}" if done else ""),
                          iteration=iteration, mean_coverage=mean,
                          coverage={c.requirement.id: c.coverage for c in coverages}, settled=settle)
                # every requirement answered, failed twice or brought nothing new by this iteration: the next one could
                # read nothing new, so it does not run
                reason = stop_reason(settle, mean, s.min_coverage, iteration, s.max_iterations)
                answered = all(why.startswith(ANSWERED) for why in settle.values())
                if iteration < s.max_iterations and not answered:
                    # settled without answers (a stall) is when a re-plan may name what is missing
                    added = await self._replan(crew, plan, coverages, iteration, mean)
                    if added:  # new requirements: foraged from the next iteration on (unsettled until then)
                        plan = plan.model_copy(update={"requirements": (*plan.requirements, *added)})
                        reason = ""
                if reason:
                    break

            self._check_cancel()
            self.emit(Stage.WRITE, "started", "writing the report")
            report = await crew.write(WriteRequest(
                run_id=self.run_id, query=plan.query, coverages=tuple(coverages), iterations=iteration,
                coverage_history=tuple(record.s.coverage_history()),
                doc_ids=record.scope(s.whole_store)[0]))
            self.rundir.save_report(report)
            why = final_settled(settle, s.max_iterations, iteration)
            record.finish(reason, coverages, report, time.monotonic() - started, why)
            summary = RunSummary(
                run_id=self.run_id, status="finished", iterations=iteration, stop_reason=reason,
                mean_coverage=mean_coverage(coverages), run_dir=str(self.rundir.path),
                report_path=str(self.rundir.report_md), documents_stored=record.documents_stored(),
                documents_failed=record.documents_failed(), settled=why)
            await self._final_event("finished", reason, iteration, report=str(self.rundir.report_md),
                                    mean_coverage=summary.mean_coverage)
            return summary
        except RunSuperseded as exc:  # not ours any more: write nothing, send no final event
            return RunSummary(run_id=self.run_id, status="superseded", iterations=iteration, stop_reason=str(exc),
                              mean_coverage=mean_coverage(coverages), run_dir=str(self.rundir.path))
        except RunCancelled:
            reason = "cancelled (forage cancel); `forage resume` continues it"
            record.cancelled(reason)
            await self._final_event("failed", reason, iteration)
            return RunSummary(run_id=self.run_id, status="cancelled", iterations=iteration, stop_reason=reason,
                              mean_coverage=mean_coverage(coverages), run_dir=str(self.rundir.path))
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            record.failed(reason)
            await self._final_event("failed", reason, iteration)
            return RunSummary(run_id=self.run_id, status="failed", iterations=iteration, stop_reason=reason,
                              mean_coverage=mean_coverage(coverages), run_dir=str(self.rundir.path))
        finally:
            if warming is not None and not warming.done():  # the run ended before it foraged
                warming.cancel()
                await asyncio.gather(warming, return_exceptions=True)
            await crew.close()

    def _check_cancel(self) -> None:
        self.record.check_owner()
        if self.rundir.cancel_requested():
            raise RunCancelled

    def _inherit(self, follow_up: FollowUp) -> None:
        """Follow up an earlier run (RunRecord.inherit: its documents and evidence seeds)."""
        docs, seeds = self.record.inherit(follow_up)
        self.emit(Stage.RUN, "follow_up", f"following up run {follow_up.earlier_run}: {docs} documents, "
                                          f"{seeds} evidence chunks as a starting point",
                  from_run=follow_up.earlier_run, documents=docs, seed_chunks=seeds)

    async def _replan(self, crew: Crew, plan: RequirementsPlan, coverages: Sequence[RequirementCoverage],
                      iteration: int, mean: float) -> tuple[Requirement, ...]:
        """New requirements when coverage stalled since the previous iteration (below the goal, within the
        run's budget of added requirements and the room the crew has for their Foragers: ``room_for_foragers``,
        where it says); () otherwise. Recorded in ``replans`` and a ``replanned`` event."""

        s = self.settings.run
        done = self.record.s.iterations
        if len(done) < 2 or mean >= s.min_coverage:
            return ()
        previous = done[-2].mean_coverage
        if mean - previous > s.replan_min_gain:
            return ()
        room = min(s.max_added_requirements - self.record.replans_used(),
                   MAX_PLAN_REQUIREMENTS - len(plan.requirements))
        if room <= 0:
            return ()
        fits = crew.room_for_foragers()
        if fits is not None and fits < room:
            if fits <= 0:
                self.emit(Stage.RUN, "replan_skipped",
                          f"coverage stalled ({previous:.2f} → {mean:.2f}) but the Ray cluster has no room for "
                          "another Forager beside this run's workers: no requirement added (give Ray more logical "
                          "CPUs, ray.num_cpus, or lower ray.actor_cpus)", iteration=iteration, mean_coverage=mean,
                          previous_mean_coverage=previous, room=0)
                return ()
            room = fits
        result = await replan_requirements(plan.query, coverages, self._model(), room)
        self.record.record_replan(
            Replan(after_iteration=iteration, mean_coverage=mean, previous_mean_coverage=previous,
                   missing=list(result.missing), added=list(result.added), dropped=result.dropped,
                   degraded=list(result.degraded), rejected=list(result.rejected)),
            (*plan.requirements, *result.added))
        # shown before they are searched (the CLI prints it, the dashboard lists it); the approval the researcher
        # gave with the plan (--yes) accepts them
        added = "; ".join(f"{r.id} “{r.text}”" for r in result.added)
        dropped = f"{result.dropped} proposal(s) dropped: {', '.join(result.rejected)}" if result.rejected else ""
        self.emit(Stage.RUN, "replanned",
                  f"coverage stalled ({previous:.2f} → {mean:.2f}): "
                  + (f"missing {', '.join(result.missing)}; " if result.missing
                     else "the model named nothing missing; ")
                  + (f"added {added}, accepted and searched from iteration {iteration + 1}" if result.added
                     else "nothing new to add")
                  + (f" ({dropped})" if dropped else ""),
                  iteration=iteration, mean_coverage=mean, previous_mean_coverage=previous,
                  missing=list(result.missing), requirements=[r.model_dump() for r in result.added],
                  rejected=list(result.rejected), degraded=list(result.degraded))
        return result.added

    async def _forage(self, crew: Crew, iteration: int,
                      requirements: Sequence[Requirement]) -> list[RequirementCoverage]:
        """Forage ``requirements`` for ``iteration``, checkpointing each requirement's result as its Forager
        finishes (``foraging`` in run.json). Results an earlier process of this run recorded for this
        iteration (same requirement) are taken over, not foraged again. Results in ``requirements`` order."""
        done = self.record.foraged_before(iteration, requirements)
        for cov in done.values():  # what their Foragers reported before the resume, for this process's view
            rid = cov.requirement.id
            self.emit(Stage.FORAGE, "coverage", f"{rid}: coverage {cov.coverage:.2f} (foraged before the "
                      "resume)", iteration=iteration, requirement_id=rid, coverage=cov.coverage,
                      llm_calls=cov.llm_calls, answering_papers=cov.answering_papers, taken_over=True)
        scope, seeds = self.record.scope(self.settings.run.whole_store)
        todo = [ForageRequest(run_id=self.run_id, iteration=iteration, requirement=r, doc_ids=scope,
                              seed_chunk_ids=seeds) for r in requirements if r.id not in done]
        if todo:
            async with aclosing(crew.forage_each(todo)) as results:
                async for cov in results:
                    done[cov.requirement.id] = cov
                    self.record.record_foraged(cov)
        return [done[r.id] for r in requirements]

    @staticmethod
    def _start_foragers(crew: Crew, requirements: Sequence[Requirement]) -> asyncio.Future[None]:
        """Start the requirements' Foragers (processes, store, clients, each requirement's embedding) in the
        background (:meth:`Crew.start_foragers`; a crew that starts them on first use does nothing here): the search
        and the ingest run meanwhile, and the iteration's foraging starts at once. Foragers already started are only
        warmed again."""
        return asyncio.ensure_future(crew.start_foragers(requirements))

    @staticmethod
    async def _started(warming: asyncio.Future[None] | None) -> None:
        """Wait for :meth:`_start_foragers`. A Forager that could not start is not an error here: its
        requirement's foraging fails and says why."""
        if warming is None:
            return
        try:
            await warming
        except Exception:  # noqa: BLE001 - reported by the forage call of that requirement
            log.debug("starting the Foragers ahead failed", exc_info=True)

    async def _final_event(self, kind: str, message: str, iteration: int, **payload: Any) -> None:
        """The run's last event is awaited, so it is in the hub before run() returns."""
        ref = self.emit(Stage.RUN, kind, message, iteration=iteration, **payload)
        if ref is not None:
            await ref
