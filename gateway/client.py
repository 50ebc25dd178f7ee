"""A small typed client for the gateway (httpx for REST, websockets for the event stream).

    from gateway.client import GatewayClient
    with GatewayClient("http://127.0.0.1:8765") as gw:
        run_id = gw.create_run("my question", library="/data/pdfs").run_id
        proposal = gw.wait_for_proposal(run_id)
        gw.approve(run_id)
        for event in gw.events(run_id):      # reconnects with ?after= when the connection drops
            print(event.seq, event.message)
        print(gw.report(run_id))

With no ``token`` it reads this user's token file (``$XDG_CONFIG_HOME/forage/gateway-token``, 0600), the one
``forage serve`` requires on every bind; pass ``token=`` for a gateway on another machine. Needs httpx (and
websockets for events), not FastAPI.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from gateway.api import Chunk, Proposal, RunCreated, RunListItem, RunView, read_token
from messages.status import StatusEvent


class GatewayError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status, self.detail = status, detail


class StreamEnd(Exception):
    """The run is over (the server's end frame)."""


class GatewayClient:
    def __init__(self, base_url: str = "http://127.0.0.1:8765", token: str | None = None,
                 timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token if token is not None else read_token()  # the owner's token file, as `forage serve` made it
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        # a loopback gateway: no proxy from the environment may see this traffic
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, trust_env=False)
        self.last_end: dict[str, Any] | None = None

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        resp = self.http.request(method, path, **kwargs)
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail")
            except ValueError:
                detail = resp.text
            raise GatewayError(resp.status_code, detail if isinstance(detail, str) else json.dumps(detail))
        return resp

    # -- REST --------------------------------------------------------------------------------------------
    def create_run(self, query: str, *, library: str | None = None, preset: str | None = None,
                   max_iterations: int | None = None, min_coverage: float | None = None,
                   max_requirements: int | None = None, offline: bool | None = None) -> RunCreated:
        body = {k: v for k, v in dict(query=query, library=library, preset=preset, max_iterations=max_iterations,
                                      min_coverage=min_coverage, max_requirements=max_requirements,
                                      offline=offline).items() if v is not None}
        return RunCreated.model_validate(self._call("POST", "/api/runs", json=body).json())

    def state(self, run_id: str) -> RunView:
        return RunView.model_validate(self._call("GET", f"/api/runs/{run_id}").json())

    def runs(self) -> list[RunListItem]:
        return [RunListItem.model_validate(r) for r in self._call("GET", "/api/runs").json()]

    def approve(self, run_id: str, *, requirements: list[dict[str, str]] | None = None,
                search_queries: list[dict[str, Any]] | None = None) -> RunView:
        body: dict[str, Any] = {}
        if requirements is not None:
            body["requirements"] = requirements
        if search_queries is not None:
            body["search_queries"] = search_queries
        return RunView.model_validate(self._call("POST", f"/api/runs/{run_id}/approve", json=body).json())

    def cancel(self, run_id: str) -> RunView:
        return RunView.model_validate(self._call("POST", f"/api/runs/{run_id}/cancel").json())

    def resume(self, run_id: str) -> RunView:
        """Continue a run that a gateway restart (or a dead driver) interrupted; 409 if it is running or over."""
        return RunView.model_validate(self._call("POST", f"/api/runs/{run_id}/resume").json())

    def report(self, run_id: str) -> str:
        return self._call("GET", f"/api/runs/{run_id}/report").text

    def report_html(self, run_id: str) -> str:
        return self._call("GET", f"/api/runs/{run_id}/report.html").text

    def evidence(self, run_id: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/api/runs/{run_id}/evidence").json()

    def artifact(self, run_id: str, name: str) -> bytes:
        return self._call("GET", f"/api/runs/{run_id}/artifacts/{name}").content

    def chunk(self, run_id: str, chunk_id: str) -> Chunk:
        return Chunk.model_validate(self._call("GET", f"/api/runs/{run_id}/chunks/{chunk_id}").json())

    # -- events --------------------------------------------------------------------------------------------
    def ws_url(self, run_id: str, after: int = 0) -> str:
        base = "ws" + self.base_url[4:] if self.base_url.startswith("http") else self.base_url
        return f"{base}/ws/runs/{run_id}?after={after}"

    async def aevents(self, run_id: str, after: int = 0, *, reconnect: bool = True) -> AsyncIterator[StatusEvent]:
        """The run's events with seq > ``after``, in order, until the run is over. A dropped connection is
        reopened with ``?after=`` the last seq received, so nothing is missed or repeated."""
        import websockets

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        while True:
            try:
                async with websockets.connect(self.ws_url(run_id, after), additional_headers=headers,
                                              proxy=None, max_size=None) as ws:
                    async for raw in ws:
                        frame = json.loads(raw)
                        if frame.get("type") == "event":
                            event = StatusEvent.model_validate(frame["event"])
                            if event.seq > after:
                                after = event.seq
                                yield event
                        elif frame.get("type") == "end":
                            self.last_end = frame
                            return
                        elif frame.get("type") == "error":
                            raise GatewayError(0, frame.get("error", "error frame"))
            except websockets.ConnectionClosedError as exc:
                if exc.rcvd is not None and exc.rcvd.code == 1008:
                    raise GatewayError(401, "the gateway refused the token (close code 1008)") from None
                if not reconnect:
                    raise
            except websockets.ConnectionClosedOK:
                if not reconnect:
                    return
            except OSError:
                if not reconnect:
                    raise
                await asyncio.sleep(1.0)  # the gateway restarts: try again

    def events(self, run_id: str, after: int = 0) -> Iterator[StatusEvent]:
        """:meth:`aevents` for synchronous code (collects in a private event loop, yields as they come)."""
        import queue
        import threading

        q: queue.Queue[tuple[str, Any]] = queue.Queue()

        async def pump() -> None:
            try:
                async for ev in self.aevents(run_id, after):
                    q.put(("event", ev))
                q.put(("end", None))
            except BaseException as exc:  # noqa: BLE001 — handed to the caller
                q.put(("error", exc))

        threading.Thread(target=lambda: asyncio.run(pump()), daemon=True).start()
        while True:
            kind, item = q.get()
            if kind == "event":
                yield item
            elif kind == "error":
                raise item
            else:
                return

    def wait_for_proposal(self, run_id: str, timeout: float = 600.0) -> Proposal:
        """Wait until the requirements are proposed (the gateway's long poll); the proposal, or GatewayError
        when planning failed or did not end within ``timeout`` seconds."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            state = RunView.model_validate(self._call(
                "GET", f"/api/runs/{run_id}/proposal", params={"wait": max(0.0, min(60.0, left))},
                timeout=max(0.0, min(60.0, left)) + 30).json())
            if state.proposal is not None:
                return state.proposal
            if state.status != "planning" or left <= 0:
                raise GatewayError(409, f"run {run_id} is {state.status}: {state.error or 'no proposal'}")
