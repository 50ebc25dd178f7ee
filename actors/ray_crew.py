"""The crew of a run on Ray: its workers as Ray actors (a Searcher, a pool of Ingestors, one Forager per requirement,
a Writer), with the options of actors/options.py, placed in the run's reservation (actors/reservation.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

from actors.crew import Crew, as_completed
from actors.ingestor_pool import IngestorPool
from actors.reservation import RunReservation, WorkerKey, kill_actor
from actors.status_hub import HubEmit
from actors.steps.events import Emit
from infra.settings import Settings
from messages.forage import ForageRequest, RequirementCoverage
from messages.ingest import IngestRequest, IngestResult
from messages.plan import Requirement
from messages.search import SearchRequest, SearchResults
from messages.status import Stage
from messages.write import Report, WriteRequest

T = TypeVar("T")


class RayCrew(Crew):
    """Workers as Ray actors: a Searcher, a pool of Ingestors (:class:`~actors.ingestor_pool.IngestorPool`), one
    Forager per requirement, a Writer.

    The loop workers of the ``reserve`` roles are placed in the run's placement groups
    (:class:`~actors.reservation.RunReservation`): the first group is made when the first of them is created and
    holds the Searcher, the Ingestor pool and a Forager for every requirement known by then (:meth:`start_foragers`
    makes them known before the iteration's search); a re-plan's new requirements get a group of their own. They are
    removed with the loop workers, before the Writer is created. A role not in ``reserve`` asks the cluster for its
    room worker by worker (the benches that run one role alone)."""

    def __init__(self, settings: Settings, run_id: str, hub: object | None, llm: Any | None = None,
                 emit: Emit | None = None,
                 reserve: Sequence[str] = ("searcher", "ingestor", "forager")) -> None:
        self.settings, self.run_id, self.hub, self.llm = settings, run_id, hub, llm
        self._searcher = None
        self._ingestor_pool: int | None = None
        self._foragers: dict[str, Any] = {}
        self._writer = None
        self.emit: Emit = emit or HubEmit(run_id, hub)
        self.reservation = RunReservation(settings, run_id, self.emit, reserve, self._pool_size)
        self.ingestors = IngestorPool(settings, self.emit, self._pool_size, self._new_ingestor)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        return await self.ingestors.ingest(requests)

    async def start_ingestors(self) -> None:
        """Create the Ingestor pool (:func:`actors.options.ingestor_pool_size`) and build their steps now."""
        await self.ingestors.start()

    def room_for_foragers(self) -> int | None:
        """:meth:`actors.reservation.RunReservation.room_for_foragers`."""
        return self.reservation.room_for_foragers()

    def _actor(self, cls: type, role: str, *args: Any, **kwargs: Any) -> Any:
        """A worker that asks the cluster for its own room (the Writer; a role not reserved)."""
        from actors.options import options_for

        options = self.reservation.fit_node(role, options_for(role, self.settings))  # type: ignore[arg-type]
        return self._start(cls, options, role, args, kwargs, watch=True)

    def _worker(self, cls: type, role: str, key: WorkerKey, *args: Any, **kwargs: Any) -> Any:
        """A loop worker: in its bundle of the run's reservation when its role is reserved (the group watched, not
        the worker), else as :meth:`_actor`."""
        from actors.options import bundle_of, in_group, options_for

        options = options_for(role, self.settings)  # type: ignore[arg-type]
        if role not in self.reservation.reserve or not bundle_of(options):
            return self._start(cls, self.reservation.fit_node(role, options), role, args, kwargs, watch=True)
        group, index = self.reservation.bundle(key)
        options = {**options, "num_cpus": group.bundle_specs[index].get("CPU", 0.0)}  # its bundle's (maybe fitted)
        return self._start(cls, in_group(options, group, index), role, args, kwargs, watch=False)

    def _start(self, cls: type, options: dict[str, Any], role: str, args: tuple[Any, ...], kwargs: dict[str, Any],
               watch: bool) -> Any:
        import ray

        handle: Any = ray.remote(cls).options(**options).remote(*args, **kwargs)
        if watch:
            self.reservation.watch(self.reservation.watch_actor(handle, role, options))
        return handle

    async def search(self, request: SearchRequest) -> SearchResults:
        from actors.options import method_options
        from actors.searcher import Searcher

        opts = method_options("searcher", "search", self.settings)

        def searcher() -> Any:
            if self._searcher is None:
                self._searcher = self._worker(Searcher, "searcher", "searcher", self.settings, self.run_id,
                                              self.hub, llm=self.llm)
            return self._searcher

        def lost() -> None:
            kill_actor(self._searcher)
            self._searcher = None

        return await self._again_on_a_fresh_actor(Stage.SEARCH, "searcher", searcher, lost,
                                                  lambda actor: actor.search.options(**opts).remote(request))

    async def _again_on_a_fresh_actor(self, stage: Stage, role: str, actor: Callable[[], Any],
                                      lost: Callable[[], None], call: Callable[[Any], Awaitable[T]]) -> T:
        """``call(actor())``; where the actor is lost under it (``RayActorError``: its process died, its node left
        the cluster, or Ray is still restarting it and refuses calls), the call once more on a fresh actor, up to
        ``ray.max_task_retries`` times, with an event saying so. Only for calls that may be made twice: a search
        (same request, same candidates) and the report (written from the request alone)."""
        import ray

        lost_times = 0
        while True:
            try:
                return await call(actor())
            except ray.exceptions.RayActorError as exc:
                lost()
                lost_times += 1
                if lost_times > self.settings.ray.max_task_retries:
                    raise
                self.emit(stage, "retried", f"the {role} was lost ({type(exc).__name__}); asked again on a "
                          "fresh one", reason=f"{role} lost ({lost_times})")

    def _pool_size(self) -> int:
        from actors.options import ingestor_pool_size

        if self._ingestor_pool is None:
            self._ingestor_pool = ingestor_pool_size(self.settings)
        return self._ingestor_pool

    def _new_ingestor(self, slot: int) -> Any:
        from actors.ingestor import Ingestor

        return self._worker(Ingestor, "ingestor", f"ingestor/{slot}", self.settings, self.run_id, self.hub,
                            llm=self.llm if self.settings.ingest.contextual else None)

    def _forager(self, requirement_id: str) -> Any:
        from actors.forager import Forager

        if requirement_id not in self._foragers:
            self.reservation.plan([requirement_id])
            self._foragers[requirement_id] = self._worker(Forager, "forager", f"forager/{requirement_id}",
                                                          self.settings, self.run_id, self.hub, llm=self.llm)
        return self._foragers[requirement_id]

    def _drop_forager(self, requirement_id: str) -> None:
        kill_actor(self._foragers.pop(requirement_id, None))

    def start_foragers(self, requirements: Sequence[Requirement]) -> Awaitable[None]:
        """Create the Foragers of these requirements and build and warm their steps now (not on first use). The
        requirements are known to the run's reservation as soon as this is called, before it is awaited: the
        Searcher created meanwhile makes a group that holds their Foragers too."""
        self.reservation.plan(r.id for r in requirements)
        return self._start_foragers(requirements)

    async def _start_foragers(self, requirements: Sequence[Requirement]) -> None:
        await asyncio.gather(*(self._forager(r.id).ready.remote(r) for r in requirements))

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        self.reservation.plan(r.requirement.id for r in requests)
        for r in requests:
            self._forager(r.requirement.id)
        return list(await asyncio.gather(*(self._forage_one(r) for r in requests)))

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        self.reservation.plan(r.requirement.id for r in requests)
        for r in requests:
            self._forager(r.requirement.id)
        return as_completed([self._forage_one(r) for r in requests])

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
        """The report, by a Writer created now. The loop is over: its Searcher, Ingestors and Foragers are let go
        first, so the Writer's CPU reservation comes out of theirs. Were they kept, two runs on a full cluster could
        each wait for a Writer the other's idle workers hold the room of (seen on a 2-CPU Ray: both runs stuck at
        "writing the report")."""
        from actors.writer import Writer

        self._release_loop_workers()

        def writer() -> Any:
            if self._writer is None:
                self._writer = self._actor(Writer, "writer", self.settings, self.run_id, self.hub, llm=self.llm)
            return self._writer

        def lost() -> None:
            kill_actor(self._writer)
            self._writer = None

        return await self._again_on_a_fresh_actor(Stage.WRITE, "writer", writer, lost,
                                                  lambda actor: actor.write.remote(request))

    def _release_loop_workers(self) -> None:
        for actor in [self._searcher, *self._foragers.values()]:
            kill_actor(actor)
        self._searcher, self._foragers = None, {}
        self.ingestors.release()
        self.reservation.release()

    async def close(self) -> None:
        await self.reservation.close()
        for actor in [self._searcher, self._writer, *self._foragers.values()]:
            kill_actor(actor)
        self.ingestors.release()
        self.reservation.release()
