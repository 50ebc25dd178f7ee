"""The gateway: a FastAPI app that starts, approves, watches and reads research runs (`forage serve`).

REST under ``/api`` (OpenAPI at ``/openapi.json``, rendered at ``/docs`` by Swagger UI from assets the
gateway serves itself: no CDN), the run's status events on the WebSocket
``/ws/runs/{run_id}?after=SEQ``, and the dashboard (``gateway/static``) at ``/``.

Runs outlive connections: a :class:`~gateway.runs.RunManager` owned by the app holds each run's
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

Where each part lives: the runs in gateway/runs.py (no HTTP: it raises gateway/errors.py's errors, which one handler
here turns into status codes), the routes in gateway/routes/ (runs, reports, ws, pages), the token, loopback and
origin checks in gateway/security.py; this module builds the app from them and serves it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles

from gateway.api import gateway_token, token_path
from gateway.errors import Conflict, Invalid, NotAllowed, NotFound, RunRequestError, Unavailable
from gateway.routes import pages, reports, runs, ws
from gateway.routes.pages import DOCS_ASSETS, STATIC, docs_assets
from gateway.routes.reports import render_report
from gateway.runs import _RUN_ID, ManagedRun, RunManager
from gateway.security import refuse, same_secret, security_headers
from infra.settings import Settings

MAX_BODY_BYTES = 1_000_000  # the largest request body read: a query, an approval with edits
STATUS_CODES: dict[type[RunRequestError], int] = {NotFound: 404, Conflict: 409, Invalid: 422, NotAllowed: 403,
                                                  Unavailable: 503}


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
    # token: /docs and /openapi.json are served by gateway/routes/pages.py instead (local assets, the token rule
    # of every other route). ReDoc is left out: its bundle always loads a logo from its vendor's CDN.
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

    @app.exception_handler(RunRequestError)
    async def refused(_: Request, exc: RunRequestError) -> JSONResponse:
        # what the runs cannot do, as the status code that says it (the message is one sentence for the caller)
        return JSONResponse({"detail": str(exc)}, status_code=STATUS_CODES.get(type(exc), 409))

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        response = refuse(request, max_body)
        if response is None:
            response = await call_next(request)
        for name, value in security_headers(request).items():
            response.headers.setdefault(name, value)
        return response

    for module in (runs, reports, ws, pages):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=docs_assets()), name="docs-assets")
    return app


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


__all__ = ["create_app", "serve", "render_report", "same_secret", "ManagedRun", "RunManager", "_RUN_ID"]
