"""`forage demo` end to end with the embedded model, under strace: it finishes with a report whose
citations all resolve, and the whole process tree (Ray's C++ processes and every worker included)
makes zero non-loopback connections.

This is the one CI run of the real embedded-model path (SmolLM2-135M through xllamacpp). It derives one
requirement (`--requirements 1`, the demo's own option): every stage still runs on the real model, at half
the model calls of the default three-requirement demo.

The demo starts when the test session starts (``early_start``, called by tests/conftest.py) and runs in its own
process beside the other tests: most of its time is the model on one CPU thread, and the suite leaves about a
third of the machine's two cores idle. Its tests are marked ``last`` and read the finished run at the end. It
ingests the four papers through the session's ingest cache (their entries are written whole, so a test that
ingests one of them at the same time reads a whole entry or parses it itself).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.early import early_started
from tests.test_ray_privacy import _child_env, _strace_cmd, inet_destinations, non_loopback

pytestmark = [pytest.mark.slow, pytest.mark.real_llm, pytest.mark.last]

FORAGE = Path(sys.executable).with_name("forage")
LIMIT_S = 1500  # bound on the demo, from the session's start


class Demo:
    """`forage demo` under strace, started in the background; its output goes to files (a pipe nobody read
    while other tests ran could fill and stall it)."""

    def __init__(self, tmp: Path, ingest_cache: Path) -> None:
        self.tmp = tmp
        self.trace = tmp / "trace.txt"
        cmd = [*_strace_cmd(), "-o", str(self.trace), str(FORAGE), "demo", "--runs-dir", str(tmp / "runs"),
               "--store", str(tmp / "store"), "--requirements", "1"]
        env = _child_env(FORAGE_INGEST__CACHE_DIR=str(ingest_cache))
        self._out, self._err = (tmp / "stdout.txt").open("w"), (tmp / "stderr.txt").open("w")
        self.proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=self._out, stderr=self._err, text=True)

    def result(self) -> tuple[subprocess.CompletedProcess, str, Path]:
        """The finished demo (waits for it): its exit code and output, the trace, its folder."""
        try:
            code = self.proc.wait(LIMIT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self._out.close()
        self._err.close()
        done = subprocess.CompletedProcess(self.proc.args, code, (self.tmp / "stdout.txt").read_text(),
                                           (self.tmp / "stderr.txt").read_text())
        return done, self.trace.read_text(), self.tmp

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


def early_start(request: pytest.FixtureRequest) -> Demo:
    """Called by tests/conftest.py when the session starts: the demo runs beside the other tests."""
    if not FORAGE.exists():
        pytest.skip(f"the forage command is not installed next to {sys.executable}: run infra/install.sh")
    return Demo(request.getfixturevalue("tmp_path_factory").mktemp("demo"), request.getfixturevalue("ingest_cache"))


@pytest.fixture(scope="module")
def demo_run(request):
    return early_started(request).result()


def test_demo_finishes_with_a_report(demo_run) -> None:
    proc, _, tmp = demo_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert "report:" in proc.stdout
    (run_dir,) = (tmp / "runs").iterdir()
    state = json.loads((run_dir / "run.json").read_text())
    assert state["status"] == "finished"
    assert all(d["status"] == "stored" for d in state["documents"].values()), state["documents"]
    assert len(state["documents"]) == 4


def test_demo_citations_all_resolve(demo_run) -> None:
    _, _, tmp = demo_run
    (run_dir,) = (tmp / "runs").iterdir()
    report = (run_dir / "report.md").read_text()
    cited = {int(n) for n in re.findall(r"\[(\d+)\]", report.split("## Sources Consulted")[0])}
    evidence = [json.loads(line) for line in (run_dir / "evidence.jsonl").read_text().splitlines()]
    assert cited <= {row["n"] for row in evidence}
    row = evidence[0]
    out = subprocess.run([str(FORAGE), "chunk", row["chunk_id"], "--json", "--run", run_dir.name,
                          "--runs-dir", str(run_dir.parent)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert row["quote"] in json.loads(out.stdout)["text"]


def test_demo_makes_no_non_loopback_connection(demo_run) -> None:
    _, trace, _ = demo_run
    destinations = inet_destinations(trace)
    assert destinations, "the trace saw no connection at all: strace did not follow the process tree"
    assert non_loopback(destinations) == []
