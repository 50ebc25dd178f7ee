"""A node of a lab's Ray cluster: the environment and the ``ray start`` arguments it runs with.

One machine (the default) keeps Ray on loopback (:func:`infra.ray_runtime.start_ray`). A cluster
cannot: its nodes must reach each other, so each node binds Ray to its own address in the lab
network (``ray.lab_network``, a CIDR) and nothing else changes about what Ray may send:

* usage stats off (``RAY_USAGE_STATS_ENABLED=0``) and the "disabled" ping sent to a dead loopback
  port (``RAY_USAGE_STATS_REPORT_URL``), as on one machine;
* the cloud-metadata probe (the dashboard's ``UsageStatsHead`` asking 169.254.169.254 which cloud
  it runs on) is skipped because the head is started with the launcher's
  ``~/ray_bootstrap_config.yaml`` (``provider: type: local``): Ray reads the provider from that
  file and probes only when it is missing (``usage_lib.get_cluster_config_to_report``). The
  single-machine trick (a dead HTTP proxy for Ray's daemons) is NOT used here: gRPC between nodes
  would go to that proxy too;
* ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` is left out: it pins the node IP to 127.0.0.1 and
  ``ray start --address`` refuses to run with it; ``--node-ip-address`` names the lab address
  instead (no 8.8.8.8 route lookup to find one);
* the libraries' telemetry switches (:data:`infra.privacy.OFFLINE_ENV`) as everywhere.

Each node declares its GPUs and one ``llm_slot`` per model slot of its own Ollama
(``ray.node_llm_slots``, default one per GPU), so Ray places LLM work where an Ollama can take it,
and the label ``forage-node=<name>`` (``ray.node_name``, default the host name). An LLM call that
runs on a node goes to that node's Ollama: ``llm.host``'s default 127.0.0.1 already is; a node
whose Ollama is elsewhere is listed in ``ray.ollama_hosts`` (:func:`on_this_node`).

Used by ray_cluster.yaml::

    env $(python -m infra.cluster env) ray start $(python -m infra.cluster start-args head)
    env $(python -m infra.cluster env) ray start $(python -m infra.cluster start-args worker --head-ip H)
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping
from typing import Final, Literal, TypeVar

import psutil

from infra.errors import ConfigError
from infra.llm.server import ServerLLM
from infra.privacy import OFFLINE_ENV
from infra.settings import Settings

T = TypeVar("T")

LLM_SLOT: Final[str] = "llm_slot"  # the same name as actors.options.LLM_SLOT
GCS_PORT: Final[int] = 6379
CLIENT_PORT: Final[int] = 10001  # Ray Client: drivers elsewhere use ray://<head>:10001
NODE_LABEL: Final[str] = "forage-node"  # Ray node label naming the node (ray.ollama_hosts keys)

#: Environment of every Ray process on a cluster node (see the module docstring).
CLUSTER_ENV: Final[dict[str, str]] = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    **OFFLINE_ENV,
}


def lab_ip(network: str) -> str:
    """This machine's IPv4 address inside ``network`` (a CIDR such as '10.0.0.0/24')."""
    try:
        net = ipaddress.ip_network(network, strict=False)
    except ValueError as exc:
        raise ConfigError(f"ray.lab_network {network!r} is not a network; write it as 10.0.0.0/24") from exc
    found = sorted({a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                    if a.family == socket.AF_INET and ipaddress.ip_address(a.address) in net})
    if not found:
        raise ConfigError(f"this machine has no address in the lab network {network}; check ray.lab_network "
                          "(FORAGE_RAY__LAB_NETWORK) and the network interface")
    return found[0]


def gpu_count() -> int:
    """GPUs this node offers: CUDA_VISIBLE_DEVICES when set, else ``nvidia-smi -L`` lines, else 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def node_name() -> str:
    """A Ray label value for this host: its short host name, cut to Ray's 63 characters."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname().split(".")[0]).strip("-._")[:63]
    return name.rstrip("-._") or "node"


