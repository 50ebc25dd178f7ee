"""Placement on a simulated lab cluster (ray.cluster_utils.Cluster on loopback).

The cluster runs in its own process (tests/cluster/placement_run.py): Ray can be initialised once
per process, and the test session's own ``ray_cluster`` may already be up here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_llm_calls_spread_over_nodes_and_use_each_nodes_own_ollama() -> None:
    proc = subprocess.run([sys.executable, str(HERE / "placement_run.py")], cwd=HERE.parents[1],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # every call answered by a loopback Ollama (the default host, where nothing listens, was never used)
    assert result["answers"] == ["ok"] * 9
    first = result["first"]
    assert sum(first.values()) == 9 and all(n >= 1 for n in first.values()), first  # every node served
    # one endpoint per node; with priorities too, never more calls at once than a node's slot, every node served
    assert result["endpoints"] == 3
    assert result["chain_answers"] == ["ok"] * 9 and all(n >= 1 for n in result["chained"].values())
    stats = result["endpoint_stats"]
    assert sum(s["admitted"] for s in stats) == 18 and all(s["max_in_use"] == 1 and s["in_use"] == 0 for s in stats)
    # a task on node gpuN talks to gpuN's endpoint
    assert result["resolved"] == result["hosts"]
    # gpu2 removed: the next calls ran on the nodes that are left, none went to gpu2
    second = result["second"]
    assert result["after_removal"] == ["ok"] * 4 and result["rerouted"] >= 1  # gpu2's endpoint was tried, the call made again
    assert second["gpu2"] == first["gpu2"] + result["chained"]["gpu2"] and sum(second.values()) == 22, second
    # a re-plan's room, counted node by node: that many more Foragers are placed, one more is not
    room = result["room"]
    # (2 on what is left: 15 spots of 0.3 CPU on 1 + 2 + 2 CPUs, 13 held; the totals, 1.1 CPU free, said 3)
    assert room["fits"] and not room["one_more_fits"] and room["room"] < room["by_totals"], room
