"""Privacy-safe start-up of the local Ray runtime used by Forage.

Forage promises that running it makes no network traffic beyond what the user
asked for.  A stock ``ray.init()`` breaks that promise: Ray 2.60 binds its
daemons to the machine's LAN address, probes a public address to find that
address, and asks the cloud metadata service where it runs.  This module
starts Ray so that none of this happens, and gives the tests a way to check.

What a stock ``ray.init(num_cpus=2)`` does (Ray 2.60.0; measured with
``strace -f -e trace=connect,sendto`` over ray.init + one task + one actor +
ray.shutdown, on a host whose eth0 address is 192.0.2.2 and whose resolver is
10.255.255.53):

* the dashboard process asks the cloud metadata service which cloud it runs on
  (``UsageStatsHead.run`` -> ``usage_lib.get_cluster_config_to_report`` ->
  ``get_cloud_from_metadata_requests``): Azure, then GCP, then AWS::

      connect(.., htons(80), inet_addr("169.254.169.254")) = -1 EINPROGRESS
      sendto(.., "GET /metadata/instance?api-version=2021-12-13 HTTP/1.1 ..
      connect(.., htons(53), inet_addr("10.255.255.53")) = 0   # metadata.google.internal
      connect(.., htons(80), inet_addr("169.254.169.254")) = -1 EINPROGRESS
      sendto(.., "GET /latest/meta-data/ HTTP/1.1\\r\\nHost: 169.254.169.254 ..

  The probe runs *before* the module checks whether usage stats are enabled,
  so ``RAY_USAGE_STATS_ENABLED=0`` does not stop it.  ``include_dashboard=False``
  does not stop it either: Ray still starts ``dashboard.py`` with
  ``--modules-to-load=UsageStatsHead``, the module that sends the probe.
  Neither OpenCensus, OpenTelemetry nor google-auth sent any traffic.
* the driver and the runtime-env agent find "the node IP" by connecting a UDP
  socket to 8.8.8.8:53.  The connect() sends no packet, but it asks the kernel
  for a route to a public address::

      connect(.., htons(53), inet_addr("8.8.8.8")) = 0

* every daemon then uses that LAN address (192.0.2.2).  GCS, raylet, workers
  and agents listen on ``::``, ``0.0.0.0`` or 192.0.2.2, and all their gRPC
  traffic goes to 192.0.2.2:*, not to loopback.  ``ray.init(
  _node_ip_address="127.0.0.1")`` does not help:
  ``services.resolve_ip_for_localhost`` swaps a loopback address back to the
  LAN address.

The switches, each checked on its own with the same strace run:

``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``
    Turns off Ray's "multi-node cluster" mode, which on Linux is on by
    default.  ``services.get_node_ip_address`` then returns 127.0.0.1 (as it
    does on macOS and Windows) without the 8.8.8.8 lookup.  As a result GCS,
    raylet, agents, workers and the driver listen only on 127.0.0.1, and all
    Ray traffic stays on loopback.  The 8.8.8.8 and 192.0.2.2 connects are
    gone.  Ray reads this variable when ``ray`` is *imported*
    (``ray_constants.ENABLE_RAY_CLUSTER``), so if ``ray`` was imported before
    :func:`start_ray` runs, start_ray also sets that constant itself.  Child
    processes read the variable from the environment.  The cost: this process
    can only run or attach to a Ray cluster on this machine, which is what
    Forage uses.  ``ray start --address=..`` (joining as a worker node)
    refuses to run with it (``ray/scripts/scripts.py``).
``http_proxy`` / ``HTTP_PROXY`` = ``http://127.0.0.1:9`` (daemons only)
    Nothing in Ray turns the metadata probe off.  The only other way around
    it (a ``~/ray_bootstrap_config.yaml``) writes into the user's home and
    makes Ray Tune think it runs on an autoscaler cluster.  The probe uses
    ``requests``, which honours ``http_proxy``, and all three URLs are plain
    http.  A proxy address on loopback where nothing listens (port 9,
    "discard") makes each request fail at once with a refused loopback
    connect, and no DNS lookup happens.  The only trace left is
    ``connect(.., htons(9), inet_addr("127.0.0.1"))``.  This also removes the
    1 s timeouts that blocked the dashboard's event loop during start-up.
    The proxy must reach only Ray's daemons.  So :func:`start_ray` sets it
    just for the duration of ``ray.init`` (the daemons inherit it when they
    are spawned), puts the caller's own values back afterwards, and gives
    them to the workers through ``runtime_env["env_vars"]``.  Forage code in
    the driver and in actors therefore keeps its normal proxy settings.
``no_proxy`` / ``NO_PROXY`` += ``localhost,127.0.0.1,::1`` (all processes, kept)
    Keeps the dashboard's HTTP calls to itself away from the dead proxy.  It
    also matters without that proxy: measured with a caller proxy
    ``http_proxy=http://10.9.9.9:3128`` and no ``no_proxy``, a Ray worker sent
    its gRPC traffic for 127.0.0.1 through it::

        connect(.., htons(3128), inet_addr("10.9.9.9")) = 0

    :func:`start_ray` therefore adds the loopback hosts to the caller's own
    ``no_proxy`` and leaves them there, in the driver and in the workers.
``RAY_USAGE_STATS_ENABLED=0``
    Turns Ray's usage-stats collection off explicitly.  ``ray.init()`` already
    turns it off for clusters it starts itself (unless it is a nightly wheel),
    but a cluster started with ``ray start`` reports by default.  Setting the
    variable covers both cases.  On its own it changed no connect() in the
    ``ray.init`` measurement.
``RAY_USAGE_STATS_REPORT_URL=http://127.0.0.1:9/``
    A ``ray start`` cluster with usage stats *disabled* still posts a "usage
    stats disabled" ping to https://usage-stats.ray.io/
    (``UsageStatsHead._report_disabled_usage_sync``; skipped only for clusters
    that ``ray.init`` started).  Pointing the URL at the same loopback sink
    keeps a future ``ray start``/``ray_cluster.yaml`` set-up quiet.  It has no
    effect on clusters that ``ray.init`` starts.
``include_dashboard=False``, ``dashboard_host="127.0.0.1"`` (ray.init, local start only)
    These do not stop any traffic (see above).  They stop the dashboard from
    serving its web UI and job-submission API, so there are fewer sockets to
    secure, and they keep the dashboard bound to loopback even if Ray's
    default changes.  Cost: the state API needs that server
    (``ray.util.state.list_nodes()`` fails with ``ServerUnavailable``,
    measured), and so does ``ray list``.  With the dashboard on, the measured
    traffic was the same: no non-loopback connects.
``address="local"`` when no address is given
    A plain ``ray.init()`` attaches to any ``ray start`` cluster it finds in
    ``/tmp/ray`` (or in ``RAY_ADDRESS``) instead of starting its own.
    ``"local"`` always starts a fresh instance that uses the settings above.

With all of the switches on, the same strace run has no connect()/sendto() to
any non-loopback address, and every socket that the Ray processes listen on
is bound to 127.0.0.1 (or its IPv4-mapped form ``::ffff:127.0.0.1``).
``tests/test_ray_privacy.py`` checks both.

To start a cluster by hand that :func:`start_ray` can attach to, export
:data:`PRIVACY_ENV` first::

    env $(python -m infra.ray_runtime) \\
        ray start --head --num-cpus=2 --include-dashboard=false

Measured this way (``ray start`` and a driver attached with
``start_ray(address="127.0.0.1:<port>")`` under one strace): no non-loopback
connect() at all.  Without ``RAY_USAGE_STATS_REPORT_URL`` there was one, the
DNS lookup of usage-stats.ray.io.  Note that a driver given an explicit
address turns Ray's token authentication on only if ``RAY_AUTH_MODE=token``
is set (Ray 2.60 writes the token to ``~/.ray/auth_token``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import psutil

from infra import privacy

__all__ = [
    "PRIVACY_ENV",
    "PROXY_ENV_KEYS",
    "is_loopback",
    "loopback_only_listeners",
    "start_ray",
]

logger = logging.getLogger(__name__)

#: A loopback address where nothing listens ("discard"), used as an HTTP
#: proxy that cannot be reached, and as the usage-stats URL.
_LOOPBACK_SINK: Final[str] = "http://127.0.0.1:9"
#: Hosts that bypass the proxy above, so that Ray's calls to itself still work.
_LOOPBACK_HOSTS: Final[str] = "localhost,127.0.0.1,::1"

#: Environment for every Ray process of a Forage deployment.  Export it before
#: ``ray start``, or let :func:`start_ray` apply it.  The module docstring
#: explains each entry and what was measured.
PRIVACY_ENV: Final[dict[str, str]] = {
    # Pins Ray's node IP to 127.0.0.1: no 8.8.8.8 route lookup, loopback-only listeners.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # Usage stats off explicitly (ray start clusters report by default).
    "RAY_USAGE_STATS_ENABLED": "0",
    # ray start clusters still send a "disabled" ping. Send it to a loopback sink.
    "RAY_USAGE_STATS_REPORT_URL": f"{_LOOPBACK_SINK}/",
    # Sends the dashboard's cloud-metadata probe (plain-http requests) to a dead loopback proxy.
    "http_proxy": _LOOPBACK_SINK,
    "HTTP_PROXY": _LOOPBACK_SINK,
    "no_proxy": _LOOPBACK_HOSTS,
    "NO_PROXY": _LOOPBACK_HOSTS,
}

#: Entries of :data:`PRIVACY_ENV` meant only for Ray's daemons.
#: :func:`start_ray` puts the caller's values back in the driver and in the
#: workers once the daemons are running.
PROXY_ENV_KEYS: Final[frozenset[str]] = frozenset({"http_proxy", "HTTP_PROXY"})
_NO_PROXY_KEYS: Final[tuple[str, str]] = ("no_proxy", "NO_PROXY")


def start_ray(
    num_cpus: int | None = None,
    address: str | None = None,
    namespace: str = "forage",
    quiet: bool = False,
    resources: dict[str, float] | None = None,
    node_ip: str | None = None,
) -> None:
    """Start, or attach to, a Ray runtime that keeps all traffic on loopback.

    Calling it again while Ray is initialised does nothing.

    Args:
        num_cpus: CPUs for a local instance.  ``None`` lets Ray count them.
            Ignored, with a warning, when ``address`` is given, because Ray
            rejects it when attaching to an existing cluster.
        address: ``None`` starts a fresh local single-node instance (Ray's
            ``address="local"``).  Anything else (``"auto"``,
            ``"127.0.0.1:6379"``) attaches to an existing cluster.  Then only
            the process-level settings apply, and the privacy guarantees hold
            only if that cluster was started with :data:`PRIVACY_ENV` (see the
            module docstring).  Because the node IP is pinned to 127.0.0.1,
            only a cluster on this machine can be attached to.
        namespace: Ray namespace for named actors.
        resources: custom resources of a local instance (e.g. ``{"llm_slot": 4}``); a cluster
            attached to declares its own (``ray start --resources``).
        node_ip: a driver on a node of a lab cluster (``ray.lab_network``,
            :mod:`infra.cluster`) attaching with ``address``: this node's lab
            address, which the node's raylet was started with.  The node IP is
            then not pinned to loopback (a cluster's raylets are not on it);
            usage stats stay off and the metadata probe stays behind the dead
            proxy.  A driver elsewhere uses Ray Client (``ray://head:10001``)
            and needs no node_ip.  None (the default): loopback only.
        quiet: keep Ray's own log lines and the workers' output off the
            terminal (they stay in Ray's session log folder). For the CLI,
            whose progress view they would garble.

    Note:
        This function changes ``os.environ`` of the current process.  The
        ``RAY_*`` entries of :data:`PRIVACY_ENV` stay set, and so do the
        loopback hosts added to ``no_proxy``.  ``http_proxy``/``HTTP_PROXY``
        point at the dead proxy only while ``ray.init`` runs, so other threads
        that make plain-HTTP calls during that time would fail.
    """
    import ray  # Not at module level: importing this module must stay cheap.

    if ray.is_initialized():
        logger.debug("Ray already initialised; start_ray() is a no-op")
        return


    privacy.apply()  # library telemetry off, inherited by Ray's daemons and workers
    saved_proxy_env = {key: os.environ.get(key) for key in PROXY_ENV_KEYS}
    no_proxy = _with_loopback_hosts(os.environ.get(key) for key in _NO_PROXY_KEYS)
    if node_ip is not None and address is None:
        raise ValueError("start_ray: node_ip is for attaching to a cluster; give its address too")
    os.environ.update(PRIVACY_ENV)
    os.environ.update(dict.fromkeys(_NO_PROXY_KEYS, no_proxy))
    if node_ip is None or is_loopback(node_ip):
        _pin_node_ip_to_loopback()
    else:  # a lab cluster node: Ray's own node-IP detection is replaced by the address given
        os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)

    # The raylet starts the workers, so they would inherit the dead proxy.
    # Give them the caller's own values back (an empty value means "no
    # proxy" to urllib, requests and httpx), with loopback still exempt.
    worker_env = {key: value or "" for key, value in saved_proxy_env.items()}
    worker_env.update(dict.fromkeys(_NO_PROXY_KEYS, no_proxy))
    runtime_env: dict[str, Any] = {"env_vars": worker_env}
    init_kwargs: dict[str, Any] = {"namespace": namespace, "runtime_env": runtime_env}
    if quiet:
        init_kwargs.update(log_to_driver=False, logging_level=logging.ERROR)
    if address is None:
        init_kwargs.update(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            dashboard_host="127.0.0.1",
        )
        if resources:
            init_kwargs["resources"] = dict(resources)
    else:
        if num_cpus is not None:
            logger.warning(
                "start_ray: num_cpus=%s ignored when attaching to an existing cluster at %r",
                num_cpus,
                address,
            )
        init_kwargs["address"] = address
        if node_ip is not None:
            init_kwargs["_node_ip_address"] = node_ip

    # This driver leaves SIGTERM (and crashes) to Python: Ray's C++ failure-signal handler would print a
    # stack dump over `forage serve`'s graceful stop. Only this process: Ray reads the flag at connect time,
    # so its daemons and workers keep their own handler.
    from ray._private import ray_constants

    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True

    def init() -> None:
        with _entrypoint_withheld():
            ray.init(**init_kwargs)

    try:
        _in_a_lasting_thread(init)
    finally:
        _restore_env(saved_proxy_env)


def _in_a_lasting_thread(init: Callable[[], None]) -> None:
    """Run ``init`` (``ray.init``) in a thread that lives as long as this process.

    A local ``ray.init`` starts Ray's GCS server and raylet with ``PR_SET_PDEATHSIG(SIGKILL)`` (Ray's kernel
    fate-sharing), and Linux sends that signal when the *thread* that started them ends, not the process. Started
    from a worker thread that later ends — the gateway starts Ray from its run pool, which it shuts down on a graceful
    stop; a test's starter thread — Ray's own processes were killed under a live driver, whose ``ray.shutdown()`` then
    waited 60 s for the GCS and exited 1 (the flaky ``tests/unit/test_ray_sigterm.py``). The main thread lives as
    long as the process; any other caller's ``ray.init`` runs in a daemon thread that never returns."""
    if threading.current_thread() is threading.main_thread():
        init()
        return
    started = threading.Event()
    failed: list[BaseException] = []

    def keeper() -> None:
        try:
            init()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(exc)
        finally:
            started.set()
        if not failed:
            threading.Event().wait()  # forever: Ray's GCS and raylet share this thread's fate

    threading.Thread(target=keeper, name="forage-ray-keeper", daemon=True).start()
    started.wait()
    if failed:
        raise failed[0]


#: what the cluster's job table shows as this driver's entrypoint
WITHHELD_ENTRYPOINT = "forage (command line withheld)"


@contextlib.contextmanager
def _entrypoint_withheld() -> Iterator[None]:
    """Ray records the driver's full command line (``forage research "<the query>"``) as the job's
    entrypoint in the cluster's job table, which every driver attached to the cluster can list
    (``ray.util.state`` / ``ray._private.state.jobs()``): on a lab cluster, other users would read the
    query. While ``ray.init`` runs, the entrypoint is :data:`WITHHELD_ENTRYPOINT` instead."""
    import ray._private.utils as ray_utils

    original = getattr(ray_utils, "get_entrypoint_name", None)
    if original is None:  # a Ray without it records no entrypoint this way
        yield
        return
    ray_utils.get_entrypoint_name = lambda: WITHHELD_ENTRYPOINT
    try:
        yield
    finally:
        ray_utils.get_entrypoint_name = original


def loopback_only_listeners() -> list[tuple[str, int, int]]:
    """Return the Ray processes' listening sockets that are *not* on loopback.

    An empty list means Ray listens on loopback only.  Each entry is
    ``(ip, port, pid)``.  ``0.0.0.0`` and ``::`` count as non-loopback, and
    so do unconnected UDP sockets bound to a non-loopback address.

    The processes checked are this process and all its descendants (a local
    instance's GCS, raylet, dashboard, agents and, below the raylet, the
    workers).  When Ray is initialised they also include every process whose
    command line names the current session directory or GCS address, with
    its descendants.  This covers a ``ray start`` cluster this driver
    attached to, including its Ray Client server.  Processes that exit or
    cannot be read during the scan are skipped.
    """
    found: set[tuple[str, int, int]] = set()
    for proc in _ray_process_tree():
        try:
            connections = _inet_connections(proc)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            continue
        for conn in connections:
            listening = conn.status == psutil.CONN_LISTEN or (
                conn.type == socket.SOCK_DGRAM and not conn.raddr
            )
            if not listening or not conn.laddr:
                continue
            ip, port = conn.laddr.ip, conn.laddr.port
            if not is_loopback(ip):
                found.add((ip, port, proc.pid))
    return sorted(found)


def is_loopback(ip: str) -> bool:
    """Return True if ``ip`` is a loopback address, including ``::ffff:127.x``."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


# --------------------------------------------------------------------------- helpers


def _pin_node_ip_to_loopback() -> None:
    """Apply ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in this process too.

    Ray reads the variable once, at import time.  If ``ray`` was imported
    before :func:`start_ray` set it, node-IP detection in this process would
    still pick the LAN address.  Child processes read the environment and do
    not need this.  This touches a private Ray attribute (Ray is pinned to
    2.60.0).  If the attribute moves, the privacy tests fail.
    """
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False


def _with_loopback_hosts(values: Iterable[str | None]) -> str:
    """Merge comma-separated ``no_proxy`` values with the loopback hosts."""
    hosts: list[str] = []
    for value in (*values, _LOOPBACK_HOSTS):
        for host in (value or "").split(","):
            host = host.strip()
            if host and host not in hosts:
                hosts.append(host)
    return ",".join(hosts)


def _restore_env(saved: Mapping[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _session_markers() -> list[str]:
    """Strings that appear in the command line of the current session's daemons."""
    import ray

    if not ray.is_initialized():
        return []
    markers = [ray.get_runtime_context().gcs_address]  # raylet, ray client server
    node = getattr(ray._private.worker, "_global_node", None)
    get_dir = getattr(node, "get_session_dir_path", None)
    if callable(get_dir):
        markers.append(get_dir())  # gcs_server, raylet, dashboard, monitors
    return [marker for marker in markers if marker]


def _ray_process_tree() -> list[psutil.Process]:
    roots: list[psutil.Process] = [psutil.Process()]
    markers = _session_markers()
    if markers:
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if any(marker in arg for arg in cmdline for marker in markers):
                roots.append(proc)
    seen: dict[int, psutil.Process] = {}
    for root in roots:
        for proc in _with_descendants(root):
            seen.setdefault(proc.pid, proc)
    return list(seen.values())


def _with_descendants(root: psutil.Process) -> Iterable[psutil.Process]:
    yield root
    try:
        yield from root.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return


def _inet_connections(proc: psutil.Process) -> list[Any]:
    # psutil >= 6 renamed connections() to net_connections().
    method = getattr(proc, "net_connections", None) or proc.connections
    return list(method(kind="inet"))


if __name__ == "__main__":  # `env $(python -m infra.ray_runtime) ray start ...`
    print("\n".join(f"{key}={value}" for key, value in PRIVACY_ENV.items()))
