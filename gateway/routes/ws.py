"""The WebSocket ``/ws/runs/{run_id}?after=SEQ``: a run's status events as JSON frames, in seq order, then an
``end`` frame. A run this gateway holds is followed live (:meth:`~gateway.runs.ManagedRun.follow`, however many
clients); any other is replayed from its events.jsonl. Client frames: ping → pong; anything else → an error frame."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Query, WebSocket, WebSocketDisconnect

from actors.steps.run.record import resumable, shown_status
from gateway.errors import NotFound
from gateway.routes import manager
from gateway.runs import ManagedRun, read_state, status_of
from gateway.security import ws_allowed

router = APIRouter()


@router.websocket("/ws/runs/{run_id}")
async def ws_events(websocket: WebSocket, run_id: str, after: int = Query(0, ge=0)) -> None:
    await websocket.accept()
    if not ws_allowed(websocket):
        await websocket.close(code=1008, reason="missing or wrong token")
        return
    runs = manager(websocket)
    run = runs.runs.get(run_id)
    if run is None:
        try:
            rundir = runs.rundir(run_id)
        except NotFound:
            rundir = None
        if rundir is None or not (rundir.events_jsonl.exists() or rundir.run_json.exists()):
            await websocket.send_json({"type": "error", "error": f"no run {run_id!r}"})
            await websocket.close(code=1008 if rundir is None else 4404)
            return
    reader = asyncio.create_task(_read_client(websocket))
    streamer: asyncio.Task[None] | None = None
    try:
        if run is None:
            for ev in runs.disk_events(run_id, after):
                await websocket.send_text(json.dumps({"type": "event", "event": ev.model_dump(mode="json")}))
                after = ev.seq
            rundir = runs.rundir(run_id)
            state = read_state(rundir)
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


async def _stream(websocket: WebSocket, run: ManagedRun, after: int) -> None:
    async for ev in run.follow(after):
        await websocket.send_text(json.dumps({"type": "event", "event": ev.model_dump(mode="json")}))
        after = ev.seq
    await websocket.send_json({"type": "end", "status": status_of(run), "last_seq": after, "error": run.error})


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
