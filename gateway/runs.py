"""The gateway's runs, without HTTP: a :class:`RunManager` holds each run's
:class:`~gateway.session.ResearchSession`, plans in the background, runs after approval, and pumps the run's events
from its StatusHub (gateway/events.py) into an in-memory log that every WebSocket client reads from (one long poll
per run, however many clients). A run it does not hold (finished before a restart) is read from its folder:
run.json and events.jsonl.

What a request cannot have raises one of gateway/errors.py's errors (NotFound, Conflict, Invalid, NotAllowed,
Unavailable): the REST app (gateway/server.py) and the MCP server (gateway/mcp_server.py) each say it their way.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from actors.steps.run.record import resumable, shown_status
from actors.steps.run.rundir import RunDir
from gateway.api import Approval, Documents, Proposal, RunCreate, RunListItem, RunView
from gateway.errors import Conflict, Invalid, NotAllowed, NotFound, Unavailable
from gateway.events import follow_hub
from infra.errors import ForageError, describe, validation_text
from infra.settings import Settings, settings_for_run
from messages.plan import Requirement, RequirementsPlan, ResearchQuery, SearchQuery
from messages.run_state import RunState
from messages.status import Stage, StatusEvent

QUERY_NAMES = {"query": "the research query", "text": "the research query"}  # plain names in error messages
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ARTIFACTS = {"run.json": "application/json", "evidence.jsonl": "application/x-ndjson",
             "events.jsonl": "application/x-ndjson", "egress.jsonl": "application/x-ndjson",
             "report.md": "text/markdown; charset=utf-8", "report.json": "application/json",
             "comparison.json": "application/json", "asks.jsonl": "application/x-ndjson"}


# -- runs ----------------------------------------------------------------------------------------------
@dataclass
class ManagedRun:
    run_id: str
    query: str
    settings: Settings
    session: Any = None
    status: str = "planning"
    plan: RequirementsPlan | None = None
    error: str | None = None
    events: list[StatusEvent] = field(default_factory=list)
    ended: bool = False  # no more events will come
    stop: threading.Event = field(default_factory=threading.Event)
    cond: asyncio.Condition | None = None
    planned: asyncio.Event = field(default_factory=asyncio.Event)  # planning is over (proposal or failure)

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    async def follow(self, after: int) -> AsyncIterator[StatusEvent]:
        """The run's events with seq > ``after``, in order, as the pump logs them, until the run has ended."""
        assert self.cond is not None
        while True:
            async with self.cond:
                await self.cond.wait_for(lambda: self.last_seq > after or self.ended)
                batch = [e for e in self.events if e.seq > after]
                ended = self.ended
            for ev in batch:
                yield ev
                after = ev.seq
            if ended and self.last_seq <= after:
                return


