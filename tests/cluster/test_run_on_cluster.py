"""A whole research run on a simulated lab cluster, with a node leaving mid-run (tests/cluster/run_on_cluster.py).

Checks what issue 8 asks of a cluster: the Foragers spread over the machines, each machine's LLM calls
go to its own Ollama, and when a machine leaves while its Forager works, that requirement fails for the
iteration and is foraged again on a machine that is left, the machine's Ollama gets no more calls, and
the run finishes with its report. The cluster runs in its own process: Ray is initialised once per
process, and the test session's Ray is already running.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PAPERS = ("dvt_prophylaxis_trauma_bmc2010.pdf", "beyond_summarization_arxiv2304.02623v1.pdf")


@pytest.mark.slow
def test_a_node_leaves_mid_run_and_the_run_finishes(shared_pdfs, tmp_path: Path) -> None:
    library = tmp_path / "library"
    library.mkdir()
    pdfs = {p.name: p for p in shared_pdfs}
    for name in PAPERS:
        (library / name).symlink_to(pdfs[name])
    proc = subprocess.run([sys.executable, str(HERE / "run_on_cluster.py"), str(library), str(tmp_path / "work")],
                          cwd=HERE.parents[1], capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "finished", result["stop_reason"]
    assert Path(result["report"]).is_file()
    state = json.loads((Path(result["run_dir"]) / "run.json").read_text())
    assert all(d["status"] == "stored" for d in state["documents"].values()), state["documents"]

    started = [e for e in result["events"] if e["stage"] == "run" and e["kind"] == "started"]
    assert [e["node"] for e in started] == ["head"]  # the Orchestrator lives on the driver's node
    actors = [e for e in result["events"] if e["stage"] == "forage" and e["kind"] == "actor"]
    first = {e["requirement"]: e["node"] for e in actors if e["iteration"] == 1}
    assert set(first) == {"R1", "R2", "R3"}
    assert len(set(first.values())) == 3, first  # spread: one Forager per machine

    gone, lost = result["removed"]["node"], result["removed"]["requirement"]
    assert first[lost] == gone
    assert state["iterations"][0]["status"][lost] == "failed"  # its Forager died with the machine
    second = {e["requirement"]: e["node"] for e in actors if e["iteration"] == 2}
    assert second[lost] != gone and state["iterations"][1]["status"][lost] == "ok"
    assert gone not in second.values()
    # the DVT paper answers R1, wherever it was foraged (coverage a probability: at the run's goal, 0.85)
    assert state["coverage"]["R1"] >= 0.85

    at_removal, at_end = result["removed"]["chats_at_removal"], result["chats_at_end"]
    assert at_end[gone] == at_removal[gone]  # no call reached the machine that left
    kept = [n for n in ("gpu0", "gpu1", "gpu2") if n != gone]
    assert all(at_end[n] > at_removal[n] for n in kept), (at_removal, at_end)  # the machines left went on
    # requirements, search strings and the report were written by the GPU nodes' models: the head (the driver's
    # machine, where the Orchestrator and the Writer may live) needs no model server
    assert at_end["head"] == 0, at_end
