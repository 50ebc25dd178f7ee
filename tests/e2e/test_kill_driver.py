"""Kill the driver process mid-run (SIGKILL), `forage resume RUN` finishes it, and the result equals an
uninterrupted run's: the same requirements, documents and coverage.

Everything is the real product in real processes: `python -m gateway.cli research` (its own local Ray, the
actors, PyMuPDF, MiniLM, LanceDB) and `python -m gateway.cli resume`. The model is the end-to-end brain
behind a loopback Ollama server (the real Ollama client path; the process under test is told its URL
through FORAGE_LLM__HOST), so every process gets the same answers. The library holds three real papers
offered one per iteration (dvt, reverb, tracemonkey in name order), so coverage rises each iteration and
the goal is met in the third.

To kill the driver while it is foraging iteration 2, the server holds every judging request that shows a
passage of the ReVerb paper (only ingested in iteration 2) until the driver is dead; the test waits for
such a request and for events.jsonl to show iteration 2's foraging started (a bounded poll of the file),
then sends SIGKILL to the driver alone. Ray's daemons share the fate of the driver that started them, but
its worker processes (the Orchestrator, the Foragers) outlive it for a while: the requests stay held until
every process of the driver's session that runs Forage code is gone (a bounded poll), so the orphaned run
cannot move on. Ray's two agents (DashboardAgent, RuntimeEnvAgent) run none; each spends 60 s trying to
tell the dead GCS that its raylet died (a timeout fixed in Ray) before it exits, so the resume starts beside
them, and a test that runs after every other (marked ``last``) checks that they ended by themselves: nothing of
the killed session is left behind, and the suite does not stand still for their minute. (Were
it to move on while `forage resume` runs, the resumed Orchestrator owns the run and the orphan stops at its
next checkpoint without writing: tests/unit/test_run_owner.py.)

All three runs read the papers through the session's ingest cache (each still stores them in its own store).
The runs go one after another: a reference run beside the killed one left the killed driver's Ray agents
alive (seen once, under pytest-xdist), which the wait for the killed session to end cannot tell apart.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.e2e import brain
from tests.e2e.brain import QUERY
from tests.processes import LIMIT_S, end_group, forage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # three real runs, each with its own Ray

REPO = Path(__file__).resolve().parents[2]
PAPERS = ("dvt_prophylaxis_trauma_bmc2010.pdf", "reverb_openie_emnlp2011.pdf", "tracemonkey_pldi2009.pdf")
HOLD_WORD = "reverb"  # in the ReVerb paper's passages only (dvt and tracemonkey do not name it)


class Gate:
    """Holds judging requests that show a ReVerb passage while ``closed``; ``held`` is set at the first."""

    def __init__(self) -> None:
        self.closed = False
        self.held = threading.Event()
        self.release = threading.Event()

    def responder(self, brain_module):
        def answer(messages, fmt):
            name = (fmt or {}).get("title", "")
            user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
            if self.closed and name in ("BatchVerdict", "DeepDiveBatchVerdict") and HOLD_WORD in user.lower():
                self.held.set()
                self.release.wait(LIMIT_S)
            return asyncio.run(brain_module.brain(messages, type(name, (), {})))

        return answer


def child_env(llm_url: str, ingest_cache: Path) -> dict[str, str]:
    env = dict(os.environ)  # offline (conftest), Hugging Face offline
    env.update({"FORAGE_LLM__HOST": llm_url, "FORAGE_NET__OFFLINE": "true", "FORAGE_SEARCH__BATCH_SIZE": "1",
                "FORAGE_RUN__MAX_ITERATIONS": "3", "FORAGE_RUN__MIN_COVERAGE": "0.85",
                "FORAGE_INGEST__POOL_SIZE": "1", "FORAGE_RAY__NUM_CPUS": "2",
                "FORAGE_WRITE__COMPARISON": "false", "FORAGE_WRITE__CHARTS": "false",
                "FORAGE_INGEST__CACHE_DIR": str(ingest_cache),
                "FORAGE_FORAGE__ANSWER_CONFIRMATION": str(brain.ANSWER_CONFIRMATION),  # the goal is met in iteration 3
                "PYTHONPATH": str(REPO)})
    return env


def wait_for(predicate, what: str, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll ``predicate`` until it is truthy, at most LIMIT_S seconds; fail early if ``proc`` exits."""
    tick = threading.Event()
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) before {what}:\n"
                                 + (log.read_text()[-3000:] if log else ""))
        tick.wait(0.2)
    raise AssertionError(f"timed out after {LIMIT_S} s waiting for {what}")


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


RAY_AGENTS = frozenset({"ray::DashboardAgent", "ray::RuntimeEnvAgent"})  # Ray's own; no Forage code runs there


def session_members(sid: int, ignore: frozenset[str] = frozenset()) -> list[str]:
    """Processes still alive in session ``sid`` (the driver and everything it started), but those named in
    ``ignore``."""
    import psutil

    alive = []
    for p in psutil.process_iter(["pid", "name", "status"]):
        try:
            if (os.getsid(p.pid) == sid and p.info["status"] != psutil.STATUS_ZOMBIE
                    and p.info["name"] not in ignore):
                alive.append(f"{p.pid} {p.info['name']}")
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return alive


