"""`forage demo` end to end with the embedded model, under strace: it finishes with a report whose
citations all resolve, and the whole process tree (Ray's C++ processes and every worker included)
makes zero non-loopback connections.

This is the one CI run of the real embedded-model path (SmolLM2-135M through xllamacpp). It derives one
requirement (`--requirements 1`, the demo's own option): every stage still runs on the real model, at half
the model calls of the default three-requirement demo. The four papers come from the session's ingest cache
when an earlier test ingested them (they are still stored in the demo's own store): its tests are marked
``last``, so they run after the gateway tests have ingested the same papers, and alone (beside other tests the
traced demo hung once: docs/testing.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import child_env
from tests.traced import inet_destinations, non_loopback, strace_cmd

pytestmark = [pytest.mark.slow, pytest.mark.real_llm, pytest.mark.last]

FORAGE = Path(sys.executable).with_name("forage")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, ingest_cache):
    if not FORAGE.exists():
        pytest.skip(f"the forage command is not installed next to {sys.executable}: run infra/install.sh")
    tmp = tmp_path_factory.mktemp("demo")
    trace = tmp / "trace.txt"
    cmd = [*strace_cmd(), "-o", str(trace), str(FORAGE), "demo", "--runs-dir", str(tmp / "runs"),
           "--store", str(tmp / "store"), "--requirements", "1"]
    env = child_env(FORAGE_INGEST__CACHE_DIR=str(ingest_cache))
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=1500)
    return proc, trace.read_text(), tmp


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


def test_asking_the_demo_run_gets_an_answer_from_its_evidence_that_verify_accepts(demo_run) -> None:
    """The README's question asked of the finished demo run (`forage ask --run`, the embedded model): an answer
    citing the run's own passages, kept in its asks.jsonl, and `forage verify` accepts the report and the answer."""
    _, _, tmp = demo_run
    (run_dir,) = (tmp / "runs").iterdir()
    runs = ["--runs-dir", str(run_dir.parent)]
    asked = subprocess.run([str(FORAGE), "ask", "--run", run_dir.name, "--llm", "embedded",
                            "What limits heparin use after trauma?", "--json", *runs],
                           capture_output=True, text=True, timeout=600, env=child_env())
    assert asked.returncode == 0, asked.stdout + asked.stderr
    answer = json.loads(asked.stdout)
    assert answer["kind"] == "answer" and answer["cited"], answer
    state = json.loads((run_dir / "run.json").read_text())
    read = {d["doc_id"] for d in state["documents"].values()} | {s["doc_id"] for s in state["sources"]}
    assert {c["doc_id"] for c in answer["cited"]} <= read
    assert re.search(r"\[\d+\]", answer["text"])
    verified = subprocess.run([str(FORAGE), "verify", run_dir.name, *runs], capture_output=True, text=True,
                              timeout=300, env=child_env(COLUMNS="300"))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"ask 1: [1] chunk {answer['cited'][0]['chunk_id']}" in verified.stdout
