"""`forage library add` of a folder killed with SIGKILL halfway (the CLI and its parse workers at once) and run again:
no file it had finished is parsed again, the others are, and the progress lines give files done, pages/s and the time
left (issue 48)."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.store.lancedb import LanceStore
from tests.factories import html_pdf
from tests.processes import LIMIT_S, REPO, child_env, end_group

N_FILES = 24  # three store writes of 8 (BATCH_DOCUMENTS): killed after the first, the rest show the time left
TOPICS = ("zebrafish fin regeneration", "heat stress in wheat", "sourdough fermentation", "coral bleaching",
          "glacier retreat", "bat echolocation")
LINE = re.compile(r"ingesting (\d+)/(\d+) files(?: · ([\d.]+) pages/s)?(?: · about (\d+) s left)? · (\w+) (\S+)$")


def paper_html(n: int) -> str:
    """A few pages on one topic; each file's text its own (its number in every paragraph), so each is new content."""
    topic = TOPICS[n % len(TOPICS)]
    para = f"In study {n}, {topic} was measured over {n + 3} seasons and the effect grew by {n + 1} percent. " * 12
    return f"<h1>Paper {n} on {topic}</h1><p>A. Author, B. Author</p><h2>Abstract</h2><p>{para}</p>" + \
        "".join(f"<h2>{k} Section</h2><p>{para}</p><p>{para}</p>" for k in range(1, 4))


def add_command(folder: Path, store: Path) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "library", "add", str(folder), "--store", str(store)]


def progress_lines(text: str) -> list[re.Match[str]]:
    return [m for line in text.splitlines() if (m := LINE.search(line.strip()))]


def read_until_stored(proc: subprocess.Popen) -> str:
    """The add's output up to its first 'stored' progress line (waited on as output arrives, bounded by LIMIT_S)."""
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    seen = ""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        if not selector.select(timeout=deadline - time.monotonic()):
            break
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if any(m.group(5) == "stored" for m in progress_lines(line)):
            return seen
    raise AssertionError(f"no file was stored before the add ended or {LIMIT_S} s passed:\n{seen}")


@pytest.mark.slow  # the CLI and two spawned parse workers import the PDF stack and the embedder (tens of seconds)
def test_a_killed_library_add_run_again_parses_only_what_it_had_not_stored(tmp_path: Path) -> None:
    folder = tmp_path / "papers"
    folder.mkdir()
    for n in range(N_FILES):
        html_pdf(folder / f"paper{n:02d}.pdf", paper_html(n))
    store = tmp_path / "store"
    env = child_env(FORAGE_INGEST__PARSE_WORKERS="2", FORAGE_INGEST__CACHE_DIR=str(tmp_path / "cache"),
                    HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(add_command(folder, store), cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        first = read_until_stored(proc)
        os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its parse workers, mid-add
        proc.wait(timeout=60)
    finally:
        end_group(proc)
    assert proc.returncode == -signal.SIGKILL, first
    finished = {Path(d.key.removeprefix("file:")).name for d in LanceStore(store, dim=384).list_documents()}
    assert 0 < len(finished) < N_FILES, first  # killed halfway: some files stored, some not

    again = subprocess.run(add_command(folder, store), cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=LIMIT_S)
    assert again.returncode == 0, again.stdout + again.stderr
    lines = progress_lines(again.stderr)
    assert [int(m.group(1)) for m in lines] == list(range(1, N_FILES + 1))  # one line per file, counted
    outcome = {m.group(6): m.group(5) for m in lines}
    assert {name for name, status in outcome.items() if status == "skipped"} == finished  # not parsed again
    assert {name for name, status in outcome.items() if status == "stored"} == \
        {f"paper{n:02d}.pdf" for n in range(N_FILES)} - finished
    # while files were left to parse, the lines said how fast and how long: pages/s and the time left
    assert any(m.group(3) and float(m.group(3)) > 0 and m.group(4) is not None for m in lines), again.stderr
    assert len(LanceStore(store, dim=384).list_documents()) == N_FILES