def library(tmp: Path, shared_data: Path) -> Path:
    lib = tmp / "library"
    lib.mkdir()
    for name in PAPERS:
        (lib / name).symlink_to(shared_data / "pdfs" / name)
    return lib


def research_args(lib: Path, root: Path) -> list[str]:
    return ["research", QUERY, "--yes", "--offline", "--llm", "ollama", "--library", str(lib),
            "--runs-dir", str(root / "runs"), "--store", str(root / "store")]


def summary(run_dir: Path) -> dict:
    state = json.loads((run_dir / "run.json").read_text())
    return {
        "status": state["status"], "stop_reason": state["stop_reason"],
        "requirements": state["requirements"],
        "documents": sorted((Path(d["path"]).name, d["status"], d["doc_id"]) for d in state["documents"].values()),
        "coverage_by_iteration": [it["coverage"] for it in state["iterations"]],
        "coverage": state["coverage"], "final_coverage": state["final_coverage"],
    }


#: ``config.stash`` key: the session id of the killed driver, once the resumed run has finished
KILLED_SESSION = pytest.StashKey[int]()


@pytest.fixture(scope="module")
def runs(request, shared_data, tmp_path_factory, ingest_cache):
    from tests.e2e import brain as brain_module
    from tests.loopback_ollama import LoopbackOllama

    tmp = tmp_path_factory.mktemp("kill-driver")
    lib = library(tmp, shared_data)
    gate = Gate()
    procs: list[subprocess.Popen] = []
    with LoopbackOllama(responder=gate.responder(brain_module), hang_limit_s=LIMIT_S) as llm:
        env = child_env(llm.url, ingest_cache)
        try:
            # the uninterrupted reference run
            whole = tmp / "whole"
            proc = forage(research_args(lib, whole), env, tmp / "whole.log")
            procs.append(proc)
            assert proc.wait(LIMIT_S) == 0, (tmp / "whole.log").read_text()[-3000:]
            (whole_dir,) = (whole / "runs").iterdir()

            # the same run, killed while it forages iteration 2
            killed = tmp / "killed"
            gate.closed = True
            proc = forage(research_args(lib, killed), env, tmp / "killed.log")
            procs.append(proc)
            wait_for(lambda: gate.held.is_set(), "a judging request of iteration 2", proc, tmp / "killed.log")
            run_dir = wait_for(lambda: next((killed / "runs").glob("*/events.jsonl"), None), "events.jsonl",
                               proc).parent
            wait_for(lambda: any(e["stage"] == "forage" and e["kind"] == "started" and e["iteration"] == 2
                                 for e in events(run_dir)), "iteration 2's foraging in events.jsonl", proc)
            proc.send_signal(signal.SIGKILL)  # the driver alone
            assert proc.wait(60) == -signal.SIGKILL
            killed_sid = proc.pid
            wait_for(lambda: not session_members(killed_sid, ignore=RAY_AGENTS),
                     "the killed driver's Ray processes to end")
            crashed = json.loads((run_dir / "run.json").read_text())
            gate.closed = False
            gate.release.set()  # the held requests answer workers that are gone

            proc = forage(["resume", run_dir.name, "--runs-dir", str(killed / "runs")], env, tmp / "resume.log")
            procs.append(proc)
            code = proc.wait(LIMIT_S)
            resume_log = (tmp / "resume.log").read_text()
            assert code == 0, resume_log[-3000:]
            # what is left of the killed session (Ray's two agents) ends by itself: checked by the last test
            request.config.stash[KILLED_SESSION] = killed_sid
            request.config.add_cleanup(lambda: end_group(killed_sid))  # at the session's end, whatever happened
            yield summary(whole_dir), summary(run_dir), crashed, json.loads((run_dir / "run.json").read_text())
        finally:
            gate.release.set()
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(60)
                if request.config.stash.get(KILLED_SESSION, None) != proc.pid:  # left for the last test
                    end_group(proc)


def test_the_killed_driver_left_a_running_run_with_iteration_1_done(runs) -> None:
    _, _, crashed, _ = runs
    assert crashed["status"] == "running"
    assert [it["iteration"] for it in crashed["iterations"]] == [1]
    assert crashed["ingested"]["iteration"] == 2  # iteration 2 was ingested, its foraging was cut short
    assert len(crashed["documents"]) == 2


def test_resume_finishes_it_like_an_uninterrupted_run(runs) -> None:
    whole, resumed, _, state = runs
    assert whole["status"] == "finished" and "reached the goal" in whole["stop_reason"]
    assert resumed == whole  # same requirements, documents (stored once each), coverage per iteration
    assert len(whole["coverage_by_iteration"]) == 3
    assert [r["after_iteration"] for r in state["resumed"]] == [1]  # iteration 1 was not foraged again
    assert state["resumed"][0]["status_was"] == "running"


@pytest.mark.last
def test_nothing_of_the_killed_session_is_left_behind(request) -> None:
    """Ray's agents of the killed driver's session end by themselves (each after its fixed 60 s): this runs after
    every other test of the session, so it waits for nothing unless they hang."""
    sid = request.config.stash.get(KILLED_SESSION, None)
    if sid is None:
        pytest.skip("the kill test's runs did not get as far as the resumed run (see its other tests)")
    wait_for(lambda: not session_members(sid), "Ray's agents of the killed session to end")
