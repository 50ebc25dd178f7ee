"""The crews an Orchestrator drives: who searches, ingests, forages and writes for a run.

:class:`Crew` is what the Orchestrator (actors/orchestrator.py) talks to. :class:`RayCrew` runs the workers as Ray
actors (a Searcher, a pool of Ingestors whose every document is one call with a timeout and a crashed Ingestor
replaced, one Forager per requirement, a Writer), with the options of actors/options.py; :class:`LocalCrew` runs the
same step objects in-process, for unit tests. The loop itself does not know which it has.

A RayCrew reserves its loop workers (Searcher, Ingestors, Foragers) together, as one Ray placement group
(:class:`Reservation` keeps which worker takes which bundle): on a full cluster a run waits for all of its room
holding none of it, so two runs queue instead of each holding part of what it needs and waiting for the rest.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

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


WorkerKey = str  # "searcher", "ingestor/0", "forager/R2": one loop worker of a run, whoever plays it now


class Reservation:
    """Which bundle of which of a run's placement groups each loop worker takes; bookkeeping only (RayCrew creates
    and removes the groups). A worker replaced (crashed, hung, lost) takes the bundle of the one before it. Workers
    that are not placed yet get a new group, all of them at once: the first holds the whole loop, a later one only
    the requirements a re-plan added."""

    def __init__(self) -> None:
        self.groups: list[tuple[WorkerKey, ...]] = []  # per group, its workers in bundle order

    def spot(self, key: WorkerKey) -> tuple[int, int] | None:
        """(group, bundle) of ``key``; None when it has none yet."""
        for g, keys in enumerate(self.groups):
            if key in keys:
                return g, keys.index(key)
        return None

    def unplaced(self, keys: Sequence[WorkerKey]) -> list[WorkerKey]:
        """``keys`` without a bundle yet, in order, once each."""
        return [k for k in dict.fromkeys(keys) if self.spot(k) is None]

    def add(self, keys: Sequence[WorkerKey]) -> int:
        """A new group for ``keys`` (none of which may have a bundle); its number."""
        keys = tuple(dict.fromkeys(keys))
        if not keys or any(self.spot(k) is not None for k in keys):
            raise ValueError(f"a new group needs workers without a bundle, got {keys}")
        self.groups.append(keys)
        return len(self.groups) - 1

    def clear(self) -> None:
        self.groups = []

    @staticmethod
    def describe(keys: Sequence[WorkerKey]) -> str:
        """``keys`` in words: "a searcher, 2 ingestors and 3 foragers"."""
        counts: dict[str, int] = {}
        for k in keys:
            role = k.split("/", 1)[0]
            counts[role] = counts.get(role, 0) + 1
        parts = [f"{'an' if role[0] in 'aeiou' else 'a'} {role}" if n == 1 else f"{n} {role}s"
                 for role, n in counts.items()]
        return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def waiting_message(workers: str, short: str, whole: str, first: bool) -> str:
    """What a run says when its ``workers`` (:meth:`Reservation.describe`) wait for room: ``short`` is what the
    cluster lacks now, ``whole`` what the run lacks even with the whole cluster to itself ('' when it would fit);
    ``first``: the run's first group (it holds nothing meanwhile), else a re-plan's Foragers."""
    if whole:  # no other run is in the way: this run alone needs more than the cluster has
        return (f"this run's workers ({workers}) need more room than the whole Ray cluster has ({whole}, all of the "
                "run's workers together): they start only when machines join; lower ray.actor_cpus or give Ray more "
                "logical CPUs (ray.num_cpus: the CPU gate, not this reservation, keeps CPU work to the cores)")
    return (f"this run's workers ({workers}) wait for room on the Ray cluster ({short}): other runs' workers hold it; "
            "they start together when there is room"
            + ("; the run holds none of it meanwhile" if first else " (its other workers keep theirs)"))


def _node_cpus() -> dict[str, float]:
    """The CPUs of each live node of the Ray cluster, by node id."""
    import ray

    return {n["NodeID"]: float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")}


def _remove_groups(groups: list[Any]) -> None:
    """Remove these placement groups (emptying the list in place); one already gone, or Ray itself, is skipped."""
    ray = sys.modules.get("ray")
    while groups:
        group = groups.pop()
        if ray is None or not ray.is_initialized():
            continue
        try:
            ray.util.remove_placement_group(group)
        except Exception:  # noqa: BLE001 - already removed, or Ray shutting down
            pass


class Crew(Protocol):
    """What the Orchestrator asks of the workers of a run. A crew subclasses this port (``class X(Crew)``) and so
    inherits the defaults of the capabilities a crew may lack: results all at once (``forage_each``), nothing to
    start ahead (``start_foragers``), no known bound on added Foragers (``room_for_foragers``)."""

    async def search(self, request: SearchRequest) -> SearchResults: ...
    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]: ...
    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]: ...
    async def write(self, request: WriteRequest) -> Report: ...
    async def close(self) -> None: ...

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        """The requests' results as each Forager finishes, so each is checkpointed at once. By default the
        results of :meth:`forage`, once all are done."""

        async def all_at_once() -> AsyncGenerator[RequirementCoverage, None]:
            for cov in await self.forage(requests):
                yield cov

        return all_at_once()

    def start_foragers(self, requirements: Sequence[Requirement]) -> Awaitable[None]:
        """Start (and warm) the Foragers of ``requirements`` ahead of their first forage, in the background of the
        iteration's search and ingest. By default there is nothing to start: Foragers start on first use."""
        return _nothing()

    def room_for_foragers(self) -> int | None:
        """How many more Foragers the crew could ever hold (a re-plan adds no more requirements than that); None
        when it is not known or there is no bound (the default)."""
        return None


