"""Privacy tests for :mod:`infra.ray_runtime`.

Each scenario runs in a fresh child Python process: start Ray, run one remote
task and one actor call, wait until the dashboard has finished its cloud-
metadata probe, record what Ray listens on, then ``ray.shutdown()``.

* Listeners: the child calls :func:`infra.ray_runtime.loopback_only_listeners`
  (psutil over the whole Ray process tree).
* Outbound traffic: the child runs under ``strace -f``, which follows every
  process Ray starts (GCS, raylet, dashboard, agents, workers), C++ ones
  included.  Every address passed to connect()/sendto()/sendmsg()/sendmmsg()
  is read from the trace.
* A control runs a stock ``ray.init()`` through the same detectors and must
  trip both of them (169.254.169.254:80 probe, LAN listeners).  This shows
  the privacy tests can fail.

The strace tests need ``strace`` (Debian/Ubuntu: ``apt-get install -y
strace``) and permission to ptrace child processes.  If either is missing
they are skipped and say why.  No test sleeps for a fixed time.  The child
waits for the log line that the dashboard writes once the probe has finished
(it checks every 50 ms and gives up after 120 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # pytest's rootdir is not on sys.path by default
    sys.path.insert(0, str(REPO_ROOT))

from infra.ray_runtime import PRIVACY_ENV, is_loopback  # noqa: E402
from tests.processes import child_env  # noqa: E402
from tests.traced import inet_destinations, non_loopback, strace_cmd  # noqa: E402

CHILD_TIMEOUT_S = 300
#: A caller's own proxy, from TEST-NET-2 (RFC 5737).  start_ray must give it
#: back to the driver and workers, and Ray must never connect to it.
CALLER_PROXY = "http://198.51.100.7:3128"
#: Loopback sink that PRIVACY_ENV routes the dashboard's metadata probe to.
SINK = ("127.0.0.1", 9)

_SCENARIO = textwrap.dedent(
    """
    import json, os, sys, time
    sys.path.insert(0, {repo_root!r})
    import ray  # imported before start_ray on purpose, as application code would
    from infra.ray_runtime import loopback_only_listeners, start_ray
    from ray._common.usage import usage_lib

    mode, out_path = sys.argv[1], sys.argv[2]
    if mode == "forage":
        start_ray(num_cpus=2)
        start_ray(num_cpus=2)  # idempotent: must be a no-op
    else:
        ray.init(address="local", num_cpus=2)  # stock settings, fresh instance

    @ray.remote
    def add_one(x):
        return x + 1

    @ray.remote
    class Probe:
        def env(self, keys):
            return {{k: os.environ.get(k) for k in keys}}

    assert ray.get(add_one.remote(1)) == 2
    probe = Probe.remote()
    keys = ["http_proxy", "HTTP_PROXY", "no_proxy", "RAY_USAGE_STATS_ENABLED"]
    worker_env = ray.get(probe.env.remote(keys))

    # The dashboard's UsageStatsHead logs "Usage reporting is ..." right after
    # its cloud-metadata probe returns.  Wait for that line, not a fixed time.
    node = ray._private.worker._global_node
    log = os.path.join(node.get_session_dir_path(), "logs", "dashboard.log")
    deadline = time.monotonic() + 120
    while True:
        try:
            with open(log, encoding="utf-8", errors="replace") as f:
                if "Usage reporting is" in f.read():
                    break
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("dashboard never reached its usage-stats step: " + log)
        time.sleep(0.05)  # poll interval for the condition above

    import psutil
    tree = [psutil.Process(), *psutil.Process().children(recursive=True)]
    all_listeners = []
    for p in tree:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        all_listeners += [c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN]

    result = {{
        "non_loopback_listeners": loopback_only_listeners(),
        "listener_count": len(all_listeners),
        "gcs_address": ray.get_runtime_context().gcs_address,
        "usage_stats_enabled": usage_lib.usage_stats_enabled(),
        "driver_env": {{k: os.environ.get(k) for k in keys}},
        "worker_env": worker_env,
    }}
    ray.shutdown()
    with open(out_path, "w") as f:
        json.dump(result, f)
    """
)

# --------------------------------------------------------------------------- fixtures


def _run_scenario(
    tmp_path: Path, mode: str, env: dict[str, str], strace: list[str] | None = None
) -> tuple[dict[str, Any], str]:
    script = tmp_path / "scenario.py"
    script.write_text(_SCENARIO.format(repo_root=str(REPO_ROOT)))
    out = tmp_path / "result.json"
    trace = tmp_path / "trace.txt"
    cmd = [sys.executable, str(script), mode, str(out)]
    if strace is not None:
        cmd = [*strace, "-o", str(trace), *cmd]
    proc = subprocess.run(
        cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S
    )
    assert proc.returncode == 0 and out.exists(), (
        f"scenario {mode!r} failed (rc={proc.returncode})\n"
        f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return json.loads(out.read_text()), (trace.read_text() if strace is not None else "")


@pytest.fixture(scope="module")
def forage_scenario(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str | None, str]:
    """start_ray() with a caller proxy Ray must not use, once: under strace -f where strace can trace
    (the listener and environment checks read the same run's result), else without it. Returns the
    result, the trace (None without strace) and why there is no trace."""
    env = child_env(http_proxy=CALLER_PROXY)
    try:
        cmd: list[str] | None = strace_cmd()
        why = ""
    except pytest.skip.Exception as exc:
        cmd, why = None, str(exc.msg)
    result, trace = _run_scenario(tmp_path_factory.mktemp("forage_strace"), "forage", env, cmd)
    return result, (trace if cmd is not None else None), why


@pytest.fixture(scope="module")
def forage_run(forage_scenario: tuple[dict[str, Any], str | None, str]) -> dict[str, Any]:
    """What start_ray() left: listeners, usage stats, the driver's and a worker's environment."""
    return forage_scenario[0]


@pytest.fixture(scope="module")
def forage_trace(forage_scenario: tuple[dict[str, Any], str | None, str]) -> tuple[dict[str, Any], str]:
    """start_ray() under strace -f (skipped, with the reason, where strace cannot trace)."""
    result, trace, why = forage_scenario
    if trace is None:
        pytest.skip(why)
    return result, trace


@pytest.fixture(scope="module")
def default_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    """Stock ray.init() under strace -f: the control that must trip the detectors."""
    cmd = strace_cmd()
    return _run_scenario(tmp_path_factory.mktemp("default_strace"), "default", child_env(), cmd)


# --------------------------------------------------------------------------- Ray tests


@pytest.mark.ray
def test_start_ray_listens_on_loopback_only(forage_run: dict[str, Any]) -> None:
    assert forage_run["non_loopback_listeners"] == []
    # Not vacuous: the scan did see Ray's GCS, raylet, agents and workers.
    assert forage_run["listener_count"] >= 5
    assert forage_run["gcs_address"].startswith("127.0.0.1:")


@pytest.mark.ray
def test_usage_stats_are_off(forage_run: dict[str, Any]) -> None:
    assert forage_run["usage_stats_enabled"] is False
    assert forage_run["driver_env"]["RAY_USAGE_STATS_ENABLED"] == "0"
    assert forage_run["worker_env"]["RAY_USAGE_STATS_ENABLED"] == "0"


@pytest.mark.ray
def test_caller_proxy_survives_for_driver_and_workers(forage_run: dict[str, Any]) -> None:
    """The dead proxy reaches Ray's daemons only, not Forage's own code."""
    for env in (forage_run["driver_env"], forage_run["worker_env"]):
        assert env["http_proxy"] == CALLER_PROXY
        assert {"localhost", "127.0.0.1", "::1"} <= set(env["no_proxy"].split(","))


@pytest.mark.ray
def test_start_ray_makes_no_non_loopback_connection_attempts(
    forage_trace: tuple[dict[str, Any], str],
) -> None:
    _, trace = forage_trace
    destinations = inet_destinations(trace)
    leaks = non_loopback(destinations)
    assert not leaks, "non-loopback traffic:\n" + "\n".join(line for *_, line in leaks)
    # Not vacuous: strace followed Ray's processes (their gRPC runs over TCP
    # loopback), and the dashboard's metadata probe did run, into the sink.
    assert len(destinations) > 10
    assert any((ip, port) == SINK for ip, port, _ in destinations)


@pytest.mark.ray
def test_detectors_catch_stock_ray_init(default_trace: tuple[dict[str, Any], str]) -> None:
    """Stock ray.init() probes the cloud metadata service and listens off loopback."""
    result, trace = default_trace
    leaks = {(ip, port) for ip, port, _ in non_loopback(inet_destinations(trace))}
    assert ("169.254.169.254", 80) in leaks
    assert result["non_loopback_listeners"], "stock Ray should listen beyond loopback"


# --------------------------------------------------------------------------- unit tests

_SAMPLE_TRACE = """\
2681  connect(60, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("169.254.169.254")}, 16) = -1 EINPROGRESS (Operation now in progress)
2624  connect(6, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("8.8.8.8")}, 16) = 0
2673  connect(16, {sa_family=AF_INET6, sin6_port=htons(42003), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::ffff:192.0.2.2", &sin6_addr), sin6_scope_id=0}, 28) = -1 EINPROGRESS
2673  connect(16, {sa_family=AF_INET6, sin6_port=htons(42003), sin6_flowinfo=htonl(0), inet_pton(AF_INET6, "::ffff:127.0.0.1", &sin6_addr), sin6_scope_id=0}, 28) = 0
9902  connect(24, {sa_family=AF_INET, sin_port=htons(9), sin_addr=inet_addr("127.0.0.1")}, 16) = -1 ECONNREFUSED
2806  sendto(20, "\\0", 1, 0, NULL, 0)   = 1
2807  sendto(5, "x", 1, 0, {sa_family=AF_INET, sin_port=htons(53), sin_addr=inet_addr("10.0.0.53")}, 16) = 1
2808  connect(3, {sa_family=AF_UNIX, sun_path="/tmp/ray/session/sockets/raylet"}, 110) = 0
"""  # noqa: E501


def test_inet_destinations_parses_ipv4_ipv6_and_sendto() -> None:
    got = [(ip, port) for ip, port, _ in inet_destinations(_SAMPLE_TRACE)]
    assert got == [
        ("169.254.169.254", 80),
        ("8.8.8.8", 53),
        ("::ffff:192.0.2.2", 42003),
        ("::ffff:127.0.0.1", 42003),
        ("127.0.0.1", 9),
        ("10.0.0.53", 53),
    ]
    assert {ip for ip, _, _ in non_loopback(inet_destinations(_SAMPLE_TRACE))} == {
        "169.254.169.254",
        "8.8.8.8",
        "::ffff:192.0.2.2",
        "10.0.0.53",
    }


@pytest.mark.parametrize(
    ("ip", "expected"),
    [
        ("127.0.0.1", True),
        ("127.0.0.53", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.0.2.2", False),
        ("::ffff:192.0.2.2", False),
        ("169.254.169.254", False),
        ("fe80::1%eth0", False),
        ("not-an-ip", False),
    ],
)
def test_is_loopback(ip: str, expected: bool) -> None:
    assert is_loopback(ip) is expected


def test_privacy_env_values() -> None:
    assert PRIVACY_ENV["RAY_USAGE_STATS_ENABLED"] == "0"
    assert PRIVACY_ENV["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    for key in ("http_proxy", "HTTP_PROXY", "RAY_USAGE_STATS_REPORT_URL"):
        assert PRIVACY_ENV[key].startswith("http://127.0.0.1:")
