"""The gateway: a FastAPI app that starts, approves, watches and reads research runs (`forage serve`).

REST under ``/api`` (OpenAPI at ``/openapi.json``, rendered at ``/docs`` by Swagger UI from assets the
gateway serves itself: no CDN), the run's status events on the WebSocket
``/ws/runs/{run_id}?after=SEQ``, and the dashboard (``gateway/static``) at ``/``.

Runs outlive connections: a :class:`RunManager` owned by the app holds each run's
:class:`~gateway.session.ResearchSession`, plans in the background, runs after approval, and pumps the
run's events from its StatusHub into an in-memory log that every WebSocket client reads from (one
long poll per run, however many clients). Events are persisted by the StatusHub in ``events.jsonl``,
so a run this gateway does not hold (finished before a restart) is replayed from that file. A run
that was still running when its gateway (or driver) stopped is "interrupted": ``POST
/api/runs/{run_id}/resume`` continues it as `forage resume` does, its events going on on the same WebSocket.

Security: every bind needs the per-install token (``Authorization: Bearer …``, or ``?token=`` on a WebSocket,
on the /docs page and on a download link, which a browser opens without headers), kept 0600 in the user's config
dir: other users of a shared machine cannot read it, so they cannot use the gateway. ``forage serve`` prints the
dashboard's address with the token once (``#token=…``: the page keeps it for its tab); the typed client reads the
token file. A wrong or missing token gets 401 / close code 1008. ``--no-token`` (loopback only) drops it: then
requests must still name a loopback Host (no DNS rebinding) and WebSockets come from the dashboard's own origin.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import threading
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import Depends, FastAPI, HTTPException, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import (FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse,
                               Response)
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from actors.steps.run.record import resumable, shown_status
from actors.steps.run.rundir import RunDir
from gateway.api import (Approval, AskIn, AskOut, Chunk, Documents, Message, ModelChoices, Proposal, RunCreate, RunCreated,
                         RunListItem, RunView, gateway_token, is_loopback, token_path)
from infra.errors import ForageError, describe, validation_text
from infra.settings import Settings, settings_for_run
from messages.plan import Requirement, RequirementsPlan, ResearchQuery, SearchQuery
from messages.run_state import RunState
from messages.status import Stage, StatusEvent

STATIC = Path(__file__).resolve().parent / "static"
DOCS_ASSETS = "/docs-assets"  # Swagger UI, from the fastapi-offline package (no CDN)
QUERY_NAMES = {"query": "the research query", "text": "the research query"}  # plain names in error messages
MAX_BODY_BYTES = 1_000_000  # the largest request body read: a query, an approval with edits
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ARTIFACTS = {"run.json": "application/json", "evidence.jsonl": "application/x-ndjson",
             "events.jsonl": "application/x-ndjson", "egress.jsonl": "application/x-ndjson",
             "report.md": "text/markdown; charset=utf-8", "report.json": "application/json",
             "comparison.json": "application/json", "asks.jsonl": "application/x-ndjson"}
FINAL_KINDS = ("finished", "failed")
_FIGURE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.(svg|png)$")
FIGURE_TYPES = {"svg": "image/svg+xml", "png": "image/png"}


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
            raise HTTPException(404, f"no run {run_id!r}")
        return RunDir(self.runs_dir, run_id)

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
                raise HTTPException(422, f"library {req.library!r} is not a folder on the gateway's machine") from None
            # the allow-list first: a caller learns nothing about folders outside it, not even whether they exist
            if allowed_root(lib, self.allowed_libraries()) is None:
                raise HTTPException(403, f"library {req.library!r} is not in a folder the gateway's owner allowed "
                                         "for runs started through the API (the owner runs `forage library allow "
                                         "DIR`; `forage library allowed` lists them)")
            if not is_dir:
                raise HTTPException(422, f"library {req.library!r} is not a folder on the gateway's machine")
        settings = settings_for_run(self.settings, preset=req.preset, library=lib, offline=req.offline,
                                    max_iterations=req.max_iterations, min_coverage=req.min_coverage,
                                    max_requirements=req.max_requirements, llm_backend=req.llm_backend,
                                    model=req.model)
        if lib is not None:  # a folder a caller named: read no file whose real path lies outside it
            settings = settings.updated(search={"library_confined": True})
        from actors.searcher import online

        if settings.search.library is None and not online(settings):
            raise HTTPException(422, "nothing to search: give a library folder, or allow online search")
        return settings

    async def create(self, req: RunCreate) -> ManagedRun:
        try:
            ResearchQuery(run_id="check", text=req.query)
        except ValidationError as exc:
            raise HTTPException(422, validation_text(exc, field_names=QUERY_NAMES)) from None
        settings = self.settings_for(req)
        loop = asyncio.get_running_loop()
        if self.llm is None:  # the model server and model answer before any work, as `forage research` checks
            from gateway.session import check_model_servers

            try:
                await loop.run_in_executor(self.pool, check_model_servers, settings)
            except ForageError as exc:
                raise HTTPException(503, describe(exc)) from None
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
            raise HTTPException(409, f"run {run_id} is {held.status if held else 'resuming'} in this gateway")
        try:
            state = rundir.load_state()
        except (OSError, ValueError) as exc:
            raise HTTPException(409, f"run {run_id}: run.json cannot be read ({type(exc).__name__})") from None
        if state is None:
            raise HTTPException(404, f"no run {run_id!r}")
        if not resumable(state, rundir):
            raise HTTPException(409, f"run {run_id} is {shown_status(state, rundir)}: only an interrupted, "
                                     "cancelled or failed run with approved requirements can be resumed")
        try:
            settings, plan = resume_plan(self.settings, run_id, state)
        except (ForageError, ValidationError, ValueError, KeyError, TypeError) as exc:
            raise HTTPException(409, f"run {run_id} cannot be resumed: {exc}") from None
        self._resuming.add(run_id)
        try:
            session = await asyncio.get_running_loop().run_in_executor(self.pool, self._session, settings, run_id)
        finally:
            self._resuming.discard(run_id)
        # the new StatusHub goes on from events.jsonl: the run keeps its earlier events, the pump waits for more
        run = ManagedRun(run_id=run_id, query=plan.query.text, settings=settings, session=session,
                         status="running", plan=plan, events=self._disk_events(run_id, 0), cond=asyncio.Condition())
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
            raise HTTPException(409, f"run {run.run_id} is {run.status}, not awaiting approval")
        plan = run.plan
        try:
            update: dict[str, Any] = {"approved": True}
            if approval.requirements is not None:
                update["requirements"] = tuple(Requirement(id=r.id, text=r.text) for r in approval.requirements)
            if approval.search_queries is not None:
                update["search_queries"] = tuple(SearchQuery.model_validate(q) for q in approval.search_queries)
            plan = RequirementsPlan.model_validate({**plan.model_dump(), **update})
        except ValidationError as exc:
            raise HTTPException(422, validation_text(exc)) from None
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

    def cancel(self, run: ManagedRun) -> None:
        if run.status in ("planning", "awaiting_approval"):
            RunDir(self.runs_dir, run.run_id).request_cancel()
            self._finish(run, "cancelled", "cancelled before approval")
        elif run.status == "running":
            RunDir(self.runs_dir, run.run_id).request_cancel()

    def _pump(self, run: ManagedRun) -> None:
        """Copy the run's events from its StatusHub into ``run.events`` until the run has ended."""
        import ray

        hub = run.session.hub
        seen, final = run.last_seq, False  # a resumed run already holds its earlier events
        while True:
            stopping = run.stop.is_set()
            try:
                events = ray.get(hub.wait.remote(seen, 0.5 if stopping else 2.0))
            except Exception:  # noqa: BLE001 — the hub is gone: what it logged is in events.jsonl
                events = self._disk_events(run.run_id, seen)
                stopping = final = True
            fresh = [e for e in events if e.seq > seen]
            if fresh:
                seen = fresh[-1].seq
                final = final or any(e.stage == Stage.RUN and e.kind in FINAL_KINDS for e in fresh)
                self._publish(run, fresh, ended=False)
            if final or (stopping and not fresh):
                self._publish(run, [], ended=True)
                return

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

    def _disk_events(self, run_id: str, after: int) -> list[StatusEvent]:
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
        disk = _load(rundir)
        run = self.runs.get(run_id)
        if run is None and disk is None and not rundir.events_jsonl.exists():
            raise HTTPException(404, f"no run {run_id!r}")
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
        events = run.events if run is not None else self._disk_events(run_id, 0)
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
                disk = _load(rundir)
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