async def _nothing() -> None:
    return None


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


class LocalIngestor(Protocol):
    """What a :class:`LocalCrew` asks of its ingestor (an IngestStep, or an Ingestor used in-process)."""

    def ingest(self, request: IngestRequest) -> IngestResult: ...
    def index_new_chunks(self) -> int: ...


class LocalForager(Protocol):
    """What a :class:`LocalCrew` asks of a Forager (a ForageStep, or a Forager used in-process)."""

    async def forage(self, request: ForageRequest) -> RequirementCoverage: ...
    async def warm(self, requirement: Requirement | None = None) -> None: ...


class LocalCrew(Crew):
    """Runs the step objects in this process (unit tests; no Ray). ``foragers``: by requirement id (a mapping that
    makes a requirement's Forager on first use may leave it out until then: it is started then, not ahead)."""

    def __init__(self, searcher: Any, ingestor: LocalIngestor, foragers: Mapping[str, LocalForager],
                 writer: Any) -> None:
        self.searcher, self.ingestor, self.foragers, self.writer = searcher, ingestor, foragers, writer

    async def search(self, request: SearchRequest) -> SearchResults:
        if asyncio.iscoroutinefunction(self.searcher.search):
            return await self.searcher.search(request)
        return await asyncio.to_thread(self.searcher.search, request)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        results = [await asyncio.to_thread(self.ingestor.ingest, r) for r in requests]
        if any(r.status == "stored" for r in results):
            await asyncio.to_thread(self.ingestor.index_new_chunks)
        return results

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        return list(await asyncio.gather(*(self.foragers[r.requirement.id].forage(r) for r in requests)))

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        return _as_completed([self.foragers[r.requirement.id].forage(r) for r in requests])

    async def start_foragers(self, requirements: Sequence[Requirement]) -> None:
        for r in requirements:
            forager = self.foragers.get(r.id)
            if forager is not None:
                await forager.warm(r)

    async def write(self, request: WriteRequest) -> Report:
        return await self.writer.write(request)

    async def close(self) -> None:
        return None


