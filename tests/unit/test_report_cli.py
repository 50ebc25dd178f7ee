"""`forage verify` and `forage export` on a run produced in-process (see finished_run.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from finished_run import RUN, make_run
from typer.testing import CliRunner

from actors.steps.rundir import RunDir
from actors.steps.verify import verify_run
from gateway.cli import app
from infra.store.lancedb import LanceStore

runner = CliRunner()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(settings, run folder) of one finished run; tests copy it before changing anything."""
    return make_run(tmp_path_factory.mktemp("finished"))


def copy_run(finished, tmp_path):
    _, folder = finished
    target = tmp_path / "runs" / RUN
    shutil.copytree(folder, target)
    return target


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_verify_passes_on_a_finished_run(finished):
    settings, folder = finished
    result = invoke("verify", RUN, "--runs-dir", str(folder.parent))
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output and "checks passed" in result.output
    checks = verify_run(RunDir(folder.parent, RUN), LanceStore(settings.store.path, dim=384))
    state = json.loads((folder / "run.json").read_text())
    assert len(checks) == 1 + len((folder / "evidence.jsonl").read_text().splitlines())
    assert all(c.ok for c in checks) and len(state["sources"]) == 3


def test_verify_fails_on_a_tampered_quote_a_dangling_citation_and_a_missing_chunk(finished, tmp_path):
    target = copy_run(finished, tmp_path)
    lines = (target / "evidence.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["quote"] = "A sentence the paper never wrote."
    second = json.loads(lines[1])
    second["chunk_id"] = second["chunk_id"].split(":")[0] + ":999"
    (target / "evidence.jsonl").write_text("\n".join([json.dumps(first), json.dumps(second), *lines[2:]]) + "\n")
    md = (target / "report.md").read_text()
    (target / "report.md").write_text(md.replace("[1].", "[9].", 1))
    result = invoke("verify", str(target))
    assert result.exit_code == 1
    assert "quote not found in the chunk" in result.output
    assert "not in the store" in result.output
    assert "dangling citation [9]" in result.output


def test_verify_fails_when_a_chunk_text_changed(finished, tmp_path):
    target = copy_run(finished, tmp_path)
    lines = (target / "evidence.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["sha256"] = "0" * 64
    (target / "evidence.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    result = invoke("verify", RUN, "--runs-dir", str(target.parent))
    assert result.exit_code == 1 and "sha256 differs" in result.output


def test_verify_an_unknown_run_is_one_clear_error(tmp_path):
    result = invoke("verify", "no-such-run", "--runs-dir", str(tmp_path))
    assert result.exit_code == 2 and "no run 'no-such-run'" in result.output
