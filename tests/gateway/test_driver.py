"""examples/driver.py as a lab script uses it: several queries through a live gateway (a subprocess talking
HTTP + WebSocket to it, one query approved with edits from a YAML file, the other as proposed), and the same
script straight into the Ray cluster with no gateway."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.gateway.live import DEMO_LIBRARY, EDITED_R1, QUERY, REPO

pytestmark = [pytest.mark.ray]

DRIVER = REPO / "examples" / "driver.py"
# two questions, each a requirement of the test brain's plan (the third requirement shares no word with it: dropped);
# the demo library answers the second (the DVT paper), not the first
SECOND = ("How do trace-based JIT compilers specialize types, and what are the complication rates of anticoagulant "
          "prophylaxis after injury?")


def write_inputs(tmp_path, edits: str) -> tuple:
    queries = tmp_path / "queries.txt"
    queries.write_text(f"# lab batch\n{QUERY}\n\n{SECOND}\n", encoding="utf-8")
    edit_file = tmp_path / "edits.yaml"
    edit_file.write_text(edits, encoding="utf-8")
    return queries, edit_file


def test_driver_through_the_gateway(gateway, tmp_path) -> None:
    queries, edits = write_inputs(tmp_path, f'"{QUERY}":\n  requirements:\n    - "{EDITED_R1}"\n  search: []\n')
    out = tmp_path / "reports"
    proc = subprocess.run([sys.executable, str(DRIVER), str(queries), "--gateway", gateway.url, "--edits",
                           str(edits), "--out", str(out), "--preset", "quick", "--max-iterations", "1"],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["query"] for r in rows] == [QUERY, SECOND]
    assert all(r["status"] == "finished" and r["error"] is None for r in rows)
    edited, proposed = rows
    assert edited["requirements"] == [EDITED_R1]
    assert len(proposed["requirements"]) == 2  # the gateway's max_requirements, approved as proposed
    for row in rows:
        report = (out / row["report_file"]).read_text()
        assert "Sources" in report and "[1]" in report
        # the streamed events arrived and were printed, each run's with its id
        assert row["events"] > 5
        assert proc.stdout.count(f"[{row['run_id']}]") >= row["events"]
    assert "edited" in proc.stdout


def test_driver_refuses_a_bad_edits_file(tmp_path) -> None:
    queries, edits = write_inputs(tmp_path, f'"{QUERY}":\n  requirements: "not a list"\n')
    proc = subprocess.run([sys.executable, str(DRIVER), str(queries), "--gateway", "http://127.0.0.1:9",
                           "--edits", str(edits)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    assert "requirements must be a list of strings" in proc.stderr
    assert not (tmp_path / "reports").exists()


def test_driver_straight_into_ray(ray_cluster, ingest_cache, tmp_path, monkeypatch) -> None:
    import importlib.util

    from infra.llm.fakes import FunctionLLM
    from tests.e2e import brain as brain_module
    from tests.loopback_ollama import closed_loopback_url

    ray_cluster.cloudpickle.register_pickle_by_value(brain_module)
    spec = importlib.util.spec_from_file_location("forage_driver", DRIVER)
    driver = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "forage_driver", driver)  # its dataclasses look their module up
    spec.loader.exec_module(driver)
    monkeypatch.setenv("FORAGE_RUN__RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("FORAGE_STORE__PATH", str(tmp_path / "store"))
    monkeypatch.setenv("FORAGE_INGEST__POOL_SIZE", "1")
    monkeypatch.setenv("FORAGE_INGEST__CACHE_DIR", str(ingest_cache))
    # a worker that built a real client by mistake would fail loudly: nothing listens there
    monkeypatch.setenv("FORAGE_LLM__BACKEND", "ollama")
    monkeypatch.setenv("FORAGE_LLM__HOST", closed_loopback_url())
    queries, edits = write_inputs(tmp_path, f'"{QUERY}":\n  requirements:\n    - "{EDITED_R1}"\n')
    queries.write_text(QUERY + "\n", encoding="utf-8")
    out = tmp_path / "reports"
    code = driver.main([str(queries), "--ray-address", "auto", "--edits", str(edits), "--out", str(out),
                        "--library", str(DEMO_LIBRARY), "--preset", "quick", "--max-iterations", "1",
                        "--offline"], llm=FunctionLLM(brain_module.brain))
    assert code == 0
    (row,) = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert row["status"] == "finished" and row["requirements"] == [EDITED_R1] and row["events"] > 5
    assert row["final_coverage"] > 0
    report = (out / row["report_file"]).read_text()
    assert "[1]" in report
    assert (tmp_path / "runs" / row["run_id"] / "report.md").exists()