def ray_start_args(role: Literal["head", "worker"], *, node_ip: str, gpus: int, llm_slots: int,
                   head_ip: str | None = None, name: str | None = None) -> list[str]:
    """Arguments of ``ray start`` for one node: bound to ``node_ip``, declaring its GPUs and
    ``llm_slots`` (no ``llm_slot`` resource at all when 0: Foragers' LLM work never lands there),
    labelled ``forage-node=<name>``."""
    args = [f"--node-ip-address={node_ip}", f"--num-gpus={gpus}", "--disable-usage-stats"]
    if name:
        args.append("--labels=" + json.dumps({NODE_LABEL: name}, separators=(",", ":")))
    if llm_slots:
        args.append("--resources=" + json.dumps({LLM_SLOT: llm_slots}, separators=(",", ":")))
    if role == "head":
        return ["--head", f"--port={GCS_PORT}", f"--ray-client-server-port={CLIENT_PORT}",
                "--include-dashboard=false", "--dashboard-host=127.0.0.1", *args]
    if not head_ip:
        raise ConfigError("a worker node needs the head's address (--head-ip)")
    return [f"--address={head_ip}:{GCS_PORT}", *args]


def ray_node() -> str | None:
    """In a Ray worker: the node it runs on, by its ``forage-node`` label, else its IP; None outside Ray."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    label = str(ray.get_runtime_context().get_node_labels().get(NODE_LABEL) or "")
    return label or ray.util.get_node_ip_address()


def node_llm_host(hosts: Mapping[str, str], default: str) -> str:
    """In a Ray worker: the LLM endpoint for the node it runs on — ``hosts`` by the node's
    ``forage-node`` label, then by its IP; ``default`` when neither is listed (or outside Ray)."""
    if not hosts:
        return default
    import ray

    if not ray.is_initialized():
        return default
    label = str(ray.get_runtime_context().get_node_labels().get(NODE_LABEL) or "")
    if label and label in hosts:
        return hosts[label]
    return hosts.get(ray.util.get_node_ip_address(), default)


def on_this_node(llm: T, hosts: Mapping[str, str]) -> T:
    """``llm`` pointed at this node's endpoint (a copy) when it has a ``host`` and ``hosts`` names
    one for this node; else ``llm`` itself."""
    if not hosts or not isinstance(llm, ServerLLM):
        return llm
    mine = node_llm_host(hosts, llm.host)
    if mine == llm.host:
        return llm
    local = copy.copy(llm)
    local.host = mine
    return local


def main(argv: list[str]) -> int:
    """``env`` prints CLUSTER_ENV; ``start-args head|worker [--head-ip IP]`` prints this node's
    ``ray start`` arguments from Settings (ray.lab_network, ray.node_llm_slots)."""

    if argv[:1] == ["env"]:
        print("\n".join(f"{k}={v}" for k, v in CLUSTER_ENV.items()))
        return 0
    if len(argv) >= 2 and argv[0] == "start-args" and argv[1] in ("head", "worker"):
        ray = Settings.load().ray
        if not ray.lab_network:
            print("set FORAGE_RAY__LAB_NETWORK to the lab network (e.g. 10.0.0.0/24)", file=sys.stderr)
            return 2
        head_ip = argv[argv.index("--head-ip") + 1] if "--head-ip" in argv[:-1] else None
        gpus = gpu_count()
        slots = gpus if ray.node_llm_slots is None else ray.node_llm_slots
        try:
            args = ray_start_args(argv[1], node_ip=lab_ip(ray.lab_network), gpus=gpus, llm_slots=slots,  # type: ignore[arg-type]
                                  head_ip=head_ip, name=ray.node_name or node_name())
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(" ".join(args))
        return 0
    print("usage: python -m infra.cluster env | start-args head | start-args worker --head-ip IP", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