def _load(rundir: RunDir) -> RunState | None:
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


# -- report rendering ------------------------------------------------------------------------------------
_CITE = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def render_report(markdown: str) -> str:
    """report.md as HTML (markdown-it-py, raw HTML escaped) with each citation [n] a clickable link."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)

    def link(m: re.Match[str]) -> str:
        nums = [n.strip() for n in m.group(1).split(",")]
        inner = ", ".join(f'<a href="#cite-{n}" class="cite" data-n="{n}">{n}</a>' for n in nums)
        return f"[{inner}]"

    # only in text, never inside a tag
    return re.sub(r"(>[^<]*)", lambda t: _CITE.sub(link, t.group(1)), html)


# -- the app -----------------------------------------------------------------------------------------------
def create_app(settings: Settings, *, llm: Any | None = None, token: str | None = None,
               max_body: int = MAX_BODY_BYTES, allowed_libraries: Sequence[Path] | None = None) -> FastAPI:
    """The gateway app. ``token``: required on every REST call and WebSocket when given (None: loopback
    only, checked by Host and Origin). ``llm``: a model for every run (tests pass a scripted one).
    ``allowed_libraries``: the folders the API's ``library`` may lie in (None: the owner's allow-list file,
    gateway/allowed.py)."""
    settings = settings.updated(run={"runs_dir": settings.run.runs_dir.expanduser().resolve()},
                                store={"path": settings.store.path.expanduser().resolve()})
    manager = RunManager(settings, llm=llm, allowed_libraries=allowed_libraries)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        manager.loop = asyncio.get_running_loop()
        yield
        manager.shutdown()

    # FastAPI's own /docs and /redoc load Swagger UI and ReDoc from a CDN, and its /openapi.json takes no
    # token: /docs and /openapi.json are served below instead (local assets, the token rule of every other
    # route). ReDoc is left out: its bundle always loads a logo from its vendor's CDN.
    app = FastAPI(title="Forage gateway", version="0.1", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None,
                  description="Start, approve, watch and read Forage research runs. Status events stream on the "
                              "WebSocket `/ws/runs/{run_id}?after=SEQ` as JSON frames: "
                              "`{\"type\": \"event\", \"event\": StatusEvent}` in seq order, then "
                              "`{\"type\": \"end\", \"status\": ..., \"last_seq\": N}` when the run is over; "
                              "client frames: `{\"type\": \"ping\"}` → `{\"type\": \"pong\"}`; anything "
                              "else gets `{\"type\": \"error\"}`.")
    app.state.manager = manager
    app.state.token = token

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        # where and what, never the input itself (a 50 MB body would come back; a query would be echoed)
        return JSONResponse({"detail": [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""),
                                         "type": e.get("type", "")} for e in exc.errors()]}, status_code=422)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        refused = _refuse(request, max_body)
        response = refused if refused is not None else await call_next(request)
        for name, value in _security_headers(request).items():
            response.headers.setdefault(name, value)
        return response

    def authorize(request: Request) -> None:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not (given.startswith("Bearer ") and same_secret(given[7:].strip(), token)):
                raise HTTPException(401, "missing or wrong token: open the address `forage serve` printed (it carries "
                                         "the token once), or send Authorization: Bearer TOKEN (the owner's token "
                                         "file: $XDG_CONFIG_HOME/forage/gateway-token)",
                                    headers={"WWW-Authenticate": "Bearer"})
        else:
            _check_loopback_host(request.headers.get("host", ""))

    def authorize_page(request: Request) -> None:
        """As ``authorize``, and a page a browser opens (no headers) may carry the token as ``?token=``."""
        given = request.query_params.get("token")
        if token is not None and given and same_secret(given, token):
            return
        authorize(request)

    def managed(run_id: str) -> ManagedRun:
        run = manager.runs.get(run_id)
        if run is None:
            manager.rundir(run_id)
            raise HTTPException(404, f"run {run_id!r} is not held by this gateway")
        return run

    auth = [Depends(authorize)]

    @app.post("/api/runs", response_model=RunCreated, status_code=202, dependencies=auth, tags=["runs"],
              summary="Start a run: requirements are proposed in the background")
    async def create_run(body: RunCreate) -> RunCreated:
        run = await manager.create(body)
        return RunCreated(run_id=run.run_id, status=run.status, state_url=f"/api/runs/{run.run_id}",
                          events_url=f"/ws/runs/{run.run_id}")

    @app.get("/api/models", response_model=ModelChoices, dependencies=auth, tags=["runs"],
             summary="Model backends and the models the Ollama server has, for the New-run form")
    async def models() -> ModelChoices:
        from infra.llm import build_llm, ollama_host

        async def served(backend: str) -> tuple[list[str], str | None]:
            try:
                llm: Any = build_llm(settings.updated(llm={"backend": backend}))
                return await llm.installed_models(), None
            except ForageError as exc:
                return [], describe(exc)

        found, error = await served("ollama")
        openai_found, openai_error = await served("openai") if settings.llm.backend == "openai" else ([], None)
        return ModelChoices(backends=["ollama", "openai", "embedded"], backend=settings.llm.backend,
                            model=settings.llm.model, ollama_host=ollama_host(settings), ollama_models=found,
                            ollama_error=error, openai_base_url=settings.llm.base_url, openai_models=openai_found,
                            openai_error=openai_error)

    @app.get("/api/runs", response_model=list[RunListItem], dependencies=auth, tags=["runs"],
             summary="Every run in the runs folder and every run this gateway holds, newest first")
    async def list_runs() -> list[RunListItem]:
        return manager.list()

    @app.get("/api/runs/{run_id}", response_model=RunView, dependencies=auth, tags=["runs"],
             summary="A run's state (run.json and live); `proposal` is set once requirements await approval")
    async def get_run(run_id: str) -> RunView:
        return manager.state(run_id)

    @app.get("/api/runs/{run_id}/proposal", response_model=RunView, dependencies=auth, tags=["runs"],
             summary="Wait (up to `wait` seconds) until planning is over, then the run's state with its proposal")
    async def proposal(run_id: str, wait: float = Query(30.0, ge=0, le=300)) -> RunView:
        run = managed(run_id)
        try:
            await asyncio.wait_for(run.planned.wait(), wait)
        except TimeoutError:
            pass
        return manager.state(run_id)

    @app.post("/api/runs/{run_id}/approve", response_model=RunView, dependencies=auth, tags=["runs"],
              summary="Approve the proposal, optionally with edited requirements and search strings")
    async def approve(run_id: str, body: Approval | None = None) -> RunView:
        manager.approve(managed(run_id), body or Approval())
        return manager.state(run_id)

    @app.post("/api/runs/{run_id}/cancel", response_model=RunView, dependencies=auth, tags=["runs"],
              summary="Cancel: before approval at once; a running run (also one another process drives, as "
                      "`forage cancel`) stops at its next stage boundary")
    async def cancel(run_id: str) -> RunView:
        run = manager.runs.get(run_id)
        if run is not None:
            manager.cancel(run)
        else:
            state = manager.state(run_id)
            if state.status != "running":  # running: another process drives it; it reads the flag as well
                hint = f": POST /api/runs/{run_id}/resume continues it" if state.resumable else ""
                raise HTTPException(409, f"run {run_id} is {state.status} and not held by this gateway{hint}")
            manager.rundir(run_id).request_cancel()
        return manager.state(run_id)

    @app.post("/api/runs/{run_id}/resume", response_model=RunView, dependencies=auth, tags=["runs"],
              summary="Continue an interrupted, cancelled or failed run, as `forage resume` does",
              description="Finished ingestion and foraging are kept. The run's events go on on the same "
                          "WebSocket, numbered after the ones it already has.",
              responses={404: {"model": Message}, 409: {"model": Message}})
    async def resume(run_id: str) -> RunView:
        await manager.resume(run_id)
        return manager.state(run_id)

    @app.get("/api/runs/{run_id}/report", response_class=PlainTextResponse, dependencies=auth, tags=["reports"],
             summary="report.md", responses={200: {"content": {"text/markdown": {}}}, 404: {"model": Message}})
    async def report(run_id: str) -> Response:
        path = manager.rundir(run_id).report_md
        if not path.exists():
            raise HTTPException(404, f"run {run_id} has no report yet")
        return PlainTextResponse(path.read_text(encoding="utf-8"), media_type="text/markdown; charset=utf-8")

    @app.get("/api/runs/{run_id}/report.html", response_class=HTMLResponse, dependencies=auth, tags=["reports"],
             summary="report.md rendered as an HTML fragment; citations are <a class=cite data-n=N>")
    async def report_html(run_id: str) -> HTMLResponse:
        path = manager.rundir(run_id).report_md
        if not path.exists():
            raise HTTPException(404, f"run {run_id} has no report yet")
        return HTMLResponse(render_report(path.read_text(encoding="utf-8")))

    @app.get("/api/runs/{run_id}/evidence", response_model=list[dict[str, Any]], dependencies=auth,
             tags=["reports"], summary="evidence.jsonl: one row per cited chunk (n, chunk_id, doc_id, quote...)")
    async def evidence(run_id: str) -> list[dict[str, Any]]:
        path = manager.rundir(run_id).evidence_jsonl
        if not path.exists():
            raise HTTPException(404, f"run {run_id} has no evidence yet")
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]

    @app.get("/api/runs/{run_id}/artifacts/{name}", dependencies=[Depends(authorize_page)], tags=["reports"],
             summary=f"One of the run's files: {', '.join(ARTIFACTS)}", response_class=FileResponse)
    async def artifact(run_id: str, name: str) -> FileResponse:
        if name not in ARTIFACTS:
            raise HTTPException(404, f"{name!r} is not a run artifact; one of {', '.join(ARTIFACTS)}")
        path = manager.rundir(run_id).path / name
        if not path.exists():
            raise HTTPException(404, f"run {run_id} has no {name}")
        return FileResponse(path, media_type=ARTIFACTS[name])

    @app.get("/api/runs/{run_id}/figures/{name}", dependencies=auth, tags=["reports"],
             summary="A chart of the run's report (figures/<name>.svg|png, as the report links it)",
             response_class=FileResponse)
    async def figure(run_id: str, name: str) -> FileResponse:
        match = _FIGURE.fullmatch(name)
        if match is None:
            raise HTTPException(404, f"{name!r} is not a figure name (<name>.svg or <name>.png)")
        path = manager.rundir(run_id).path / "figures" / name
        if not path.is_file():
            raise HTTPException(404, f"run {run_id} has no figure {name}")
        # an SVG is a document that may carry script: served sandboxed, never run as the gateway's page
        headers = {"Content-Security-Policy": "sandbox"} if match.group(1) == "svg" else None
        return FileResponse(path, media_type=FIGURE_TYPES[match.group(1)], headers=headers)

    @app.get("/api/runs/{run_id}/chunks/{chunk_id}", response_model=Chunk, dependencies=auth, tags=["reports"],
             summary="A stored chunk cited by the run (as `forage chunk`): text, document, section, pages")
    async def chunk(run_id: str, chunk_id: str) -> Chunk:
        rundir = manager.rundir(run_id)
        state = _load(rundir)
        if state is None or not state.store_path:
            raise HTTPException(404, f"run {run_id} records no store")
        return await asyncio.get_running_loop().run_in_executor(
            manager.pool, _load_chunk, settings, Path(state.store_path), chunk_id)

    @app.post("/api/runs/{run_id}/ask", response_model=AskOut, dependencies=auth, tags=["reports"],
              summary="Ask a question of the run: a cited answer from its documents only (as `forage ask --run`), "
                      "or 'not enough evidence' with what was searched; appended to the run's asks.jsonl",
              responses={404: {"model": Message}, 409: {"model": Message}, 503: {"model": Message}})
    async def ask_run(run_id: str, body: AskIn) -> AskOut:
        from gateway.cli_ask import ask_run as ask

        rundir = manager.rundir(run_id)
        if _load(rundir) is None:
            raise HTTPException(404, f"no run {run_id!r}")
        try:
            result, _ = await ask(settings, rundir, body.question, llm=manager.llm)
        except ValueError as exc:
            raise HTTPException(422, " ".join(str(exc).split())) from None
        except ForageError as exc:  # the model server does not answer, or the run has no documents
            raise HTTPException(503 if exc.retryable else 409, describe(exc)) from None
        return AskOut.model_validate(result.as_dict())

    @app.get("/api/runs/{run_id}/asks", response_model=list[AskOut], dependencies=auth, tags=["reports"],
             summary="The questions asked of the run so far and their answers (asks.jsonl), first first")
    async def asks(run_id: str) -> list[AskOut]:
        from actors.steps.tools.ask import read_asks

        rundir = manager.rundir(run_id)
        out = []
        for record in read_asks(rundir.asks_jsonl):
            try:
                out.append(AskOut.model_validate(record))
            except ValidationError:
                continue  # a line another version wrote differently: skipped, never a 500
        return out

    @app.websocket("/ws/runs/{run_id}")
    async def ws_events(websocket: WebSocket, run_id: str, after: int = Query(0, ge=0)) -> None:
        await websocket.accept()
        if not _ws_allowed(websocket, token):
            await websocket.close(code=1008, reason="missing or wrong token")
            return
        run = manager.runs.get(run_id)
        if run is None:
            try:
                rundir = manager.rundir(run_id)
            except HTTPException:
                rundir = None
            if rundir is None or not (rundir.events_jsonl.exists() or rundir.run_json.exists()):
                await websocket.send_json({"type": "error", "error": f"no run {run_id!r}"})
                await websocket.close(code=1008 if rundir is None else 4404)
                return
        reader = asyncio.create_task(_read_client(websocket))
        streamer: asyncio.Task[None] | None = None
        try:
            if run is None:
                for ev in manager._disk_events(run_id, after):
                    await websocket.send_text(json.dumps({"type": "event", "event": ev.model_dump(mode="json")}))
                    after = ev.seq
                rundir = manager.rundir(run_id)
                state = _load(rundir)
                await websocket.send_json({"type": "end", "status": shown_status(state, rundir),
                                           "last_seq": after, "resumable": resumable(state, rundir)})
            else:
                streamer = asyncio.create_task(_stream(websocket, run, after))
                await asyncio.wait({streamer, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not streamer.done():
                    return  # the client went away: stop waiting for events on its behalf (the run goes on)
                streamer.result()
            await websocket.close()
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the client went away: the run goes on
        finally:
            for task in (streamer, reader):
                if task is not None:
                    task.cancel()
                    if task.done() and not task.cancelled():
                        task.exception()  # retrieved: a send to a closed socket is no error of ours

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=[Depends(authorize_page)])
    async def docs() -> HTMLResponse:
        return _docs_page()

    @app.get("/redoc", include_in_schema=False, dependencies=[Depends(authorize_page)])
    async def redoc(request: Request) -> RedirectResponse:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"/docs{query}")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=_docs_assets()), name="docs-assets")
    return app


def _docs_assets() -> Path:
    """Swagger UI as the fastapi-offline package ships it (swagger-ui-bundle.js, swagger-ui.css, favicon.png)."""
    import fastapi_offline

    return Path(fastapi_offline.__file__).resolve().parent / "static"


# only this gateway: the browser itself refuses anything from elsewhere (Swagger UI styles inline)
DOCS_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
            "font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def _docs_page() -> HTMLResponse:
    """The API docs page: Swagger UI from the gateway's own assets; gateway/static/docs.js fetches
    /openapi.json (with the token when there is one) and renders it."""
    html = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Forage gateway API</title>
<link rel="icon" href="{DOCS_ASSETS}/favicon.png">
<link rel="stylesheet" href="{DOCS_ASSETS}/swagger-ui.css">
</head>
<body>
<div id="api-docs"><p>Loading the API schema…</p></div>
<script src="{DOCS_ASSETS}/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script>
</body>
</html>
"""
    return HTMLResponse(html, headers={"Content-Security-Policy": DOCS_CSP, "Referrer-Policy": "no-referrer",
                                       "Cache-Control": "no-store"})


