"""The run folder: ``runs/<run_id>/`` with run.json, report.md, report.json, evidence.jsonl, comparison.json,
figures/, events.jsonl and asks.jsonl (questions asked of the finished run: `forage ask --run`).

Every write is atomic (temp file + rename), so a crash never leaves a half-written run.json.
Run data is the user's alone: folders are created 0700 and files 0600 (whatever the umask).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import socket
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from infra.errors import ConfigError
from infra.private_files import private_append, private_dir
from messages.run_state import RunState
from messages.write import Report

__all__ = ["RUN_ID", "RunDir", "atomic_write", "atomic_write_bytes", "find_run_dir", "new_run_id", "private_append",
           "private_dir"]

#: what a run id may be: a plain folder name (no path, no '..')
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_run_id() -> str:
    """Sortable by time and unguessable (64 random bits)."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(8)}"


def atomic_write(path: Path, text: str) -> None:
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # created 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch); None when it cannot be read."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _process_gone(pid: int, started: float | None) -> bool:
    """True when no live process ``pid`` started at ``started`` (within a second) exists any more: it
    exited (a zombie not yet reaped by its parent counts as exited), or its pid went to a later process."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return True
        return started is not None and abs(proc.create_time() - started) > 1.0
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return True
    except psutil.Error:  # e.g. access denied: it exists
        return False


class RunDir:
    def __init__(self, runs_dir: Path | str, run_id: str) -> None:
        self.run_id = run_id
        self.path = Path(runs_dir).expanduser().resolve() / run_id

    @property
    def run_json(self) -> Path:
        return self.path / "run.json"

    @property
    def report_md(self) -> Path:
        return self.path / "report.md"

    @property
    def evidence_jsonl(self) -> Path:
        return self.path / "evidence.jsonl"

    @property
    def report_json(self) -> Path:
        """The whole Report (sources, cited chunks, what each section may cite, counts) for verify/export."""
        return self.path / "report.json"

    @property
    def comparison_json(self) -> Path:
        return self.path / "comparison.json"

    @property
    def figures_dir(self) -> Path:
        return self.path / "figures"

    @property
    def events_jsonl(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def asks_jsonl(self) -> Path:
        """Questions asked of the run and their answers, one JSON object a line (`forage ask --run`, the
        dashboard's ask box, the MCP ``ask`` tool with a run_id): part of the run's record."""
        return self.path / "asks.jsonl"

    @property
    def cancel_flag(self) -> Path:
        """Written by ``forage cancel``; the Orchestrator stops at its next stage boundary."""
        return self.path / "cancel"

    @property
    def owner_file(self) -> Path:
        """The process that drives the run now (``claim``): its token, pid, host and start time. A resume
        takes the run over, and an Orchestrator of a dead driver that is still running finds it is no longer
        the owner; ``forage runs`` tells a "running" run whose owner process is gone (``owner_alive``)."""
        return self.path / "owner"

    def claim(self) -> str:
        """Make the caller the run's owner; returns its token."""
        token = secrets.token_hex(8)
        pid = os.getpid()
        atomic_write(self.owner_file, json.dumps({"token": token, "pid": pid, "host": socket.gethostname(),
                                                  "started": _process_start(pid)}) + "\n")
        return token

    def _owner_record(self) -> dict[str, Any]:
        try:
            text = self.owner_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return {}
        if not text.startswith("{"):  # written by an older Forage: the token alone
            return {"token": text} if text else {}
        try:
            record = json.loads(text)
        except ValueError:
            return {}
        return record if isinstance(record, dict) else {}

    def owner(self) -> str | None:
        return self._owner_record().get("token") or None

    def owner_alive(self) -> bool | None:
        """Whether the process that claimed the run still runs: False when it is gone (or its pid now
        belongs to a later process), None when this cannot be told here (no owner recorded, an older
        owner file, or an owner on another host)."""
        record = self._owner_record()
        pid, started = record.get("pid"), record.get("started")
        if not isinstance(pid, int) or record.get("host") != socket.gethostname():
            return None
        return not _process_gone(pid, started if isinstance(started, int | float) else None)

    def request_cancel(self) -> None:
        atomic_write(self.cancel_flag, f"{datetime.now(UTC).isoformat()}\n")

    def cancel_requested(self) -> bool:
        return self.cancel_flag.exists()

    def load_state(self) -> RunState | None:
        """The run's state (run.json); None when there is none. ValueError when it is not a run's state."""
        return RunState.load(self.run_json)

    def require_state(self) -> RunState:
        """The run's state; FileNotFoundError when the run has none (ValueError when it is not a run's state)."""
        state = self.load_state()
        if state is None:
            raise FileNotFoundError(f"no run {self.run_id!r}: {self.run_json} does not exist")
        return state

    def save_state(self, state: RunState | dict[str, Any]) -> None:
        """Write run.json atomically. A dict (an older caller, a test) is validated as a RunState first."""
        if not isinstance(state, RunState):
            state = RunState.model_validate(state)
        atomic_write(self.run_json, state.to_json())

    def save_report(self, report: Report) -> None:
        atomic_write(self.report_md, report.markdown)
        lines = [c.model_dump_json() for c in report.cited_chunks]
        atomic_write(self.evidence_jsonl, "\n".join(lines) + ("\n" if lines else ""))
        atomic_write(self.report_json, report.model_dump_json(indent=2, exclude={"figures"}) + "\n")
        if report.comparison is not None:
            atomic_write(self.comparison_json, report.comparison.model_dump_json(indent=2) + "\n")
        for fig in report.figures:
            atomic_write(self.figures_dir / f"{fig.name}.svg", fig.svg)  # creates the folder like every other
            atomic_write_bytes(self.figures_dir / f"{fig.name}.png", base64.b64decode(fig.png_base64))

    def load_report(self) -> Report:
        """The saved Report (report.json), with report.md as the text actually on disk."""
        if not self.report_json.exists():
            raise FileNotFoundError(f"no report.json in {self.path}: the run has no saved report")
        report = Report.model_validate_json(self.report_json.read_text(encoding="utf-8"))
        if self.report_md.exists():
            report = report.model_copy(update={"markdown": self.report_md.read_text(encoding="utf-8")})
        return report


def find_run_dir(runs_dir: Path | str, run_id: str) -> RunDir:
    """The run's folder under ``runs_dir``, by its id or a unique prefix of it (as `forage runs` lists them): every
    command that takes a run id resolves it here. ConfigError for an id that is not a plain run id (no paths, no
    '..') or a prefix several runs share; the folder need not exist (callers say what is missing)."""
    if not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        raise ConfigError(f"{run_id!r} is not a run id (letters, digits, '.', '_', '-')")
    runs_dir = Path(runs_dir).expanduser()
    if not (runs_dir / run_id).exists():
        try:
            matches = sorted(p.name for p in runs_dir.iterdir() if p.name.startswith(run_id) and p.is_dir())
        except OSError:
            matches = []
        if len(matches) == 1:
            return RunDir(runs_dir, matches[0])
        if len(matches) > 1:
            raise ConfigError(f"{run_id!r} starts {len(matches)} run ids ({', '.join(matches[:4])}"
                              f"{', …' if len(matches) > 4 else ''}): give more of it")
    return RunDir(runs_dir, run_id)
