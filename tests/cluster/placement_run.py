"""Run by tests/cluster/test_placement.py in its own process: a simulated lab cluster
(ray.cluster_utils.Cluster: a head without LLM slots and three "GPU nodes", each with one
llm_slot and the label forage-node=gpuN) and one loopback Ollama per node. Forager LLM calls go
through the real SlottedLLM + OllamaLLM; prints what happened as JSON on the last line."""

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
        options = {"num_cpus": 0, "resources": {"llm_slot": 1}, "max_retries": 0}
        llm = SlottedLLM(inner, options, hosts=hosts)
        ask = [{"role": "user", "content": "say ok"}]

        async def calls(n: int) -> list[str]:
            return [r.text for r in await asyncio.gather(*(llm.structured(ask, Echo) for _ in range(n)))]

        # nine calls, three slots on three nodes: Ray must use every node to run them
        result["answers"] = asyncio.run(calls(9))
        result["first"] = {name: len(s.chat_requests) for name, s in servers.items()}

        # the same through the cluster's LLM gate (ray.llm_order = progress): it admits as many calls at
        # once as the cluster has llm_slot resources, and they still spread over every node
        from actors.llm_gate import llm_gate
        from infra.settings import Settings

        gate = llm_gate(Settings.load())
        gated = SlottedLLM(inner, options, hosts=hosts, gate=gate)
        before = {name: len(s.chat_requests) for name, s in servers.items()}
        result["gated_answers"] = [r.text for r in asyncio.run(
            _gather(*(gated.structured(ask, Echo) for _ in range(9))))]
        result["gated"] = {name: len(s.chat_requests) - before[name] for name, s in servers.items()}
        result["gate_idle"] = ray.get(gate.idle.remote(30.0))  # every lease given back
        result["gate"] = ray.get(gate.stats.remote())
        result["gated_ungated"] = gated.ungated
        ray.kill(gate, no_restart=True)

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

        # a node leaves mid-run: later calls run on the nodes that are left
        cluster.remove_node(nodes["gpu2"])
        result["after_removal"] = asyncio.run(calls(4))
        result["second"] = {name: len(s.chat_requests) for name, s in servers.items()}
    finally:
        ray.shutdown()
        cluster.shutdown()
        for server in servers.values():
            server.stop()
    return result


async def _gather(*calls):
    return await asyncio.gather(*calls)


if __name__ == "__main__":
    print(json.dumps(main()))
