"""Orchestrator: requirements, then the search → ingest → forage loop, then the Writer.

The loop (thesis "Knowledge Orchestrator"): search and ingest a first batch, forage every
requirement in parallel (one Forager each); while mean coverage is below ``run.min_coverage`` and
fewer than ``run.max_iterations`` iterations ran, ask the Searcher for more documents, ingest them
and forage again; then write the report. The run's state (``RunState``) is checkpointed to ``run.json`` by its
one writer, :class:`~actors.steps.run_record.RunRecord`, after every stage:
the plan, each search's results (before their ingestion), each iteration's ingestion, each requirement's
forage result as its Forager finishes (``foraging``), each iteration's coverage, the end. A resume takes
over what was recorded: a searched batch is not searched again, a finished requirement not foraged again.
When coverage stalls (mean coverage rose by no more than ``run.replan_min_gain`` since the previous
iteration, still below the goal), the Orchestrator re-plans: the LLM names the missing dimensions and
adds 1-3 requirements with fresh ids (at most ``run.max_added_requirements`` per run), recorded in
``run.json`` (``replans``) and as a ``replanned`` event, and foraged from the next iteration on.
A follow-up run (``run(plan, from_run=...)``, ``forage research --from RUN``) starts from an earlier
run: its documents become this run's first documents (no search in iteration 1), every search of its
Foragers is limited to those documents and the ones this run adds, and the earlier run's evidence
chunks are judged first.

The logic lives in :class:`Orchestrator`, a plain class that talks to its workers through a
:class:`Crew`. :class:`RayCrew` runs the workers as Ray actors (one Forager per requirement, a pool
of Ingestors); :class:`LocalCrew` runs the same step objects in-process, for unit tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Sequence
from contextlib import aclosing
from typing import Any, Protocol, TypeVar

from actors.status_hub import HubEmit
from actors.steps.events import Emit
from actors.steps.run_record import RunRecord, RunSuperseded, mean_coverage, stop_reason
from actors.steps.rundir import RunDir
from infra.cluster import ray_node
from infra.settings import Settings
from messages.forage import ForageRequest, RequirementCoverage
from messages.ingest import IngestRequest, IngestResult
from messages.plan import PlanRequest, Requirement, RequirementsPlan
from messages.run_state import Replan, RunState
from messages.search import SearchRequest, SearchResults
from messages.status import RunSummary, Stage
from messages.write import Report, WriteRequest


T = TypeVar("T")


class Crew(Protocol):
    async def search(self, request: SearchRequest) -> SearchResults: ...
    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]: ...
    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]: ...
    # optional: ``forage_each(requests)``, an async iterator of the results as each Forager finishes, so each
    # is checkpointed at once (see :func:`forage_each`)
    async def write(self, request: WriteRequest) -> Report: ...
    async def close(self) -> None: ...


class RunCancelled(Exception):
    """``forage cancel`` asked this run to stop (checked at every stage boundary)."""


def forage_each(crew: Crew, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
    """The requests' results as each Forager finishes: the crew's ``forage_each`` where it has one
    (LocalCrew, RayCrew), else its ``forage`` results once all are done."""
    each = getattr(crew, "forage_each", None)
    if each is not None:
        return each(requests)

    async def all_at_once() -> AsyncGenerator[RequirementCoverage, None]:
        for cov in await crew.forage(requests):
            yield cov

    return all_at_once()


async def _as_completed(aws: Sequence[Awaitable[T]]) -> AsyncGenerator[T, None]:
    """Yield the results of ``aws`` as each completes; closing the generator early (or a failure) cancels the
    rest here and waits for them (a Ray actor call already sent goes on in its actor: only the wait is dropped)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        for next_done in asyncio.as_completed(tasks):
            yield await next_done
    finally:
        pending = [task for task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


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
        from actors.steps.plan import derive_requirements

        self.emit(Stage.PLAN, "started", "deriving requirements from the query")
        self.record.planning(request.query.text)
        try:
            plan = await derive_requirements(request.query, self._model(), self.settings.run.max_requirements)
            plan = await self.propose_search(plan)
        except Exception as exc:  # recorded, so the run is listed as failed with its reason, then raised
            from infra.errors import describe

            self.record.plan_failed(request.query.text, describe(exc))
            raise
        self.emit(Stage.PLAN, "requirements", f"{len(plan.requirements)} requirements proposed",
                  requirements=[r.model_dump() for r in plan.requirements], degraded=list(plan.degraded),
                  search_queries=[q.model_dump() for q in plan.search_queries])
        self.record.propose(plan)
        return plan

    async def propose_search(self, plan: RequirementsPlan) -> RequirementsPlan:
        """Add proposed search strings to a plan when online sources may be used (never when offline)."""
        from actors.searcher import online
        from actors.steps.search_terms import propose_search_queries

        if not online(self.settings):
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
            from actors.llm_endpoint import actor_llm

            self._llm = actor_llm(self.settings)
        return self._llm

    def _llm_for_workers(self) -> Any | None:
        # a fake LLM given to the Orchestrator (tests) is shipped to the workers too (class attribute
        # ``shippable``); otherwise every worker builds its own client from Settings in its own process
        return self._llm if getattr(self._llm, "shippable", False) else None

    async def run(self, plan: RequirementsPlan, from_run: str | None = None) -> RunSummary:
        """The loop, then the report. ``from_run``: an earlier run id in the same runs folder to follow up."""
        if not plan.approved:
            raise ValueError("requirements must be approved before the run starts")
        s = self.settings.run
        record = self.record
        crew = self._crew_or_default()
        started = time.monotonic()
        record.claim()  # from now on an Orchestrator still running for this run stops
        coverages, resumed = record.start(plan, self.settings)  # an earlier process's progress: resume it
        if from_run and not resumed:
            self._inherit(from_run)
        plan = record.requirements_with_replanned(plan)
        record.checkpoint()
        self.emit(Stage.RUN, "started", f"run {self.run_id} started", requirements=len(plan.requirements),
                  resumed_after_iteration=record.iterations_done() if resumed else None,
                  node=ray_node())  # the machine that coordinates the run (None outside Ray)
        offered: list[str] = list(record.s.documents)
        reason = record.resume_stop(coverages, s.min_coverage, s.max_iterations) if resumed else ""
        iteration = record.iterations_done()
        try:
            while not reason:
                self._check_cancel()
                iteration += 1
                self.emit(Stage.RUN, "iteration", f"iteration {iteration}", iteration=iteration)
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
                coverages = await self._forage(crew, iteration, plan.requirements)
                mean = record.record_iteration(iteration, coverages)
                self.emit(Stage.RUN, "coverage", f"iteration {iteration}: mean coverage {mean:.2f}",
                          iteration=iteration, mean_coverage=mean,
                          coverage={c.requirement.id: c.coverage for c in coverages})
                reason = stop_reason(mean, iteration, s.min_coverage, s.max_iterations)
                if reason:
                    break
                added = await self._replan(plan, coverages, iteration, mean)
                if added:  # new requirements: forage them next iteration, even when sources are exhausted
                    plan = plan.model_copy(update={"requirements": (*plan.requirements, *added)})
                    continue
                if results.exhausted and not results.candidates and self._nothing_new(coverages):
                    reason = f"sources exhausted and nothing new to forage (coverage {mean:.2f})"
                    break

            self._check_cancel()
            self.emit(Stage.WRITE, "started", "writing the report")
            report = await crew.write(WriteRequest(
                run_id=self.run_id, query=plan.query, coverages=tuple(coverages), iterations=iteration,
                coverage_history=tuple(record.s.coverage_history()),
                doc_ids=record.scope(s.whole_store)[0]))
            self.rundir.save_report(report)
            record.finish(reason, coverages, report, time.monotonic() - started)
            summary = RunSummary(
                run_id=self.run_id, status="finished", iterations=iteration, stop_reason=reason,
                mean_coverage=mean_coverage(coverages), run_dir=str(self.rundir.path),
                report_path=str(self.rundir.report_md), documents_stored=record.documents_stored(),
                documents_failed=record.documents_failed())
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
            await crew.close()

    def _check_cancel(self) -> None:
        self.record.check_owner()
        if self.rundir.cancel_requested():
            raise RunCancelled

    def _inherit(self, from_run: str) -> None:
        """Follow up ``from_run`` (RunRecord.inherit: its documents and evidence seeds)."""
        from infra.errors import ConfigError

        earlier = RunDir(self.settings.run.runs_dir, from_run)
        state = earlier.load_state() if from_run != self.run_id else None
        if state is None:
            raise ConfigError(f"no earlier run {from_run!r} in {earlier.path.parent} to follow up")
        docs, seeds = self.record.inherit(state, from_run, self.settings.forage.seed_chunks)
        self.emit(Stage.RUN, "follow_up", f"following up run {from_run}: {docs} documents, "
                                          f"{seeds} evidence chunks as a starting point",
                  from_run=from_run, documents=docs, seed_chunks=seeds)

    async def _replan(self, plan: RequirementsPlan, coverages: Sequence[RequirementCoverage], iteration: int,
                      mean: float) -> tuple[Requirement, ...]:
        """New requirements when coverage stalled since the previous iteration (below the goal, within the
        run's budget of added requirements); () otherwise. Recorded in ``replans`` and a ``replanned`` event."""
        from actors.steps.plan import MAX_PLAN_REQUIREMENTS, replan_requirements

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
        result = await replan_requirements(plan.query, coverages, self._model(), room)
        self.record.record_replan(
            Replan(after_iteration=iteration, mean_coverage=mean, previous_mean_coverage=previous,
                   missing=list(result.missing), added=list(result.added), dropped=result.dropped,
                   degraded=list(result.degraded)),
            (*plan.requirements, *result.added))
        ids = ", ".join(r.id for r in result.added) or "none"
        self.emit(Stage.RUN, "replanned",
                  f"coverage stalled ({previous:.2f} → {mean:.2f}): missing {', '.join(result.missing) or '—'}; "
                  f"added {ids}", iteration=iteration, mean_coverage=mean, previous_mean_coverage=previous,
                  missing=list(result.missing), requirements=[r.model_dump() for r in result.added],
                  degraded=list(result.degraded))
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
            async with aclosing(forage_each(crew, todo)) as results:
                async for cov in results:
                    done[cov.requirement.id] = cov
                    self.record.record_foraged(cov)
        return [done[r.id] for r in requirements]

    @staticmethod
    def _nothing_new(coverages: Sequence[RequirementCoverage]) -> bool:
        # the Foragers judged nothing new this iteration: the store is foraged out for these requirements
        return all(c.status == "failed" or not c.judgements for c in coverages)

    async def _final_event(self, kind: str, message: str, iteration: int, **payload: Any) -> None:
        """The run's last event is awaited, so it is in the hub before run() returns."""
        ref = self.emit(Stage.RUN, kind, message, iteration=iteration, **payload)
        if ref is not None:
            await ref


# -- crews --------------------------------------------------------------------------------------------
class LocalCrew:
    """Runs the step objects in this process (unit tests; no Ray)."""

    def __init__(self, searcher: Any, ingestor: Any, foragers: dict[str, Any], writer: Any) -> None:
        self.searcher, self.ingestor, self.foragers, self.writer = searcher, ingestor, foragers, writer

    async def search(self, request: SearchRequest) -> SearchResults:
        if asyncio.iscoroutinefunction(self.searcher.search):
            return await self.searcher.search(request)
        return await asyncio.to_thread(self.searcher.search, request)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        return [await asyncio.to_thread(self.ingestor.ingest, r) for r in requests]

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        return list(await asyncio.gather(*(self.foragers[r.requirement.id].forage(r) for r in requests)))

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        return _as_completed([self.foragers[r.requirement.id].forage(r) for r in requests])

    async def write(self, request: WriteRequest) -> Report:
        return await self.writer.write(request)

    async def close(self) -> None:
        return None


class RayCrew:
    """Workers as Ray actors: a Searcher, a pool of Ingestors, one Forager per requirement, a Writer."""

    def __init__(self, settings: Settings, run_id: str, hub: object | None, llm: Any | None = None,
                 emit: Emit | None = None) -> None:
        self.settings, self.run_id, self.hub, self.llm = settings, run_id, hub, llm
        self._searcher = None
        self._ingestors: list[Any] = []
        self._ingestor_pool: int | None = None
        self._foragers: dict[str, Any] = {}
        self._writer = None
        self.emit: Emit = emit or HubEmit(run_id, hub)

    def _actor(self, cls: type, role: str, *args: Any, **kwargs: Any) -> Any:
        import ray

        from actors.options import options_for

        return ray.remote(cls).options(**options_for(role, self.settings)).remote(*args, **kwargs)  # type: ignore[arg-type]

    async def search(self, request: SearchRequest) -> SearchResults:
        from actors.options import method_options
        from actors.searcher import Searcher

        if self._searcher is None:
            self._searcher = self._actor(Searcher, "searcher", self.settings, self.run_id, self.hub, llm=self.llm)
        return await self._searcher.search.options(**method_options("searcher", "search", self.settings)).remote(request)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        from actors.options import method_options

        if not requests:
            return []
        while len(self._ingestors) < self._pool_size():
            self._ingestors.append(self._new_ingestor())
        queue: asyncio.Queue[tuple[int, IngestRequest]] = asyncio.Queue()
        for i, r in enumerate(requests):
            queue.put_nowait((i, r))
        results: list[IngestResult | None] = [None] * len(requests)
        opts = method_options("ingestor", "ingest", self.settings)
        timeout = self.settings.ingest.timeout_s
        ready: set[int] = set()  # slots whose Ingestor has built its step

        async def worker(slot: int) -> None:
            import ray

            while not queue.empty():
                i, req = queue.get_nowait()
                t0 = time.monotonic()
                crashes = 0
                while results[i] is None:
                    actor = self._ingestors[slot]
                    try:
                        if slot not in ready:  # a new Ingestor builds its parts before the clock starts
                            await actor.ready.remote()
                            ready.add(slot)
                            t0 = time.monotonic()
                        results[i] = await asyncio.wait_for(actor.ingest.options(**opts).remote(req), timeout)
                    except TimeoutError:  # a parse that hangs would hang again: no second try
                        self._replace_ingestor(slot)
                        ready.discard(slot)
                        results[i] = self._failed(req, f"parsing took longer than {timeout:.0f}s; ingestor replaced",
                                                  time.monotonic() - t0, retryable=True)
                    except ray.exceptions.RayActorError as exc:
                        # the process died under this document (segfault, OOM, kill): a fresh Ingestor in its
                        # place, and the document once more (ingest is idempotent) up to ray.max_task_retries
                        crashes += 1
                        self._replace_ingestor(slot)
                        ready.discard(slot)
                        if crashes <= self.settings.ray.max_task_retries:
                            self.emit(Stage.INGEST, "progress", f"{req.candidate.key}: queued again after a crash",
                                      key=req.candidate.key, phase="queued", reason=f"ingestor crashed ({crashes})")
                            continue
                        results[i] = self._failed(
                            req, f"ingestor crashed on {crashes} attempt(s) ({type(exc).__name__}); "
                                 "the document may crash the parser", time.monotonic() - t0, retryable=True)
                    except Exception as exc:  # noqa: BLE001 — one document, not the run
                        results[i] = self._failed(req, f"{type(exc).__name__}: {exc}", time.monotonic() - t0)

        await asyncio.gather(*(worker(slot) for slot in range(len(self._ingestors))))
        return [r for r in results if r is not None]

    async def start_ingestors(self) -> None:
        """Create the Ingestor pool (:func:`actors.options.ingestor_pool_size`) and build their steps now."""
        while len(self._ingestors) < self._pool_size():
            self._ingestors.append(self._new_ingestor())
        await asyncio.gather(*(actor.ready.remote() for actor in self._ingestors))

    def _pool_size(self) -> int:
        from actors.options import ingestor_pool_size

        if self._ingestor_pool is None:
            self._ingestor_pool = ingestor_pool_size(self.settings)
        return self._ingestor_pool

    def _new_ingestor(self) -> Any:
        from actors.ingestor import Ingestor

        return self._actor(Ingestor, "ingestor", self.settings, self.run_id, self.hub,
                           llm=self.llm if self.settings.ingest.contextual else None)

    def _replace_ingestor(self, slot: int) -> None:
        """A fresh Ingestor in ``slot``: the old one hung or crashed on a document (Ray may have restarted
        it, or given up after ``ray.max_restarts``); the next documents must not depend on which."""
        import ray

        try:
            ray.kill(self._ingestors[slot], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._ingestors[slot] = self._new_ingestor()

    def _failed(self, req: IngestRequest, reason: str, seconds: float, retryable: bool = False) -> IngestResult:
        self.emit(Stage.INGEST, "failed", f"{req.candidate.path or req.candidate.key}: {reason}",
                  key=req.candidate.key, reason=reason)
        return IngestResult(run_id=req.run_id, key=req.candidate.key, path=req.candidate.path, status="failed",
                            reason=reason, retryable=retryable, seconds=seconds)

    def _forager(self, requirement_id: str) -> Any:
        from actors.forager import Forager

        if requirement_id not in self._foragers:
            self._foragers[requirement_id] = self._actor(Forager, "forager", self.settings, self.run_id,
                                                         self.hub, llm=self.llm)
        return self._foragers[requirement_id]

    def _drop_forager(self, requirement_id: str) -> None:
        import ray

        actor = self._foragers.pop(requirement_id, None)
        if actor is not None:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass

    async def start_foragers(self, requirement_ids: Sequence[str]) -> None:
        """Create the Foragers of these requirements and build their steps now (not on first use)."""
        await asyncio.gather(*(self._forager(rid).ready.remote() for rid in requirement_ids))

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        for r in requests:
            self._forager(r.requirement.id)
        return list(await asyncio.gather(*(self._forage_one(r) for r in requests)))

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        for r in requests:
            self._forager(r.requirement.id)
        return _as_completed([self._forage_one(r) for r in requests])

    async def _forage_one(self, r: ForageRequest) -> RequirementCoverage:
        import ray

        try:
            return await self._foragers[r.requirement.id].forage.remote(r)
        except ray.exceptions.RayError as exc:
            # its process died (or it is still restarting and refuses calls): a fresh Forager next time,
            # which does not depend on Ray's restart timing or on restarts left
            self._drop_forager(r.requirement.id)
            reason = f"forager died: {type(exc).__name__}"
            self.emit(Stage.FORAGE, "failed", reason, iteration=r.iteration, requirement_id=r.requirement.id)
            return RequirementCoverage(run_id=r.run_id, requirement=r.requirement, iteration=r.iteration,
                                       status="failed", coverage=0.0, error=reason)

    async def write(self, request: WriteRequest) -> Report:
        from actors.writer import Writer

        if self._writer is None:
            self._writer = self._actor(Writer, "writer", self.settings, self.run_id, self.hub, llm=self.llm)
        return await self._writer.write.remote(request)

    async def close(self) -> None:
        import ray

        for actor in [self._searcher, self._writer, *self._ingestors, *self._foragers.values()]:
            if actor is not None:
                ray.kill(actor, no_restart=True)
