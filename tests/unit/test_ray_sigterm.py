"""SIGTERM to a Forage process that has started Ray (`forage serve` once a run began, `forage research`) ends it
through Python's own handler — uvicorn's graceful shutdown in the gateway — not through Ray's C++ failure-signal
handler, which printed "*** SIGTERM received ***" and a stack dump over every `systemctl stop` of the gateway.

A real child process in the gateway's order: a Python SIGTERM handler installed in the main thread first (as
uvicorn does when it starts), then Forage's `start_ray` from a worker thread (the gateway starts Ray lazily, for
its first run), then SIGTERM to itself. Ray's own processes outlive the thread that started Ray (before, Linux's
parent-death signal killed them when it ended, and the child's `ray.shutdown()` sometimes waited 60 s for a GCS that
was gone, then exited 1).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.processes import child_env

pytestmark = pytest.mark.slow  # starts a Ray of its own in the child

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent("""
    import os, signal, sys, threading
    sys.path.insert(0, {repo!r})
    stopped = threading.Event()

    def graceful(signum, frame):  # what uvicorn's handler does: ask the server to stop, return
        print("graceful stop", flush=True)
        stopped.set()

    signal.signal(signal.SIGTERM, graceful)
    from infra.ray_runtime import start_ray

    starter = threading.Thread(target=start_ray, kwargs={{"num_cpus": 1, "quiet": True}})
    starter.start()
    tid = starter.native_id
    starter.join()
    import psutil, ray, time
    assert ray.is_initialized()
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/self/task/{{tid}}"):  # join returns just before the OS thread ends
        assert time.monotonic() < deadline, "the starter thread did not end"
        time.sleep(0.01)
    # Ray's GCS and raylet outlive the thread that started Ray (Linux's parent-death signal follows that thread)
    daemons = {{p.name(): p.status() for p in psutil.Process().children() if p.name() in ("gcs_server", "raylet")}}
    assert set(daemons) == {{"gcs_server", "raylet"}} and psutil.STATUS_ZOMBIE not in daemons.values(), daemons
    print("ray alive", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    if not stopped.wait(30):
        sys.exit(3)
    ray.shutdown()
    print("clean exit", flush=True)
""")


def test_sigterm_after_ray_started_reaches_pythons_handler_without_a_stack_dump(tmp_path: Path) -> None:

    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO)))
    proc = subprocess.run([sys.executable, str(script)], env=child_env(), capture_output=True, text=True,
                          timeout=180)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "ray alive" in proc.stdout and "graceful stop" in proc.stdout and "clean exit" in proc.stdout
    assert "SIGTERM received" not in output and "logging.cc" not in output, output[-3000:]
    assert proc.returncode != -signal.SIGTERM
