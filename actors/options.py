"""Every Ray option of every role, in one place, derived from Settings.

Actors are plain classes; they become actors only when created:
``ray.remote(cls).options(**options_for(role, settings))``. Retries are only allowed on idempotent
methods (see :func:`method_options`): ingesting a file is idempotent (keyed by its hash), foraging
and writing are not (they hold per-run state and call the LLM).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Literal

from infra.settings import Settings

Role = Literal["orchestrator", "status_hub", "searcher", "ingestor", "forager", "writer", "llm_endpoint",
               "embed_endpoint", "cpu_gate"]

_NODE_ACTORS = ("llm_endpoint", "embed_endpoint", "cpu_gate")  # one per node, detached, shared by every run there
LLM_SLOT = "llm_slot"  # the Ray custom resource of one LLM endpoint's capacity

_IDEMPOTENT: dict[tuple[str, str], bool] = {
    # Ingestor.ingest is idempotent, but a document whose Ingestor died is tried again by the pool itself
    # (actors/ingestor_pool.py: on a fresh Ingestor, ray.max_task_retries times, with an event saying so); a Ray retry on
    # the restarted actor as well made the number of attempts depend on timing (2 or 3; a crash sometimes unseen)
    ("ingestor", "ingest"): False,
    ("ingestor", "index_new_chunks"): True,  # folding in what is already folded in does nothing
    ("searcher", "search"): True,
    ("status_hub", "events"): True,
    ("embed_endpoint", "embed"): True,  # same texts, same vectors
    ("embed_endpoint", "warm"): True,
}


def options_for(role: Role, settings: Settings, *, name: str | None = None,
                cluster_gpus: float | None = None, home_node: str | None = None,
                endpoint_node: str | None = None, endpoint_slots: int = 1) -> dict[str, Any]:
    """Options for ``ray.remote(cls).options(...)`` of one role.

    ``cluster_gpus``: GPUs the Ray cluster has (default: asked from the running Ray; 0 without one);
    an Ingestor that parses with Marker asks for :func:`ingestor_gpus` of them.
    ``home_node``: the Ray node id of the driver (:func:`driver_node`). The run's coordinators (the
    Orchestrator and its StatusHub) are pinned to it (hard node affinity), so a worker node that
    leaves a cluster never takes the run itself with it. They ask for no CPU, so the driver's node
    always has room, and it lives as long as the driver does. Not soft affinity: measured on Ray
    2.60 (4-node ``ray.cluster_utils.Cluster``), soft affinity to the driver's free node placed 3 of
    4 zero-CPU actors on other nodes.

    Foragers are spread over the nodes (Ray's SPREAD strategy): on a lab cluster each machine hosts
    some, rather than the first machine all of them; their LLM calls go wherever a slot is free. In a run's
    reservation (:func:`in_group`) the group's own strategy, :data:`RUN_GROUP_STRATEGY`, spreads them instead.

    ``endpoint_node`` / ``endpoint_slots``: an LLM endpoint (:mod:`actors.llm_endpoint`) is pinned to its
    node (hard affinity) and holds all ``endpoint_slots`` of the node's ``llm_slot`` units; an embedding endpoint
    (:mod:`actors.embed_endpoint`) is pinned to its node the same way.
    """
    ray = settings.ray
    opts: dict[str, Any] = {"num_cpus": 0}
    if role in ("ingestor", "forager", "writer", "searcher"):
        opts["num_cpus"] = ray.actor_cpus
        opts["max_restarts"] = ray.max_restarts
        # per-method retries are set by method_options; the actor default allows none
        opts["max_task_retries"] = 0
    if role == "ingestor":
        # one parse per process at a time: a sync actor with concurrency 1
        opts["max_concurrency"] = 1
        gpus = ingestor_gpus(settings, cluster_gpus)
        if gpus > 0:
            opts["num_gpus"] = gpus
    if role == "forager":
        opts["scheduling_strategy"] = "SPREAD"
    if role in ("status_hub", "orchestrator"):
        opts["max_restarts"] = 0
        opts["max_concurrency"] = 1000
        if home_node is not None:
            opts["scheduling_strategy"] = _pinned_to(home_node)
    if role == "llm_endpoint":
        # one per node with llm_slot resources, shared by every run's LLM callers; not restarted (pinned to its node:
        # it goes when the node goes, and callers make their call again on another endpoint)
        opts.update(max_restarts=0, max_concurrency=10_000, resources={LLM_SLOT: float(endpoint_slots)})
    if role == "embed_endpoint":
        # one per node and embedding configuration, shared by every run's Foragers and Ingestors there; restarted if
        # it dies (its calls are idempotent, so they are made again). It asks for no CPU: its callers hold theirs
        # while they wait on it.
        opts.update(max_restarts=-1, max_task_retries=0, max_concurrency=8)
    if role == "cpu_gate":
        # one per node, shared by every run's Foragers there; not restarted (a caller that cannot reach it goes on
        # without it)
        opts.update(max_restarts=0, max_concurrency=10_000)
    if role in _NODE_ACTORS:
        # found by name, kept when the actor (or driver) that created it exits, pinned to its node
        opts.update(lifetime="detached", get_if_exists=True)
        if endpoint_node is not None:
            opts["scheduling_strategy"] = _pinned_to(endpoint_node)
    if name is not None:
        opts["name"] = name
    return opts


def bundle_of(options: dict[str, Any]) -> dict[str, float]:
    """What an actor created with ``options`` reserves for its lifetime, as a placement-group bundle (CPU, GPU and
    custom resources it asks for); ``{}`` when it reserves nothing."""
    wants = {"CPU": float(options.get("num_cpus") or 0.0), "GPU": float(options.get("num_gpus") or 0.0),
             **{k: float(v) for k, v in (options.get("resources") or {}).items()}}
    return {k: v for k, v in wants.items() if v > 0}


def missing_room(options: dict[str, Any], available: dict[str, float]) -> str:
    """What an actor created with ``options`` asks for and the cluster does not have free (``available``: Ray's
    ``available_resources()``), e.g. ``"0.25 CPU asked, 0 free"``; '' when every resource it asks for is free
    somewhere (it may still not fit on one node)."""
    return missing_for([bundle_of(options)], available)


def total_of(bundles: Sequence[dict[str, float]]) -> dict[str, float]:
    """What ``bundles`` reserve together, resource by resource."""
    total: dict[str, float] = {}
    for bundle in bundles:
        for k, v in bundle.items():
            total[k] = total.get(k, 0.0) + v
    return total


def missing_for(bundles: Sequence[dict[str, float]], available: dict[str, float], have: str = "free") -> str:
    """What ``bundles`` ask for together (a run's reservation, :data:`RUN_GROUP_STRATEGY`) and the cluster does not
    have free, e.g. ``"1.5 CPU asked, 0.25 free"``; '' when all of it is free (it may still not fit node by node).
    ``have`` names what ``available`` is ("in the cluster" for Ray's ``cluster_resources()``)."""
    wants = total_of(bundles)
    return "; ".join(f"{v:g} {k} asked, {available.get(k, 0.0):g} {have}" for k, v in wants.items()
                     if v > 0 and available.get(k, 0.0) + 1e-9 < v)


CPU_STEP = 1e-4  # Ray keeps fractional resources to four decimals


def fitted_share(workers: int, share: float, node_cpus: Sequence[float]) -> float:
    """The CPU each of ``workers`` equal bundles may reserve so that all of them fit on the nodes at once
    (``node_cpus``: each live node's CPUs): ``share`` when they already fit, else the largest share that does,
    rounded down to Ray's :data:`CPU_STEP`. ``share`` as it is when no node has a CPU (nothing fits; the run waits
    for machines to join). A bundle fits on one node only, so the count is node by node: two nodes of 1.5 and 2.5
    CPUs hold 19 bundles of 0.2 CPU, not 20."""

    def fits(each: float) -> bool:
        return room_on_nodes(node_cpus, each) >= workers

    if workers <= 0 or share <= 0 or fits(share):
        return share
    # the largest share that fits is one where a node's count steps up: a node's CPUs divided by a whole number
    steps = sorted({c / m for c in node_cpus if c > 0 for m in range(1, workers + 1)}, reverse=True)
    for each in steps:
        if each < share and fits(each):
            rounded = int(each / CPU_STEP + 1e-9) * CPU_STEP
            return round(rounded, 4) if rounded > 0 else share
    return share


def room_on_nodes(free: Sequence[float], each: float, elsewhere: int = 0) -> int:
    """How many more bundles of ``each`` CPU fit on nodes with ``free`` CPUs left each, node by node, less
    ``elsewhere`` bundles of about that size still to be placed somewhere; 0 at least."""
    if each <= 0:
        raise ValueError(f"a bundle's CPU must be positive, got {each}")
    return max(0, sum(int(max(f, 0.0) / each + 1e-9) for f in free) - elsewhere)


# A run's loop workers (its Searcher, Ingestors and Foragers) are reserved together, as one Ray placement group
# (actors/reservation.py, RunReservation): a run either has room for all of them or waits holding nothing, so two runs on a full
# cluster queue instead of each holding part of what it needs. SPREAD: bundles over as many nodes as have room, as
# the Foragers were spread before (soft: a one-node Ray takes them all).
RUN_GROUP_STRATEGY = "SPREAD"


def in_group(options: dict[str, Any], group: Any, index: int) -> dict[str, Any]:
    """``options`` with the actor placed in bundle ``index`` of placement group ``group`` (it then takes that
    bundle's reservation instead of asking the cluster). What the actor itself starts (the detached endpoints it
    finds or creates) is not put in the group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {**options, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=index, placement_group_capture_child_tasks=False)}


def _pinned_to(node_id: str) -> Any:
    """Hard affinity to one Ray node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def driver_node() -> str | None:
    """The Ray node id of this (driver) process; None without Ray or through Ray Client (whose
    driver is not on a node of the cluster)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        from ray.util.client import ray as client

        if client.is_connected():
            return None
    except ImportError:  # pragma: no cover - Ray without its client
        pass
    return ray.get_runtime_context().get_node_id()


def cluster_gpu_count() -> float:
    """GPUs of the Ray cluster this process is connected to; 0 when Ray is not running here."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return 0.0
    return float(ray.cluster_resources().get("GPU", 0.0))


def ingestor_gpus(settings: Settings, cluster_gpus: float | None = None) -> float:
    """GPUs one Ingestor asks Ray for where the cluster has GPUs (at most what it has): ``ingest.marker_gpus``
    when the Ingestors parse with Marker (:func:`infra.pdf.resolve_parser`), else ``ingest.embed_gpus`` (a
    PyMuPDF Ingestor that embeds on a GPU share; 0 by default). 0 on a cluster without GPUs. An Ingestor's
    embedder runs where its share is (``embed.device='auto'``)."""
    from infra.pdf import resolve_parser

    backend, _ = resolve_parser(settings)
    wanted = settings.ingest.marker_gpus if backend == "marker" else settings.ingest.embed_gpus
    if wanted <= 0:
        return 0.0
    available = cluster_gpu_count() if cluster_gpus is None else cluster_gpus
    if available <= 0:
        return 0.0
    return min(wanted, available)


def ingestor_pool_size(settings: Settings, cluster_gpus: float | None = None) -> int:
    """Ingestor actors to run: ``ingest.pool_size`` when they work on CPUs; when each asks for a GPU share
    (:func:`ingestor_gpus`), no more than there are shares of the GPUs Ray sees (more Ingestors would wait
    forever for a GPU): one per share for Marker (a lab of four GPUs parses four PDFs at once), at most
    ``ingest.pool_size`` for PyMuPDF Ingestors that embed on a GPU share (they parse on CPUs)."""
    available = cluster_gpu_count() if cluster_gpus is None else cluster_gpus
    share = ingestor_gpus(settings, available)
    if share <= 0:
        return settings.ingest.pool_size
    shares = max(1, int(available // share + 1e-9))
    from infra.pdf import resolve_parser

    return shares if resolve_parser(settings)[0] == "marker" else min(settings.ingest.pool_size, shares)


def llm_slot_resources(settings: Settings) -> dict[str, float] | None:
    """Custom resources a local Ray declares at start: ``{"llm_slot": ray.llm_slots}``, or None."""
    slots = settings.ray.llm_slots
    return {LLM_SLOT: float(slots)} if slots else None


def method_options(role: Role, method: str, settings: Settings) -> dict[str, Any]:
    """Options for ``actor.method.options(...)``: retries only where the method is idempotent."""
    if _IDEMPOTENT.get((role, method)):
        return {"max_task_retries": settings.ray.max_task_retries}
    return {"max_task_retries": 0}
