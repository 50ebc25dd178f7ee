"""The gateway's routes, one APIRouter per concern (gateway/server.py includes them): ``runs`` (start, approve,
cancel, resume, read a run's state), ``reports`` (a run's report, evidence, files, chunks, questions), ``ws`` (a
run's events on a WebSocket), ``pages`` (the dashboard and the API docs). A route reads the app's
:class:`~gateway.runs.RunManager` from ``app.state``; what the manager raises (gateway/errors.py) the app's one
handler turns into a status code."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from gateway.runs import RunManager


def manager(conn: HTTPConnection) -> RunManager:
    """The app's RunManager (a dependency: ``Depends(manager)``; a WebSocket route calls it itself)."""
    return conn.app.state.manager
