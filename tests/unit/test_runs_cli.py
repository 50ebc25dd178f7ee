"""`forage runs`: the runs folder from Settings (or --runs-dir), a run whose owner process is gone shown as
interrupted with the command that continues it, an unreadable run.json listed as such (never a crash).
CliRunner, no Ray; the dead owner is a real process that claimed the run and exited."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from actors.steps.run.rundir import RunDir
from gateway.cli_runs import run_state

REPO = Path(__file__).resolve().parents[2]


def _run(runs: Path, run_id: str, **state) -> RunDir:
    rundir = RunDir(runs, run_id)
    rundir.save_state({"run_id": run_id, "query": f"question of {run_id}", **state})
    return rundir


def _claimed_by_a_process_that_exited(rundir: RunDir) -> None:
    code = "import sys; from actors.steps.run.rundir import RunDir; RunDir(sys.argv[1], sys.argv[2]).claim()"
    subprocess.run([sys.executable, "-c", code, str(rundir.path.parent), rundir.run_id], cwd=REPO, check=True)


def _owner(rundir: RunDir, **record) -> None:
    rundir.owner_file.write_text(json.dumps({"token": "t0", **record}) + "\n")


def world(runs: Path) -> None:
    _run(runs, "run-done", status="finished", final_coverage=0.9)
    _run(runs, "run-live", status="running").claim()  # this process drives it
    _claimed_by_a_process_that_exited(_run(runs, "run-dead", status="running"))
    _run(runs, "run-cancelled", status="cancelled")
    broken = RunDir(runs, "run-broken")
    broken.path.mkdir(parents=True)
    broken.run_json.write_text('{"run_id": "run-broken", "status": "runn')  # torn by hand or a full disk
    listed = RunDir(runs, "run-list")
    listed.path.mkdir()
    listed.run_json.write_text("[1, 2]\n")


def test_run_state_tells_live_dead_and_unreadable_runs(tmp_path) -> None:
    runs = tmp_path / "runs"
    world(runs)
    shown = {name: run_state(RunDir(runs, name))[0] for name in
             ("run-done", "run-live", "run-dead", "run-cancelled", "run-broken", "run-list")}
    assert shown == {"run-done": "finished", "run-live": "running",
                     "run-dead": "interrupted (forage resume run-dead)", "run-cancelled": "cancelled",
                     "run-broken": "unreadable: JSONDecodeError", "run-list": "unreadable: not a JSON object"}
    assert RunDir(runs, "run-dead").owner_alive() is False and RunDir(runs, "run-live").owner_alive() is True


def test_owner_liveness_edge_cases(tmp_path) -> None:
    rundir = _run(tmp_path, "run-x", status="running")
    assert rundir.owner_alive() is None and run_state(rundir)[0] == "running"  # never claimed: cannot tell
    rundir.owner_file.write_text("a1b2c3\n")  # an owner file of an older Forage: the token alone
    assert rundir.owner() == "a1b2c3" and rundir.owner_alive() is None
    me = psutil.Process(os.getpid()).create_time()
    _owner(rundir, pid=os.getpid(), host="another-machine", started=me)
    assert rundir.owner_alive() is None and run_state(rundir)[0] == "running"  # on another host: cannot tell
    _owner(rundir, pid=os.getpid(), host=socket.gethostname(), started=me - 3600)  # the pid went to a later process
    assert rundir.owner_alive() is False and run_state(rundir)[0] == "interrupted (forage resume run-x)"
    _owner(rundir, pid=os.getpid(), host=socket.gethostname(), started=me)
    assert rundir.owner_alive() is True and rundir.owner() == "t0"


def test_runs_cli_uses_the_settings_runs_folder_and_lists_every_state(tmp_path, monkeypatch) -> None:
    from gateway import cli

    runs = tmp_path / "configured"
    world(runs)
    monkeypatch.setenv("FORAGE_RUN__RUNS_DIR", str(runs))
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    monkeypatch.chdir(tmp_path)  # no ./runs here: the old default would list nothing
    out = CliRunner().invoke(cli.app, ["runs"])
    assert out.exit_code == 0, out.output
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:-1]]
            for line in out.output.splitlines() if line.startswith("│")}
    assert rows["run-done"] == ["finished", "0.90", "question of run-done"]
    assert rows["run-live"][0] == "running"
    assert rows["run-dead"][0] == "interrupted (forage resume run-dead)"
    assert rows["run-broken"] == ["unreadable: JSONDecodeError", "", ""]
    assert rows["run-list"][0] == "unreadable: not a JSON object"
    assert rows["run-cancelled"][0] == "cancelled"

    other = tmp_path / "other"
    _run(other, "run-elsewhere", status="failed")
    out = CliRunner().invoke(cli.app, ["runs", "--runs-dir", str(other)])
    assert out.exit_code == 0 and "run-elsewhere" in out.output and "run-done" not in out.output


def test_run_ids_are_shown_whole_at_80_columns_and_a_unique_prefix_finds_a_run(tmp_path, monkeypatch) -> None:
    from gateway import cli
    from actors.steps.run.rundir import find_run_dir as run_dir
    from infra.errors import ConfigError

    runs = tmp_path / "runs"
    ids = ("20261125-073000-0123456789abcdef", "20261125-073000-0123456789abffff", "20261124-090000-aaaaaaaaaaaaaaaa")
    for run_id in ids:
        _run(runs, run_id, status="finished")
    monkeypatch.setenv("COLUMNS", "80")
    out = CliRunner().invoke(cli.app, ["runs", "--runs-dir", str(runs)])
    assert out.exit_code == 0 and all(run_id in out.output for run_id in ids), out.output
    assert run_dir(runs, "20261124").run_id == ids[2]
    assert run_dir(runs, ids[0]).run_id == ids[0]
    with pytest.raises(ConfigError, match="starts 2 run ids"):
        run_dir(runs, "20261125-073000")
    with pytest.raises(ConfigError, match="not a run id"):
        run_dir(runs, ids[0] + "\n")
