"""Child processes the tests start: `forage` commands in their own process group (ended with everything they left),
the pytest environment a child gets without anything that would change its outcome, and waiting for a killed Ray
actor to be gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from infra.ray_runtime import PRIVACY_ENV

REPO = Path(__file__).resolve().parents[1]
#: bound on every wait for a command the tests started: a run that hangs fails its test instead of hanging it
LIMIT_S = 480


def forage(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """`forage ARGS` as its own process group (so its leftovers, if any, can be ended with it), output to ``log``."""
    out = log.open("w")
    return subprocess.Popen([sys.executable, "-m", "gateway.cli", *args], cwd=REPO, env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def end_group(proc: subprocess.Popen | int) -> None:
    """End what is left of a process group a test started (nothing, when Ray shared the driver's fate)."""
    try:
        os.killpg(proc if isinstance(proc, int) else proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def child_env(**extra: str) -> dict[str, str]:
    """The pytest environment without anything that would change a child's outcome (Ray's privacy settings, a
    cluster address, proxies), plus ``extra``."""
    drop = {*PRIVACY_ENV, "RAY_ADDRESS", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(extra)
    return env


def until_gone(call) -> None:  # noqa: ANN001 - a remote method of a Ray actor handle
    """Return once a Ray actor that was killed is gone: ``ray.kill`` lands asynchronously, and a call made before then
    is still served. ``call`` is one of its methods without arguments; each try waits for its answer."""
    import pytest
    import ray

    with pytest.raises(ray.exceptions.RayActorError):
        for _ in range(10_000):
            ray.get(call.remote(), timeout=60)
