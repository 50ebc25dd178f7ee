"""Run by tests/cluster/test_placement.py in its own process: a simulated lab cluster
(ray.cluster_utils.Cluster: a head without LLM slots and three "GPU nodes", each with one
llm_slot and the label forage-node=gpuN) and one loopback Ollama per node. Forager LLM calls go
through the real SlottedLLM, LLM endpoint actors and OllamaLLM; prints what happened as JSON on the last line."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> dict[str, object]:
    from pydantic import BaseModel

    from infra import ray_runtime
    from tests.loopback_ollama import LoopbackOllama

    # the same loopback-only Ray as start_ray (Cluster starts its processes itself)
    os.environ.update({k: v for k, v in ray_runtime.PRIVACY_ENV.items() if k not in ray_runtime.PROXY_ENV_KEYS})
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray_runtime._pin_node_ip_to_loopback()
    from infra.cluster import NODE_LABEL, on_this_node
    from infra.llm.ollama import OllamaLLM
    from infra.llm.slotted import SlottedLLM

    class Echo(BaseModel):
        text: str

    names = [f"gpu{i}" for i in range(3)]
    servers = {name: LoopbackOllama(responder=lambda messages, fmt: {"text": "ok"}).start() for name in names}
    hosts = {name: server.url for name, server in servers.items()}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {name: cluster.add_node(num_cpus=2, resources={"llm_slot": 1}, labels={NODE_LABEL: name})
             for name in names}
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, namespace="placement")
    result: dict[str, object] = {}
    try:
        # a default host where nothing listens: a call that is not redirected to its node's Ollama fails
        inner = OllamaLLM(host="http://127.0.0.1:9", timeout_s=30, max_retries=0)
        from actors.llm_endpoint import llm_endpoints
        from infra.settings import Settings

        settings = Settings.load()
        llm = SlottedLLM(inner, lambda: llm_endpoints(settings), hosts=hosts)
        ask = [{"role": "user", "content": "say ok"}]

        async def calls(n: int, slotted: SlottedLLM = llm) -> list[str]:
            return [r.text for r in await asyncio.gather(*(slotted.structured(ask, Echo) for _ in range(n)))]

        # nine calls, three slots on three nodes: every node's endpoint must take some
        result["answers"] = asyncio.run(calls(9))
        result["first"] = {name: len(s.chat_requests) for name, s in servers.items()}
        result["endpoints"] = len(llm.endpoints())

        # the same with priorities (chain order, calls marked as a long chain): the endpoints' queues order by
        # priority, calls still spread
        from infra.llm.slotted import rounds_ahead

        chained = SlottedLLM(inner, lambda: llm_endpoints(settings), hosts=hosts, order="chain")
        before = {name: len(s.chat_requests) for name, s in servers.items()}
        with rounds_ahead(5):
            result["chain_answers"] = asyncio.run(calls(9, chained))
        result["chained"] = {name: len(s.chat_requests) - before[name] for name, s in servers.items()}
        stats = [ray.get(e.handle.stats.remote()) for e in chained.endpoints()]
        result["endpoint_stats"] = stats

        # which endpoint a task on each node resolves, pinned to that node
        @ray.remote(num_cpus=0)
        def where() -> tuple[str, str]:
            label = str(ray.get_runtime_context().get_node_labels().get(NODE_LABEL))
            return label, on_this_node(inner, hosts).host

        resolved = {}
        for node in ray.nodes():
            label = (node.get("Labels") or {}).get(NODE_LABEL)
            if label:
                strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
                got_label, host = ray.get(where.options(scheduling_strategy=strategy).remote())
                resolved[got_label] = host
        result["resolved"] = resolved
        result["hosts"] = hosts

        # a node leaves mid-run: later calls run on the nodes that are left (a call sent to gpu2's endpoint,
        # gone with its node, is made again on another)
        cluster.remove_node(nodes["gpu2"])
        result["after_removal"] = asyncio.run(calls(4))
        result["second"] = {name: len(s.chat_requests) for name, s in servers.items()}
        result["rerouted"] = llm.rerouted
        # last: it takes some 20 s, and the calls above must find the endpoints they listed before gpu2 left
        result["room"] = room_that_fits(ray)
    finally:
        ray.shutdown()
        cluster.shutdown()
        for server in servers.values():
            server.stop()
    return result


def room_that_fits(ray: object) -> dict[str, object]:
    """A run of 0.3-CPU workers (ten Foragers, a Searcher, two Ingestors) reserved on what is left of this cluster (a
    1-CPU head, two 2-CPU nodes), then groups of as many more Foragers as ``RayCrew.room_for_foragers`` says fit, and of one
    more: the first is placed, the second is not (the cluster's totals, which the count used before, say more)."""
    from actors.ray_crew import RayCrew
    from infra.settings import Settings
    from messages.plan import Requirement

    share = 0.3
    crew = RayCrew(Settings.load(ray={"actor_cpus": share}, ingest={"pool_size": 2}), "room-run", None)
    crew.start_foragers([Requirement(id=f"R{i}", text=f"requirement {i}") for i in range(1, 11)]).close()
    group, _ = crew.reservation.bundle("searcher")
    ray.get(group.ready(), timeout=120)  # type: ignore[attr-defined]
    try:
        room = crew.room_for_foragers()
        assert room is not None
        placed = {}
        for n in (room, room + 1):
            more = ray.util.placement_group([{"CPU": share}] * n, strategy="SPREAD")  # type: ignore[attr-defined]
            ready, _ = ray.wait([more.ready()], timeout=20)  # type: ignore[attr-defined]
            placed[n] = bool(ready)
            ray.util.remove_placement_group(more)  # type: ignore[attr-defined]
        totals = int((ray.cluster_resources()["CPU"] - 13 * share) / share + 1e-9)  # type: ignore[attr-defined]
        return {"room": room, "fits": placed[room], "one_more_fits": placed[room + 1], "by_totals": totals}
    finally:
        asyncio.run(crew.close())


if __name__ == "__main__":
    print(json.dumps(main()))
