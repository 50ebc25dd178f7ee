"""Run by tests/cluster/test_run_on_cluster.py in its own process: a whole research run on a simulated
lab cluster, and a node that leaves in the middle of it.

ray.cluster_utils.Cluster: a head with no CPUs for workers (only the run's coordinators live there) and
three "GPU nodes" gpu0..gpu2, each with one llm_slot, the label forage-node=gpuN and its own loopback
Ollama (ray.ollama_hosts); the head's Ollama (llm.host) is a fourth one, which should get no call: the
Orchestrator's and the Writer's calls hold slots and go to the GPU nodes' Ollamas like the Foragers'. Every model answer comes from the end-to-end brain (tests/e2e/brain.py) through the
product's Ollama client. When the first Forager reports in iteration 1, the node it runs on is removed
(its raylet and every process on it killed). Prints what happened as JSON on the last line.

    .venv/bin/python tests/cluster/run_on_cluster.py LIBRARY_DIR WORK_DIR
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

NODES = ("gpu0", "gpu1", "gpu2")


def responder(messages: list[dict[str, str]], fmt: object) -> dict:
    from tests.e2e.brain import brain

    name = fmt.get("title", "") if isinstance(fmt, dict) else ""
    return asyncio.run(brain(messages, SimpleNamespace(__name__=name)))


def main(library: Path, work: Path) -> dict[str, object]:
    from infra import ray_runtime
    from tests.e2e import brain
    from tests.loopback_ollama import LoopbackOllama

    os.environ.update({k: v for k, v in ray_runtime.PRIVACY_ENV.items() if k not in ray_runtime.PROXY_ENV_KEYS})
    from ray.cluster_utils import Cluster

    from infra.cluster import NODE_LABEL
    from infra.settings import Settings
    from tests.e2e.brain import research

    ray_runtime._pin_node_ip_to_loopback()
    servers = {name: LoopbackOllama(models=("lab-model",), responder=responder).start() for name in ("head", *NODES)}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                                   "labels": {NODE_LABEL: "head"}})
    nodes = {name: cluster.add_node(num_cpus=2, resources={"llm_slot": 1}, labels={NODE_LABEL: name})
             for name in NODES}
    cluster.wait_for_nodes()
    settings = Settings.load("quick").updated(
        run={"runs_dir": work / "runs", "max_iterations": 2, "min_coverage": 0.85},
        store={"path": work / "store"}, search={"library": library}, net={"offline": True},
        ingest={"pool_size": 2, "parser": "pymupdf"},
        forage={"answer_confirmation": brain.ANSWER_CONFIRMATION},
        llm={"backend": "ollama", "host": servers["head"].url, "model": "lab-model", "timeout_s": 60},
        ray={"address": cluster.address, "llm_slots": 3, "max_restarts": 1,
             "ollama_hosts": {name: servers[name].url for name in NODES}})
    result: dict[str, object] = {}
    removed: dict[str, object] = {}
    events: list[dict[str, object]] = []

    def chats() -> dict[str, int]:
        return {name: sum(1 for r in s.requests if r.path == "/api/chat") for name, s in servers.items()}

    def on_event(ev) -> None:
        events.append({"stage": ev.stage, "kind": ev.kind, "iteration": ev.iteration,
                       "requirement": ev.requirement_id, "message": ev.message, "node": ev.payload.get("node")})
        if not removed and ev.stage == "forage" and ev.kind == "actor" and ev.payload.get("node") in nodes:
            name = ev.payload["node"]
            started = time.monotonic()
            cluster.remove_node(nodes[name])  # the machine leaves: its raylet and workers are killed
            removed.update(node=name, requirement=ev.requirement_id, chats_at_removal=chats(),
                           seconds=round(time.monotonic() - started, 2))

    try:
        summary, _, _ = research(settings, on_event=on_event, quiet=True)
        result.update(status=summary.status, stop_reason=summary.stop_reason, run_dir=summary.run_dir,
                      report=summary.report_path)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
        result.update(removed=removed, chats_at_end=chats(), events=events)
        for server in servers.values():
            server.stop()
    return result


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2])), default=str))