def same_secret(given: str, token: str) -> bool:
    """Constant-time comparison of a presented secret with the token, as bytes (any text: never a 500)."""
    return secrets.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


def _refuse(request: Request, max_body: int) -> JSONResponse | None:
    """A response refusing the request before it is read, or None: a body over ``max_body`` (by its
    Content-Length; a streamed body without one is refused too) → 413/411; a state-changing request a web
    page on another origin sent (its Origin is not this Host) → 403. Clients that are not browsers send no
    Origin; a browser always sends one with a POST."""
    if request.method in ("POST", "PUT", "PATCH", "DELETE"):
        length = request.headers.get("content-length")
        if length is None and request.headers.get("transfer-encoding", "").lower() == "chunked":
            return JSONResponse({"detail": "a request body needs a Content-Length"}, status_code=411)
        try:
            too_big = length is not None and int(length) > max_body
        except ValueError:
            return JSONResponse({"detail": "bad Content-Length"}, status_code=400)
        if too_big:
            return JSONResponse({"detail": f"request body over {max_body:,} bytes"}, status_code=413)
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
            return JSONResponse({"detail": f"cross-origin request from {origin[:100]!r} refused"}, status_code=403)
    return None


def _security_headers(request: Request) -> dict[str, str]:
    """Every response: a page of this gateway loads scripts, styles, images and connections from this gateway
    only (no remote image in a report can carry data out), is never framed, and types are not sniffed."""
    host = request.headers.get("host", "")
    connect = f"'self' ws://{host} wss://{host}" if host and "'" not in host and ";" not in host else "'self'"
    return {"Content-Security-Policy": DOCS_CSP.replace("connect-src 'self'", f"connect-src {connect}"),
            "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}


def _check_loopback_host(host: str) -> None:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if host.startswith("["):
        name = host.split("]")[0] + "]"
    if not is_loopback(name):
        raise HTTPException(403, f"Host {host!r} is not loopback: start the gateway with a token to serve it")


def _ws_allowed(websocket: WebSocket, token: str | None) -> bool:
    if token is not None:
        given = websocket.query_params.get("token") or ""
        header = websocket.headers.get("authorization", "")
        if header.startswith("Bearer "):
            given = header[7:].strip()
        return bool(given) and same_secret(given, token)
    try:
        _check_loopback_host(websocket.headers.get("host", ""))
    except HTTPException:
        return False
    origin = websocket.headers.get("origin")
    if origin:  # a browser: only the dashboard's own origin (no cross-site WebSocket hijacking)
        from urllib.parse import urlsplit

        return is_loopback(urlsplit(origin).hostname or "")
    return True


def status_of(run: ManagedRun) -> str:
    """The run's status; once its events have ended, run.json (checkpointed before the last event) decides."""
    if run.ended and run.status not in ("planning", "awaiting_approval", "cancelled"):
        rundir = RunDir(run.settings.run.runs_dir, run.run_id)
        disk = _load(rundir)
        shown = shown_status(disk, rundir)  # "interrupted" when it ended while run.json says running
        if (disk is not None and disk.status not in ("running", "awaiting_approval")) or shown == "interrupted":
            return shown
    return run.status


async def _stream(websocket: WebSocket, run: ManagedRun, after: int) -> None:
    assert run.cond is not None
    while True:
        async with run.cond:
            await run.cond.wait_for(lambda: run.last_seq > after or run.ended)
            batch = [e for e in run.events if e.seq > after]
            ended = run.ended
        for ev in batch:
            await websocket.send_text(json.dumps({"type": "event", "event": ev.model_dump(mode="json")}))
            after = ev.seq
        if ended and run.last_seq <= after:
            await websocket.send_json({"type": "end", "status": status_of(run), "last_seq": after,
                                       "error": run.error})
            return


async def _read_client(websocket: WebSocket) -> None:
    """Answer client frames: ping → pong; anything else → an error frame (the stream goes on)."""
    while True:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            await websocket.send_json({"type": "error", "error": "binary frames are not understood; send JSON text"})
            continue
        try:
            frame = json.loads(text)
        except ValueError:
            await websocket.send_json({"type": "error", "error": "frames must be JSON objects"})
            continue
        if isinstance(frame, dict) and frame.get("type") == "ping":
            await websocket.send_json({"type": "pong"})
        else:
            await websocket.send_json({"type": "error", "error": "unknown frame; the only one understood is "
                                                                "{\"type\": \"ping\"}"})


def _load_chunk(settings: Settings, store_path: Path, chunk_id: str) -> Chunk:
    from infra.store import build_store

    s = settings.updated(store={"path": store_path})
    store = build_store(s)
    found = store.get_chunk(chunk_id)
    if found is None:
        raise HTTPException(404, f"no chunk {chunk_id!r} in the run's store")
    doc = store.get_document(found.doc_id)
    return Chunk(chunk_id=found.chunk_id, doc_id=found.doc_id, title=doc.title if doc else None,
                 section_path=found.section_path, pages=list(found.pages), text=found.text)


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8765, *, no_token: bool = False,
          say: Any = print) -> None:
    """Run the gateway (blocking). Every bind needs the per-install token unless ``no_token`` on loopback; the
    printed URL carries it once (the page keeps it for its tab)."""
    import uvicorn

    from infra import privacy

    privacy.apply()
    token = gateway_token(host, no_token=no_token)
    app = create_app(settings, token=token)
    shown = f"[{host}]" if ":" in host else host
    if token:
        say(f"gateway on http://{shown}:{port}/#token={token}\n  open that address once: the page keeps the token "
            f"for its tab. The token is kept in {token_path()} (0600); the typed client and examples/driver.py "
            "read it from there.")
    else:
        say(f"gateway on http://{shown}:{port}/  (--no-token: any user of this machine can read and start runs "
            "through it)")
    uvicorn.run(app, host=host, port=port, log_level="warning", ws="websockets-sansio")


__all__ = ["create_app", "serve", "render_report"]
