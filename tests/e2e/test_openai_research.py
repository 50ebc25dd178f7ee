"""A whole `forage research --offline --llm openai` run against a real OpenAI-compatible server: llama.cpp's server
(xllamacpp) with SmolLM2-135M on loopback (tests/llama_server.py), as a lab runs vLLM on each workstation.

`python -m gateway.cli research ... --address <the session's GCS address>` runs in a child process attached to
the session's Ray; every model call of the run — planning, judging, summaries, the report — goes over HTTP
through the official `openai` client with the server's API key. The run finishes with a report, and `forage
verify` checks every citation against the stored chunks. The weak model's words are not judged here; that the
pipeline survives them, with this backend, is.

It is also the test of `forage research --address ADDR` (it was test_cli_address.py, which drove its own run):
the run used that cluster (the cluster's job table lists the child as a driver), and the query is not readable
through the cluster: the job table's entrypoint (which every driver attached to the cluster can list) does not
hold the command line, and no file of the Ray session (worker logs included) holds the query text.

The run starts when the test session starts (``early_start``, called by tests/conftest.py) and goes on beside the
other tests: most of its time is the model on one CPU thread. The test is marked ``last`` and checks the finished
run at the end, when the session's Ray has also served every other test (none of their files may hold the query
either).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.ray_runtime import WITHHELD_ENTRYPOINT
from tests.early import early_started
from tests.llama_server import LlamaServer
from tests.processes import LIMIT_S, end_group, forage

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.real_llm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
QUERY = "What complications follow anticoagulant thromboprophylaxis after major trauma?"


class OpenAIRun:
    """`forage research --llm openai --address ...` in its own process, against a LlamaServer in this one."""

    def __init__(self, ray_cluster, shared_data: Path, ingest_cache: Path, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        lib = tmp_path / "library"
        lib.mkdir()
        (lib / "dvt.pdf").symlink_to(shared_data / "pdfs" / "dvt_prophylaxis_trauma_bmc2010.pdf")
        address = ray_cluster.get_runtime_context().gcs_address
        self.server = LlamaServer(slots=2).__enter__()
        self._serving = True
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORAGE_")}
        env.update({"FORAGE_LLM__BASE_URL": self.server.base_url, "FORAGE_LLM__MODEL": self.server.model,
                    "FORAGE_LLM__API_KEY": self.server.api_key, "FORAGE_NET__OFFLINE": "true",
                    "FORAGE_RUN__MAX_ITERATIONS": "1", "FORAGE_RUN__MAX_REQUIREMENTS": "1",
                    "FORAGE_INGEST__CACHE_DIR": str(ingest_cache), "FORAGE_WRITE__CHARTS": "false",
                    "PYTHONPATH": str(REPO)})
        self.env = env
        args = ["research", QUERY, "--yes", "--offline", "--llm", "openai", "--library", str(lib),
                "--runs-dir", str(tmp_path / "runs"), "--store", str(tmp_path / "store"), "--address", address]
        self.proc = forage(args, env, tmp_path / "research.log")

    def wait(self) -> int:
        """The run's exit code (waits for it); the model server stops once it has finished."""
        try:
            return self.proc.wait(LIMIT_S)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        end_group(self.proc)
        if self._serving:
            self._serving = False
            self.server.__exit__(None, None, None)


def early_start(request: pytest.FixtureRequest) -> OpenAIRun:
    """Called by tests/conftest.py when the session starts: the run goes on beside the other tests."""
    value = request.getfixturevalue
    return OpenAIRun(value("ray_cluster"), value("shared_data"), value("ingest_cache"),
                     value("tmp_path_factory").mktemp("openai-run"))


@pytest.mark.last
def test_a_research_run_on_an_openai_compatible_server_finishes_and_its_citations_verify(
        request, ray_cluster) -> None:
    run = early_started(request)
    code = run.wait()
    server, env, tmp_path, proc = run.server, run.env, run.tmp_path, run.proc
    log = (tmp_path / "research.log").read_text()
    assert code == 0, log[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    state = json.loads((run_dir / "run.json").read_text())
    assert state["status"] == "finished" and (run_dir / "report.md").is_file(), state.get("error")
    recorded = state["settings"]["resolved"]["llm"]
    assert recorded["backend"] == "openai" and recorded["base_url"] == server.base_url
    assert "api_key" not in recorded and server.api_key not in (run_dir / "run.json").read_text()
    assert [d["status"] for d in state["documents"].values()] == ["stored"]
    assert sum(state["iterations"][0]["llm_calls"].values()) > 0  # the model was asked, over HTTP
    (job,) = [j for j in ray_cluster._private.state.jobs() if j["DriverPid"] == proc.pid]  # it attached here
    assert QUERY not in json.dumps(job) and job.get("Entrypoint") == WITHHELD_ENTRYPOINT
    # Ray's own files of the session (logs of every worker that ran the run's actors) never hold the query,
    # so `forage forget` need not (and does not) touch them
    session = Path(ray_cluster._private.worker._global_node.get_session_dir_path())
    needle = QUERY.encode()
    holding = [p for p in session.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]
    assert holding == []

    verify = subprocess.run([sys.executable, "-m", "gateway.cli", "verify", run_dir.name, "--runs-dir",
                             str(tmp_path / "runs")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
