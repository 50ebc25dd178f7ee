"""`forage research --address ADDR` runs on the Ray cluster at ADDR instead of starting its own.

The cluster is this test session's shared Ray; `python -m gateway.cli research ... --address <its GCS
address>` runs in a child process (the model: the end-to-end brain behind a loopback Ollama server). Proof
that the run used that cluster: the run finishes with a report and the cluster's job table lists the
child as a driver. And the query is not readable through the cluster: the job table's entrypoint (which
every driver attached to the cluster can list) does not hold the command line, and no file of the Ray
session (worker logs included) holds the query text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.ray_runtime import WITHHELD_ENTRYPOINT
from tests.e2e.test_kill_driver import LIMIT_S, QUERY, child_env, end_group, forage, library, research_args

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]


def test_research_attaches_to_the_cluster_at_address(ray_cluster, shared_data, ingest_cache,
                                                     tmp_path: Path) -> None:
    from tests.e2e import brain as brain_module
    from tests.e2e.test_kill_driver import Gate
    from tests.loopback_ollama import LoopbackOllama

    address = ray_cluster.get_runtime_context().gcs_address
    lib = library(tmp_path, shared_data)
    with LoopbackOllama(responder=Gate().responder(brain_module), hang_limit_s=LIMIT_S) as llm:
        env = child_env(llm.url, ingest_cache)
        env["FORAGE_RUN__MAX_ITERATIONS"] = "1"
        proc = forage([*research_args(lib, tmp_path), "--address", address], env, tmp_path / "research.log")
        try:
            code = proc.wait(LIMIT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
            end_group(proc)
    log = (tmp_path / "research.log").read_text()
    assert code == 0, log[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = json.loads((run_dir / "run.json").read_text())
    assert state["status"] == "finished" and (run_dir / "report.md").exists()
    (job,) = [j for j in ray_cluster._private.state.jobs() if j["DriverPid"] == proc.pid]  # it attached here
    assert QUERY not in json.dumps(job) and job.get("Entrypoint") == WITHHELD_ENTRYPOINT

    # Ray's own files of the session (logs of every worker that ran the run's actors) never hold the query,
    # so `forage forget` need not (and does not) touch them
    session = Path(ray_cluster._private.worker._global_node.get_session_dir_path())
    needle = QUERY.encode()
    holding = [p for p in session.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]
    assert holding == []
