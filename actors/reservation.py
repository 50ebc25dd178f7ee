"""A run's reservation on the Ray cluster: which placement group and bundle each of its loop workers takes.

A RayCrew (actors/ray_crew.py) reserves its loop workers (Searcher, Ingestors, Foragers) together, as one Ray
placement group (:class:`Reservation` keeps which worker takes which bundle; :class:`RunReservation` makes, watches,
measures and removes the groups): on a full cluster a run waits for all of its room holding none of it, so two runs
queue instead of each holding part of what it needs and waiting for the rest.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from actors.steps.events import Emit
from infra.settings import Settings
from messages.status import Stage

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


def kill_actor(actor: Any) -> None:
    """Let a Ray actor go for good (no restart); one already gone (or None) is skipped."""
    import ray

    if actor is None:
        return
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001 - already gone
        pass


class RunReservation:
    """The placement groups of one run's loop workers of the ``reserve`` roles: the first group is made when the first
    of them is placed and holds the Searcher, the Ingestor pool (``ingestors()`` of them) and a Forager for every
    requirement known by then (:meth:`plan`); a re-plan's new requirements get a group of their own. A group not
    placed after ``ray.room_wait_s`` is said so in the run's events (``emit``), and again once placed; so is a worker
    that asks the cluster for its own room (:meth:`watch_actor`). :meth:`release` removes the groups."""

    def __init__(self, settings: Settings, run_id: str, emit: Emit, reserve: Sequence[str],
                 ingestors: Callable[[], int]) -> None:
        self.settings, self.run_id, self.emit = settings, run_id, emit
        self.reserve = tuple(reserve)
        self._ingestors = ingestors
        self._requirements: dict[str, None] = {}  # the requirement ids whose Foragers the run will have, in order
        self.book = Reservation()
        self._watches: set[asyncio.Task[None]] = set()
        # Ray placement groups, by the Reservation's group numbers. Unlike an actor, a group is not let go when the
        # last handle to it goes: a reservation dropped without release() removes them when it is collected (else
        # they would hold their room until the process that made them exits)
        self.groups: list[Any] = []
        weakref.finalize(self, _remove_groups, self.groups)

    def plan(self, requirement_ids: Iterable[str]) -> None:
        """These requirements' Foragers will be placed (in the next group made, if they have none yet)."""
        for rid in requirement_ids:
            self._requirements.setdefault(rid)

    def release(self) -> None:
        """Give the run's reservation back (its workers are gone); a group still waiting for room is withdrawn."""
        _remove_groups(self.groups)
        self.book.clear()

    async def close(self) -> None:
        """Stop watching (the run is over)."""
        for watch in list(self._watches):
            watch.cancel()
        await asyncio.gather(*self._watches, return_exceptions=True)

    def watch(self, coro: Awaitable[None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # created outside a running loop: nobody to tell
            if asyncio.iscoroutine(coro):
                coro.close()
            return
        watch: asyncio.Task[None] = loop.create_task(coro)  # type: ignore[arg-type]
        self._watches.add(watch)
        watch.add_done_callback(self._watches.discard)

    def _loop_keys(self) -> list[WorkerKey]:
        """Every loop worker of the run so far whose role is reserved, in bundle order for a first group: the
        Foragers first, then the Searcher and Ingestors (on a lab cluster the spread group then put one Forager on
        each machine: tests/cluster/test_run_on_cluster.py)."""
        keys: list[WorkerKey] = []
        if "forager" in self.reserve:
            keys += [f"forager/{rid}" for rid in self._requirements]
        if "searcher" in self.reserve:
            keys.append("searcher")
        if "ingestor" in self.reserve:
            keys += [f"ingestor/{slot}" for slot in range(self._ingestors())]
        return keys

    def bundle(self, key: WorkerKey) -> tuple[Any, int]:
        """(placement group, bundle index) of ``key``; a new group first, for every loop worker without a bundle
        yet, when ``key`` has none."""
        spot = self.book.spot(key)
        if spot is None:
            import ray

            from actors.options import RUN_GROUP_STRATEGY

            shaped = [(k, self.shape(k)) for k in self.book.unplaced([*self._loop_keys(), key])]
            keys = [k for k, b in shaped if b]  # a worker that reserves nothing: no bundle
            bundles = [b for _, b in shaped if b]
            if not self.groups:
                bundles = self._fit_cluster(keys, bundles)
            # named for `ray list placement-groups`; a live group's name must be unique (a crew of the same run
            # before this one may still hold its group)
            group = ray.util.placement_group(bundles, strategy=RUN_GROUP_STRATEGY,
                                             name=f"forage-{self.run_id}-{len(self.groups)}-{secrets.token_hex(3)}")
            self.groups.append(group)
            self.book.add(keys)
            self.watch(self._watch_group(group, keys, bundles, first=len(self.groups) == 1))
            spot = self.book.spot(key)
            assert spot is not None
        return self.groups[spot[0]], spot[1]

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

    def fit_node(self, role: str, options: dict[str, Any]) -> dict[str, Any]:
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

        forager = self.shape("forager")
        if "forager" not in self.reserve or not forager.get("CPU"):
            return None
        free = _node_cpus()
        elsewhere = len(self.book.unplaced(self._loop_keys()))
        for group in self.groups:
            where = placement_group_table(group).get("bundles_to_node_id", {})
            for index, spec in enumerate(group.bundle_specs):
                if where.get(index) in free:
                    free[where[index]] -= spec.get("CPU", 0.0)
                else:  # not placed yet (or its node is gone): somewhere, some day
                    elsewhere += 1
        return room_on_nodes(list(free.values()), forager["CPU"], elsewhere)

    def all_bundles(self) -> list[dict[str, float]]:
        """The bundles of all of the run's groups (as each group was asked for: kept by Ray's handle)."""
        return [b for group in self.groups for b in group.bundle_specs]

    def shape(self, key: WorkerKey) -> dict[str, float]:
        """The bundle a worker (``key``, or its role) reserves: its role's CPU, GPU and resources."""
        from actors.options import bundle_of, options_for

        return bundle_of(options_for(key.split("/", 1)[0], self.settings))  # type: ignore[arg-type]

    async def _short_while_waiting(self, ready: asyncio.Future[Any], short_of: Callable[[], str]) -> str:
        """What the cluster lacks for a reservation or worker still not placed, looked at every ``ray.room_wait_s``
        until something is lacking (returned) or it is placed (""; a failure is looked at, not raised). Looked at
        again rather than once: just after another run's reservation is made, the cluster's free resources may not
        show it yet, and a run that then waits would never say so (docs/reliability.md)."""
        while True:
            done, _ = await asyncio.wait({ready}, timeout=self.settings.ray.room_wait_s)
            if done:
                ready.exception()
                return ""
            short = short_of()
            if short:
                return short

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
            short = await self._short_while_waiting(ready, lambda: missing_for(bundles, ray.available_resources()))
            if not short:
                return
            workers = Reservation.describe(keys)
            whole = missing_for(self.all_bundles(), ray.cluster_resources(), "in the cluster")
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

    async def watch_actor(self, handle: Any, role: str, options: dict[str, Any]) -> None:
        """An actor not yet running after ``ray.room_wait_s`` because the cluster has no room for what it asks (other
        runs' workers hold it) is said so in the run's events, and again once it runs: a run that waits for room is
        told apart from a run that hangs. An actor that is only slow to start, or that dies, is not reported here."""
        import ray

        from actors.options import missing_room

        started = time.monotonic()
        ready = asyncio.wrap_future(handle.__ray_ready__.remote().future())
        try:
            # a worker that died is reported by the call waiting on it
            short = await self._short_while_waiting(ready, lambda: missing_room(options, ray.available_resources()))
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