class RunManager:
    """Holds the gateway's runs: plans them, runs them after approval, pumps their events."""

    def __init__(self, settings: Settings, llm: Any | None = None,
                 allowed_libraries: Sequence[Path] | None = None) -> None:
        self.settings = settings
        self.llm = llm
        self._allowed = None if allowed_libraries is None else [Path(p).resolve() for p in allowed_libraries]
        self.runs: dict[str, ManagedRun] = {}
        self.pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="forage-run")
        self.loop: asyncio.AbstractEventLoop | None = None
        self._resuming: set[str] = set()

    @property
    def runs_dir(self) -> Path:
        return Path(self.settings.run.runs_dir).expanduser().resolve()

    def rundir(self, run_id: str) -> RunDir:
        if not _RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
            raise NotFound(f"no run {run_id!r}")
        return RunDir(self.runs_dir, run_id)

    def held(self, run_id: str) -> ManagedRun:
        """The run this process holds (it can be approved, waited on); NotFound for any other."""
        run = self.runs.get(run_id)
        if run is None:
            self.rundir(run_id)
            raise NotFound(f"run {run_id!r} is not held by this gateway")
        return run

    def allowed_libraries(self) -> list[Path]:
        """The owner's allow-list, read at each request (``forage library allow`` needs no restart)."""
        from gateway.allowed import allowed_libraries

        return self._allowed if self._allowed is not None else allowed_libraries()

    def settings_for(self, req: RunCreate) -> Settings:
        from gateway.allowed import allowed_root

        lib = None
        if req.library:
            try:
                lib = Path(req.library).expanduser().resolve()
                is_dir = lib.is_dir()
            except (OSError, ValueError, RuntimeError):  # a NUL byte, an unknown ~user, a symlink loop
                raise Invalid(f"library {req.library!r} is not a folder on the gateway's machine") from None
            # the allow-list first: a caller learns nothing about folders outside it, not even whether they exist
            if allowed_root(lib, self.allowed_libraries()) is None:
                raise NotAllowed(f"library {req.library!r} is not in a folder the gateway's owner allowed "
                                 "for runs started through the API (the owner runs `forage library allow "
                                 "DIR`; `forage library allowed` lists them)")
            if not is_dir:
                raise Invalid(f"library {req.library!r} is not a folder on the gateway's machine")
        settings = settings_for_run(self.settings, preset=req.preset, library=lib, offline=req.offline,
                                    max_iterations=req.max_iterations, min_coverage=req.min_coverage,
                                    max_requirements=req.max_requirements, llm_backend=req.llm_backend,
                                    model=req.model)
        if lib is not None:  # a folder a caller named: read no file whose real path lies outside it
            settings = settings.updated(search={"library_confined": True})

        if settings.search.library is None and not settings.online():
            raise Invalid("nothing to search: give a library folder, or allow online search")
        return settings

    async def create(self, req: RunCreate) -> ManagedRun:
        try:
            ResearchQuery(run_id="check", text=req.query)
        except ValidationError as exc:
            raise Invalid(validation_text(exc, field_names=QUERY_NAMES)) from None
        settings = self.settings_for(req)
        loop = asyncio.get_running_loop()
        if self.llm is None:  # the model server and model answer before any work, as `forage research` checks
            from gateway.session import check_model_servers

            try:
                await loop.run_in_executor(self.pool, check_model_servers, settings)
            except ForageError as exc:
                raise Unavailable(describe(exc)) from None
        session = await loop.run_in_executor(self.pool, self._session, settings)
        run = ManagedRun(run_id=session.run_id, query=req.query.strip(), settings=settings, session=session,
                         cond=asyncio.Condition())
        self.runs[run.run_id] = run
        self.pool.submit(self._pump, run)
        self.pool.submit(self._plan, run)
        return run

    def _session(self, settings: Settings, run_id: str | None = None) -> Any:
        from gateway.session import ResearchSession

        return ResearchSession(settings, llm=self.llm, run_id=run_id, quiet=True)

    async def resume(self, run_id: str) -> ManagedRun:
        """Continue an interrupted, cancelled or failed run as `forage resume` does (same settings and plan
        from run.json, same Orchestrator resume); its earlier events stay, the new ones follow them."""
        from gateway.session import resume_plan

        rundir = self.rundir(run_id)
        held = self.runs.get(run_id)
        if run_id in self._resuming or (held is not None and not held.ended):
            raise Conflict(f"run {run_id} is {held.status if held else 'resuming'} in this gateway")
        try:
            state = rundir.load_state()
        except (OSError, ValueError) as exc:
            raise Conflict(f"run {run_id}: run.json cannot be read ({type(exc).__name__})") from None
        if state is None:
            raise NotFound(f"no run {run_id!r}")
        if not resumable(state, rundir):
            raise Conflict(f"run {run_id} is {shown_status(state, rundir)}: only an interrupted, "
                           "cancelled or failed run with approved requirements can be resumed")
        try:
            settings, plan = resume_plan(self.settings, run_id, state)
        except (ForageError, ValidationError, ValueError, KeyError, TypeError) as exc:
            raise Conflict(f"run {run_id} cannot be resumed: {exc}") from None
        self._resuming.add(run_id)
        try:
            session = await asyncio.get_running_loop().run_in_executor(self.pool, self._session, settings, run_id)
        finally:
            self._resuming.discard(run_id)
        # the new StatusHub goes on from events.jsonl: the run keeps its earlier events, the pump waits for more
        run = ManagedRun(run_id=run_id, query=plan.query.text, settings=settings, session=session,
                         status="running", plan=plan, events=self.disk_events(run_id, 0), cond=asyncio.Condition())
        run.planned.set()
        self.runs[run_id] = run
        self.pool.submit(self._pump, run)
        self.pool.submit(self._run, run, plan)
        return run

    def _plan(self, run: ManagedRun) -> None:
        try:
            plan = run.session.plan(run.query)
        except Exception as exc:  # noqa: BLE001 — the run fails, the gateway stays up
            self._finish(run, "failed", f"planning failed: {describe(exc)}")  # one sentence, no traceback
            self._call_in_loop(run.planned.set)
            return
        if run.status == "planning":
            run.plan = plan
            run.status = "awaiting_approval"
        self._call_in_loop(run.planned.set)

    def _call_in_loop(self, fn: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn)

    def approve(self, run: ManagedRun, approval: Approval) -> RequirementsPlan:
        if run.status != "awaiting_approval" or run.plan is None:
            raise Conflict(f"run {run.run_id} is {run.status}, not awaiting approval")
        plan = run.plan
        try:
            plan = plan.approve(
                requirements=None if approval.requirements is None else tuple(
                    Requirement(id=r.id, text=r.text) for r in approval.requirements),
                search_queries=None if approval.search_queries is None else tuple(
                    SearchQuery.model_validate(q) for q in approval.search_queries))
        except ValidationError as exc:
            raise Invalid(validation_text(exc)) from None
        run.plan = plan
        run.status = "running"
        self.pool.submit(self._run, run, plan)
        return plan

    def _run(self, run: ManagedRun, plan: RequirementsPlan) -> None:
        try:
            summary = run.session.run(plan)
            self._finish(run, summary.status, None if summary.status == "finished" else summary.stop_reason)
        except Exception as exc:  # noqa: BLE001
            self._finish(run, "failed", describe(exc))

    def _finish(self, run: ManagedRun, status: str, error: str | None) -> None:
        run.status, run.error = status, error
        run.stop.set()  # the pump drains what is left, then ends the stream
        session, run.session = run.session, None
        if session is not None:
            try:
                self.pool.submit(session.close)
            except RuntimeError:  # the gateway is shutting down: shutdown() closes the sessions
                pass

    def cancel_id(self, run_id: str) -> None:
        """Cancel run ``run_id``: one this process holds as :meth:`cancel` does; a running one another process
        drives (as `forage cancel`) by its cancel flag, read at its next stage boundary; Conflict for any other."""
        run = self.runs.get(run_id)
        if run is not None:
            self.cancel(run)
            return
        state = self.state(run_id)
        if state.status != "running":  # running: another process drives it; it reads the flag as well
            hint = f": POST /api/runs/{run_id}/resume continues it" if state.resumable else ""
            raise Conflict(f"run {run_id} is {state.status} and not held by this gateway{hint}")
        self.rundir(run_id).request_cancel()

    def cancel(self, run: ManagedRun) -> None:
        if run.status in ("planning", "awaiting_approval"):
            RunDir(self.runs_dir, run.run_id).request_cancel()
            self._finish(run, "cancelled", "cancelled before approval")
        elif run.status == "running":
            RunDir(self.runs_dir, run.run_id).request_cancel()

    def _pump(self, run: ManagedRun) -> None:
        """Copy the run's events from its StatusHub into ``run.events`` until the run has ended."""
        # a resumed run already holds its earlier events; once the hub is gone, events.jsonl has what it logged
        for fresh in follow_hub(run.session.hub, run.last_seq, ended=run.stop.is_set, wait_s=2.0, settle_s=0.5,
                                when_gone=lambda seen: self.disk_events(run.run_id, seen)):
            self._publish(run, fresh, ended=False)
        self._publish(run, [], ended=True)

    def _publish(self, run: ManagedRun, events: list[StatusEvent], ended: bool) -> None:
        async def add() -> None:
            assert run.cond is not None
            async with run.cond:
                run.events.extend(e for e in events if e.seq > run.last_seq)
                run.ended = run.ended or ended
                run.cond.notify_all()

        if self.loop is not None and not self.loop.is_closed():
            try:
                asyncio.run_coroutine_threadsafe(add(), self.loop).result(timeout=60)
            except Exception:  # noqa: BLE001 — the gateway is shutting down
                pass

    def disk_events(self, run_id: str, after: int) -> list[StatusEvent]:
        path = RunDir(self.runs_dir, run_id).events_jsonl
        if not path.exists():
            return []
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                ev = StatusEvent.model_validate_json(line)
                if ev.seq > after:
                    out.append(ev)
        return out

    def shutdown(self) -> None:
        for run in self.runs.values():
            run.stop.set()
            if run.session is not None:
                try:
                    run.session.close()
                except Exception:  # noqa: BLE001
                    pass
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- state -----------------------------------------------------------------------------------------
    def state(self, run_id: str) -> RunView:
        rundir = self.rundir(run_id)
        disk = read_state(rundir)
        run = self.runs.get(run_id)
        if run is None and disk is None and not rundir.events_jsonl.exists():
            raise NotFound(f"no run {run_id!r}")
        live = run is not None and not run.ended
        status = shown_status(disk, rundir, live=live)
        proposal = None
        if run is not None:
            if run.status in ("planning", "awaiting_approval") or status in ("awaiting_approval", "unknown"):
                status = run.status
            elif run.status == "running" and live:  # run.json may still hold the status before a resume
                status = "running"
            if run.plan is not None and run.status == "awaiting_approval":
                proposal = Proposal(requirements=[r.model_dump() for r in run.plan.requirements],
                                    search_queries=[q.model_dump(mode="json") for q in run.plan.search_queries],
                                    search_filters=[list(q.filters()) for q in run.plan.search_queries],
                                    degraded=list(run.plan.degraded))
        docs = disk.documents if disk else {}
        failures = {k: d.reason or "" for k, d in docs.items() if d.status == "failed"}
        downloaded = sum(1 for a in (disk.acquisition if disk else {}).values() if a.get("path"))
        events = run.events if run is not None else self.disk_events(run_id, 0)
        found = sum(int(e.payload.get("found", 0)) for e in events if e.stage == Stage.SEARCH and e.kind == "results")
        iterations = disk.iterations if disk else []
        coverage = (disk.coverage if disk else {}) or (iterations[-1].coverage if iterations else {})
        requirements = [r.model_dump() for r in disk.requirements] if disk else []
        egress = rundir.path / "egress.jsonl"
        return RunView(
            run_id=run_id, status=status, query=(disk.query if disk else None) or (run.query if run else None),
            live=live, resumable=resumable(disk, rundir, live=live), proposal=proposal,
            requirements=requirements or (
                [r.model_dump() for r in run.plan.requirements] if run and run.plan else []),
            search_queries=[q.model_dump(mode="json") for q in disk.search_queries] if disk else [],
            iterations=len(iterations), coverage=coverage,
            final_coverage=disk.final_coverage if disk else None, stop_reason=disk.stop_reason if disk else None,
            error=(run.error if run else None) or (disk.error if disk else None),
            documents=Documents(found=max(found, len(docs)), downloaded=downloaded,
                                ingested=sum(1 for d in docs.values() if d.status in ("stored", "skipped")),
                                failed=len(failures), failures=failures),
            egress_requests=_count_lines(egress), last_seq=run.last_seq if run else len(events),
            report_ready=rundir.report_md.exists(),
            artifacts=[name for name in ARTIFACTS if (rundir.path / name).exists()])

    def list(self) -> list[RunListItem]:
        items: dict[str, RunListItem] = {}
        if self.runs_dir.exists():
            for path in self.runs_dir.glob("*/run.json"):
                rundir = RunDir(self.runs_dir, path.parent.name)
                disk = read_state(rundir)
                items[path.parent.name] = RunListItem(run_id=path.parent.name, status=shown_status(disk, rundir),
                                                      query=disk.query if disk else None, live=False,
                                                      final_coverage=disk.final_coverage if disk else None,
                                                      resumable=resumable(disk, rundir))
        for run_id, run in self.runs.items():
            old = items.get(run_id)
            live = not run.ended
            status = run.status if old is None or run.status in ("planning", "awaiting_approval") or (
                run.status == "running" and live) else old.status
            items[run_id] = RunListItem(run_id=run_id, status=status, query=run.query, live=live,
                                        final_coverage=old.final_coverage if old else None,
                                        resumable=bool(old and old.resumable and not live))
        return sorted(items.values(), key=lambda i: i.run_id, reverse=True)


def read_state(rundir: RunDir) -> RunState | None:
    """The run's state; None when it has none or it cannot be read (shown as "unknown")."""
    try:
        return rundir.load_state()
    except (OSError, ValueError):
        return None


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


def status_of(run: ManagedRun) -> str:
    """The run's status; once its events have ended, run.json (checkpointed before the last event) decides."""
    if run.ended and run.status not in ("planning", "awaiting_approval", "cancelled"):
        rundir = RunDir(run.settings.run.runs_dir, run.run_id)
        disk = read_state(rundir)
        shown = shown_status(disk, rundir)  # "interrupted" when it ended while run.json says running
        if (disk is not None and disk.status not in ("running", "awaiting_approval")) or shown == "interrupted":
            return shown
    return run.status

