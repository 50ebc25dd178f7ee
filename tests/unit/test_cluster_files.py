"""ray_cluster.yaml, the docker-compose files and the node start-up helper (infra/cluster.py).

No cluster or Docker engine runs here: the files are parsed and checked with Ray's own launcher
code (prepare_config + validate_config against Ray's schema), and the ``ray start`` arguments are
parsed by Ray's own ``ray start`` command line (click), without starting anything."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cluster import CLUSTER_ENV, LLM_SLOT, lab_ip, ray_start_args
from infra.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / name).read_text())
    assert isinstance(data, dict)
    return data


def test_ray_cluster_yaml_is_a_valid_local_launcher_config() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _load("ray_cluster.yaml")
    provider = config["provider"]
    assert provider["type"] == "local" and provider["head_ip"] and provider["worker_ips"]
    assert config["auth"]["ssh_user"] and config["auth"]["ssh_private_key"]
    prepared = prepare_config(copy.deepcopy(config))  # what `ray up` does first
    validate_config(prepared)                           # Ray's JSON schema
    assert prepared["available_node_types"]["local.cluster.node"]["max_workers"] == len(provider["worker_ips"])
    assert any("infra/install.sh" in cmd for cmd in config["setup_commands"])
    assert config["file_mounts"] == {"~/forage": "."}


@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_start_commands_use_the_cluster_env_and_declare_resources(key: str) -> None:
    commands = _load("ray_cluster.yaml")[key]
    start = next(c for c in commands if "ray start" in c)
    assert "python -m infra.cluster env" in start and "python -m infra.cluster start-args" in start
    assert "FORAGE_RAY__LAB_NETWORK=" in start
    if key.startswith("head"):
        assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in start  # what keeps the metadata probe off
    else:
        assert "--head-ip $RAY_HEAD_IP" in start


def test_cluster_env_keeps_usage_stats_off_and_does_not_pin_loopback() -> None:
    assert CLUSTER_ENV["RAY_USAGE_STATS_ENABLED"] == "0"
    assert CLUSTER_ENV["RAY_USAGE_STATS_REPORT_URL"].startswith("http://127.0.0.1:")
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in CLUSTER_ENV  # ray start --address refuses it
    assert not any(k.lower() == "http_proxy" for k in CLUSTER_ENV)  # gRPC between nodes would use it
    assert CLUSTER_ENV["ORT_DISABLE_TELEMETRY"] == "1"


def _ray_start(args: list[str]) -> dict[str, Any]:
    from ray.scripts.scripts import start

    return dict(start.make_context("start", list(args)).params)  # parses, starts nothing


def test_start_args_parse_as_ray_start_arguments() -> None:
    head = _ray_start(ray_start_args("head", node_ip="10.0.0.10", gpus=2, llm_slots=2))
    assert head["head"] and head["node_ip_address"] == "10.0.0.10" and head["num_gpus"] == 2
    assert json.loads(head["resources"]) == {LLM_SLOT: 2}
    assert head["ray_client_server_port"] == 10001 and head["include_dashboard"] is False
    assert head["dashboard_host"] == "127.0.0.1" and head["disable_usage_stats"]
    worker = _ray_start(ray_start_args("worker", node_ip="10.0.0.11", gpus=0, llm_slots=0, head_ip="10.0.0.10"))
    assert worker["address"] == "10.0.0.10:6379" and not worker["head"]
    assert worker["resources"] in (None, "{}")  # a node without slots declares none: no Forager LLM work
    with pytest.raises(ConfigError, match="head"):
        ray_start_args("worker", node_ip="10.0.0.11", gpus=1, llm_slots=1)


def test_lab_ip_picks_the_address_in_the_lab_network() -> None:
    assert lab_ip("127.0.0.0/8").startswith("127.")
    with pytest.raises(ConfigError, match="no address in the lab network"):
        lab_ip("203.0.113.0/24")  # TEST-NET-3: no machine here has it
    with pytest.raises(ConfigError, match="not a network"):
        lab_ip("the lab")


def test_node_helper_command_line() -> None:
    env = {**os.environ, "FORAGE_RAY__LAB_NETWORK": "127.0.0.0/8", "FORAGE_RAY__NODE_LLM_SLOTS": "3",
           "CUDA_VISIBLE_DEVICES": "0,1"}
    out = subprocess.run([sys.executable, "-m", "infra.cluster", "start-args", "worker", "--head-ip", "127.0.0.1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    args = _ray_start(out.stdout.split())
    assert args["node_ip_address"].startswith("127.") and args["num_gpus"] == 2
    assert json.loads(args["resources"]) == {LLM_SLOT: 3}
    printed = subprocess.run([sys.executable, "-m", "infra.cluster", "env"], cwd=ROOT, capture_output=True,
                             text=True, timeout=120).stdout.split()
    assert "RAY_USAGE_STATS_ENABLED=0" in printed
    unset = {k: v for k, v in env.items() if k != "FORAGE_RAY__LAB_NETWORK"}
    refused = subprocess.run([sys.executable, "-m", "infra.cluster", "start-args", "head"], cwd=ROOT, env=unset,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "FORAGE_RAY__LAB_NETWORK" in refused.stderr


def test_weaviate_compose() -> None:
    compose = _load("infra/docker-compose.weaviate.yml")
    service = compose["services"]["weaviate"]
    env = service["environment"]
    assert env["DISABLE_TELEMETRY"] == "true" and env["DEFAULT_VECTORIZER_MODULE"] == "none"
    assert env["ENABLE_MODULES"] == "" and env["AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED"] == "false"
    ports = service["ports"]
    assert {p.rsplit(":", 1)[1] for p in ports} == {"8080", "50051"}  # REST and gRPC
    assert all(p.startswith("${WEAVIATE_BIND:?") for p in ports)  # lab address only, never 0.0.0.0 by default
    volume, mount = service["volumes"][0].split(":")
    assert volume in compose["volumes"] and mount == env["PERSISTENCE_DATA_PATH"]


def test_ollama_compose() -> None:
    compose = _load("infra/docker-compose.ollama.yml")
    service = compose["services"]["ollama"]
    assert service["environment"]["OLLAMA_HOST"].endswith(":11434")
    assert service["ports"] == ["${OLLAMA_BIND:-127.0.0.1}:11434:11434"]  # node-local unless told otherwise
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert service["volumes"][0].split(":")[0] in compose["volumes"]


def test_a_driver_on_a_cluster_node_binds_to_its_lab_address() -> None:
    from gateway.session import _cluster_node_ip
    from infra.settings import Settings

    lab = Settings.load(ray={"lab_network": "127.0.0.0/8", "address": "auto"})
    assert (_cluster_node_ip(lab) or "").startswith("127.")
    assert _cluster_node_ip(lab.updated(ray={"address": "ray://10.0.0.10:10001"})) is None  # Ray Client
    assert _cluster_node_ip(Settings.load(ray={"address": "auto"})) is None  # one machine: loopback


def test_on_this_node_leaves_an_llm_alone_unless_its_node_is_listed() -> None:
    from infra.cluster import on_this_node
    from infra.llm.ollama import OllamaLLM

    llm = OllamaLLM(host="http://127.0.0.1:11434")
    assert on_this_node(llm, {}) is llm
    assert on_this_node(llm, {"some-other-node": "http://10.0.0.99:11434"}) is llm
    assert on_this_node(object(), {"x": "y"}) is not None  # an LLM without a host is passed through


def test_start_args_label_the_node() -> None:
    from infra.cluster import NODE_LABEL, node_name

    args = _ray_start(ray_start_args("worker", node_ip="10.0.0.11", gpus=1, llm_slots=1, head_ip="10.0.0.10",
                                     name="gpu-3"))
    assert json.loads(args["labels"]) == {NODE_LABEL: "gpu-3"}
    assert 0 < len(node_name()) <= 63