class RayCrew(Crew):
    """Workers as Ray actors: a Searcher, a pool of Ingestors, one Forager per requirement, a Writer.

    The loop workers of the ``reserve`` roles are placed in the run's placement groups (:class:`Reservation`): the
    first group is made when the first of them is created and holds the Searcher, the Ingestor pool and a Forager
    for every requirement known by then (:meth:`start_foragers` makes them known before the iteration's search);
    a re-plan's new requirements get a group of their own. They are removed with the loop workers, before the
    Writer is created. A role not in ``reserve`` asks the cluster for its room worker by worker (the benches that
    run one role alone)."""

    def __init__(self, settings: Settings, run_id: str, hub: object | None, llm: Any | None = None,
                 emit: Emit | None = None,
                 reserve: Sequence[str] = ("searcher", "ingestor", "forager")) -> None:
        self.settings, self.run_id, self.hub, self.llm = settings, run_id, hub, llm
        self._searcher = None
        self._ingestors: list[Any] = []
        self._ingestor_pool: int | None = None
        self._foragers: dict[str, Any] = {}
        self._writer = None
        self.emit: Emit = emit or HubEmit(run_id, hub)
        self._watches: set[asyncio.Task[None]] = set()
        self._reserve = tuple(reserve)
        self._requirements: dict[str, None] = {}  # the requirement ids whose Foragers the run will have, in order
        self._reservation = Reservation()
        # Ray placement groups, by the Reservation's group numbers. Unlike an actor, a group is not let go when the
        # last handle to it goes: a crew dropped without close() removes them when it is collected (else they would
        # hold their room until the process that made them exits)
        self._groups: list[Any] = []
        weakref.finalize(self, _remove_groups, self._groups)

    def _actor(self, cls: type, role: str, *args: Any, **kwargs: Any) -> Any:
        """A worker that asks the cluster for its own room (the Writer; a role not reserved)."""
        from actors.options import options_for

        options = self._fit_node(role, options_for(role, self.settings))  # type: ignore[arg-type]
        return self._start(cls, options, role, args, kwargs, watch=True)

    def _worker(self, cls: type, role: str, key: WorkerKey, *args: Any, **kwargs: Any) -> Any:
        """A loop worker: in its bundle of the run's reservation when its role is reserved (the group watched, not
        the worker), else as :meth:`_actor`."""
        from actors.options import bundle_of, in_group, options_for

        options = options_for(role, self.settings)  # type: ignore[arg-type]
        if role not in self._reserve or not bundle_of(options):
            return self._start(cls, self._fit_node(role, options), role, args, kwargs, watch=True)
        group, index = self._bundle(key)
        options = {**options, "num_cpus": group.bundle_specs[index].get("CPU", 0.0)}  # its bundle's (maybe fitted)
        return self._start(cls, in_group(options, group, index), role, args, kwargs, watch=False)

    def _start(self, cls: type, options: dict[str, Any], role: str, args: tuple[Any, ...], kwargs: dict[str, Any],
               watch: bool) -> Any:
        import ray

        handle: Any = ray.remote(cls).options(**options).remote(*args, **kwargs)
        if watch:
            self._watch(self._watch_placement(handle, role, options))
        return handle

    def _watch(self, coro: Awaitable[None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # created outside a running loop: nobody to tell
            if asyncio.iscoroutine(coro):
                coro.close()
            return
        watch = loop.create_task(coro)  # type: ignore[arg-type]
        self._watches.add(watch)
        watch.add_done_callback(self._watches.discard)

    def _loop_keys(self) -> list[WorkerKey]:
        """Every loop worker of the run so far whose role is reserved, in bundle order for a first group: the
        Foragers first, then the Searcher and Ingestors (on a lab cluster the spread group then put one Forager on
        each machine: tests/cluster/test_run_on_cluster.py)."""
        keys: list[WorkerKey] = []
        if "forager" in self._reserve:
            keys += [f"forager/{rid}" for rid in self._requirements]
        if "searcher" in self._reserve:
            keys.append("searcher")
        if "ingestor" in self._reserve:
            keys += [f"ingestor/{slot}" for slot in range(self._pool_size())]
        return keys

    def _bundle(self, key: WorkerKey) -> tuple[Any, int]:
        """(placement group, bundle index) of ``key``; a new group first, for every loop worker without a bundle
        yet, when ``key`` has none."""
        spot = self._reservation.spot(key)
        if spot is None:
            import ray

            from actors.options import RUN_GROUP_STRATEGY

            shaped = [(k, self._shape(k)) for k in self._reservation.unplaced([*self._loop_keys(), key])]
            keys = [k for k, b in shaped if b]  # a worker that reserves nothing: no bundle
            bundles = [b for _, b in shaped if b]
            if not self._groups:
                bundles = self._fit_cluster(keys, bundles)
            # named for `ray list placement-groups`; a live group's name must be unique (a crew of the same run
            # before this one may still hold its group)
            group = ray.util.placement_group(bundles, strategy=RUN_GROUP_STRATEGY,
                                             name=f"forage-{self.run_id}-{len(self._groups)}-{secrets.token_hex(3)}")
            self._groups.append(group)
            self._reservation.add(keys)
            self._watch(self._watch_group(group, keys, bundles, first=len(self._groups) == 1))
            spot = self._reservation.spot(key)
            assert spot is not None
        return self._groups[spot[0]], spot[1]

    def _fit_cluster(self, keys: Sequence[WorkerKey], bundles: list[dict[str, float]]) -> list[dict[str, float]]:
        """The run's first reservation, its CPU shares made smaller where all of them together would not fit on the
        cluster's nodes even with the cluster to itself (:func:`actors.options.fitted_share`; a lab machine with few
        cores and many requirements): the run then starts and has the cluster alone, where it would otherwise wait
        for machines that may never join. Said in a ``run/fitted`` event. GPU shares are kept as asked."""
        from actors.options import fitted_share

        cpus = [b["CPU"] for b in bundles if b.get("CPU", 0.0) > 0]
        if not cpus:
            return bundles
        asked = max(cpus)
        nodes = list(_node_cpus().values())
        share = fitted_share(len(cpus), asked, nodes)
        if share >= asked:
            return bundles
        workers, total = Reservation.describe(keys), sum(nodes)
        self.emit(Stage.RUN, "fitted", f"this run's workers ({workers}) reserve {share:g} CPU each instead of "
                  f"ray.actor_cpus {asked:g}: all of them together then fit the Ray cluster's {total:g} "
                  f"CPU{'' if total == 1 else 's'}, so the run starts with the cluster to itself (other runs wait for "
                  "it; the CPU gate, not this reservation, keeps CPU work to the cores)", workers=workers, share=share,
                  asked=asked, cluster_cpus=total)
        return [{**b, "CPU": min(b["CPU"], share)} if b.get("CPU", 0.0) > 0 else b for b in bundles]

    def _fit_node(self, role: str, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` of a worker that asks the cluster for its own room (the Writer), its CPU share cut to the
        largest machine's CPUs where it asks for more than any has (else it would never start). Said in a
        ``run/fitted`` event."""
        from actors.options import fitted_share

        asked = float(options.get("num_cpus") or 0.0)
        share = fitted_share(1, asked, list(_node_cpus().values()))
        if share >= asked:
            return options
        self.emit(Stage.RUN, "fitted", f"the {role} reserves {share:g} CPU instead of ray.actor_cpus {asked:g}: no "
                  "machine of the Ray cluster has more", workers=Reservation.describe([role]), share=share, asked=asked)
        return {**options, "num_cpus": share}

    def room_for_foragers(self) -> int | None:
        """How many more Foragers the Ray cluster could ever hold beside this run's reservation (its machines' CPUs,
        whoever holds them now): a re-plan adds no more requirements than that, since a Forager that can
        never be placed would hang the run. Counted node by node (:func:`actors.options.room_on_nodes`: a bundle lives
        on one machine, so two machines with 0.2 CPU left each hold no Forager of 0.3); the run's bundles not placed
        yet take a Forager's room each. None when Foragers reserve nothing or are not reserved (no bound)."""
        from ray.util import placement_group_table

        from actors.options import room_on_nodes

        forager = self._shape("forager")
        if "forager" not in self._reserve or not forager.get("CPU"):
            return None
        free = _node_cpus()
        elsewhere = len(self._reservation.unplaced(self._loop_keys()))
        for group in self._groups:
            where = placement_group_table(group).get("bundles_to_node_id", {})
            for index, spec in enumerate(group.bundle_specs):
                if where.get(index) in free:
                    free[where[index]] -= spec.get("CPU", 0.0)
                else:  # not placed yet (or its node is gone): somewhere, some day
                    elsewhere += 1
        return room_on_nodes(list(free.values()), forager["CPU"], elsewhere)

    def _all_bundles(self) -> list[dict[str, float]]:
        """The bundles of all of the run's groups (as each group was asked for: kept by Ray's handle)."""
        return [b for group in self._groups for b in group.bundle_specs]

    def _shape(self, key: WorkerKey) -> dict[str, float]:
        """The bundle a worker (``key``, or its role) reserves: its role's CPU, GPU and resources."""
        from actors.options import bundle_of, options_for

        return bundle_of(options_for(key.split("/", 1)[0], self.settings))  # type: ignore[arg-type]

    async def _watch_group(self, group: Any, keys: Sequence[WorkerKey], bundles: Sequence[dict[str, float]],
                           first: bool) -> None:
        """A reservation not placed after ``ray.room_wait_s`` because the cluster has no room for all of it (other
        runs' workers hold it) is said so in the run's events, and again once it is placed: a run that waits for
        room is told apart from a run that hangs. ``first``: the run's first group (it holds nothing meanwhile);
        else a re-plan's Foragers, while the run's other workers keep their room."""
        import ray

        from actors.options import missing_for

        started = time.monotonic()
        ready = asyncio.wrap_future(group.ready().future())
        try:
            done, _ = await asyncio.wait({ready}, timeout=self.settings.ray.room_wait_s)
            if done:
                ready.exception()
                return
            short = missing_for(bundles, ray.available_resources())
            if not short:
                return
            workers = Reservation.describe(keys)
            whole = missing_for(self._all_bundles(), ray.cluster_resources(), "in the cluster")
            message = waiting_message(workers, short, whole, first)
            self.emit(Stage.RUN, "waiting", message, workers=workers, short=short, whole=whole)
            await ready
            waited = time.monotonic() - started
            self.emit(Stage.RUN, "placed", f"this run's workers ({workers}) found room after {waited:.0f} s",
                      workers=workers, waited_s=round(waited, 1))
        except Exception:  # noqa: BLE001 - the group was removed (the run ended) while it waited: nothing to say
            return
        finally:
            ready.cancel()

    async def _watch_placement(self, handle: Any, role: str, options: dict[str, Any]) -> None:
        """An actor not yet running after ``ray.room_wait_s`` because the cluster has no room for what it asks (other
        runs' workers hold it) is said so in the run's events, and again once it runs: a run that waits for room is
        told apart from a run that hangs. An actor that is only slow to start, or that dies, is not reported here."""
        import ray

        from actors.options import missing_room

        started = time.monotonic()
        ready = asyncio.wrap_future(handle.__ray_ready__.remote().future())
        try:
            done, _ = await asyncio.wait({ready}, timeout=self.settings.ray.room_wait_s)
            if done:
                ready.exception()  # looked at: a worker that died is reported by the call waiting on it
                return
            short = missing_room(options, ray.available_resources())
            if not short:
                return
            article = "an" if role[0] in "aeiou" else "a"
            self.emit(Stage.RUN, "waiting", f"{article} {role} waits for room on the Ray cluster ({short}): other "
                      "runs' workers hold it; it starts when they finish", role=role, short=short)
            await ready
            waited = time.monotonic() - started
            self.emit(Stage.RUN, "placed", f"the {role} found room after {waited:.0f} s", role=role,
                      waited_s=round(waited, 1))
        except ray.exceptions.RayError:  # it died: the call waiting on it says so
            return
        finally:
            ready.cancel()

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
            self._kill(self._searcher)
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

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        from actors.options import method_options

        if not requests:
            return []
        while len(self._ingestors) < self._pool_size():
            self._ingestors.append(self._new_ingestor(len(self._ingestors)))
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
        done = [r for r in results if r is not None]
        if any(r.status == "stored" for r in done):
            await self._index_new_chunks()
        return done

    async def _index_new_chunks(self) -> None:
        """Fold the batch's chunks into the store's search indexes before the Foragers search (one Ingestor does
        it: :meth:`actors.steps.ingest.step.IngestStep.index_new_chunks`). An Ingestor lost meanwhile only leaves
        the search slower."""
        import ray

        from actors.options import method_options

        opts = method_options("ingestor", "index_new_chunks", self.settings)
        try:
            await self._ingestors[0].index_new_chunks.options(**opts).remote()
        except ray.exceptions.RayError as exc:
            self.emit(Stage.INGEST, "indexed", f"indexing the new chunks failed ({type(exc).__name__}); search "
                      "stays correct but slower", folded=0, error=str(exc)[:300])

    async def start_ingestors(self) -> None:
        """Create the Ingestor pool (:func:`actors.options.ingestor_pool_size`) and build their steps now."""
        while len(self._ingestors) < self._pool_size():
            self._ingestors.append(self._new_ingestor(len(self._ingestors)))
        await asyncio.gather(*(actor.ready.remote() for actor in self._ingestors))

    def _pool_size(self) -> int:
        from actors.options import ingestor_pool_size

        if self._ingestor_pool is None:
            self._ingestor_pool = ingestor_pool_size(self.settings)
        return self._ingestor_pool

    def _new_ingestor(self, slot: int) -> Any:
        from actors.ingestor import Ingestor

        return self._worker(Ingestor, "ingestor", f"ingestor/{slot}", self.settings, self.run_id, self.hub,
                            llm=self.llm if self.settings.ingest.contextual else None)

    def _replace_ingestor(self, slot: int) -> None:
        """A fresh Ingestor in ``slot``: the old one hung or crashed on a document (Ray may have restarted
        it, or given up after ``ray.max_restarts``); the next documents must not depend on which."""
        self._kill(self._ingestors[slot])
        self._ingestors[slot] = self._new_ingestor(slot)

    def _failed(self, req: IngestRequest, reason: str, seconds: float, retryable: bool = False) -> IngestResult:
        self.emit(Stage.INGEST, "failed", f"{req.candidate.path or req.candidate.key}: {reason}",
                  key=req.candidate.key, reason=reason)
        return IngestResult(run_id=req.run_id, key=req.candidate.key, path=req.candidate.path, status="failed",
                            reason=reason, retryable=retryable, seconds=seconds)

    def _forager(self, requirement_id: str) -> Any:
        from actors.forager import Forager

        if requirement_id not in self._foragers:
            self._requirements.setdefault(requirement_id)
            self._foragers[requirement_id] = self._worker(Forager, "forager", f"forager/{requirement_id}",
                                                          self.settings, self.run_id, self.hub, llm=self.llm)
        return self._foragers[requirement_id]

    def _drop_forager(self, requirement_id: str) -> None:
        self._kill(self._foragers.pop(requirement_id, None))

    def start_foragers(self, requirements: Sequence[Requirement]) -> Awaitable[None]:
        """Create the Foragers of these requirements and build and warm their steps now (not on first use). The
        requirements are known to the run's reservation as soon as this is called, before it is awaited: the
        Searcher created meanwhile makes a group that holds their Foragers too."""
        self._plan(r.id for r in requirements)
        return self._start_foragers(requirements)

    async def _start_foragers(self, requirements: Sequence[Requirement]) -> None:
        await asyncio.gather(*(self._forager(r.id).ready.remote(r) for r in requirements))

    def _plan(self, requirement_ids: Iterable[str]) -> None:
        for rid in requirement_ids:
            self._requirements.setdefault(rid)

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        self._plan(r.requirement.id for r in requests)
        for r in requests:
            self._forager(r.requirement.id)
        return list(await asyncio.gather(*(self._forage_one(r) for r in requests)))

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        self._plan(r.requirement.id for r in requests)
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
            self._kill(self._writer)
            self._writer = None

        return await self._again_on_a_fresh_actor(Stage.WRITE, "writer", writer, lost,
                                                  lambda actor: actor.write.remote(request))

    def _release_loop_workers(self) -> None:
        for actor in [self._searcher, *self._ingestors, *self._foragers.values()]:
            self._kill(actor)
        self._searcher, self._ingestors, self._foragers = None, [], {}
        self._release_groups()

    def _release_groups(self) -> None:
        """Give the run's reservation back (its workers are gone); a group still waiting for room is withdrawn."""
        _remove_groups(self._groups)
        self._reservation.clear()

    @staticmethod
    def _kill(actor: Any) -> None:
        import ray

        if actor is None:
            return
        try:
            ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    async def close(self) -> None:
        for watch in list(self._watches):
            watch.cancel()
        await asyncio.gather(*self._watches, return_exceptions=True)
        for actor in [self._searcher, self._writer, *self._ingestors, *self._foragers.values()]:
            self._kill(actor)
        self._release_groups()
