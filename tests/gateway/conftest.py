"""A live gateway on loopback (uvicorn in a thread, port 0) running real runs with the scripted test brain
over the demo library, and one run watched by 50 WebSocket clients, shared by the gateway tests."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest

from tests.gateway.live import CHROMIUM, CHROMIUM_ARGS, DEMO_LIBRARY, EDITED_R1, N_CLIENTS, QUERY, LiveServer, \
    gateway_settings


@pytest.fixture(scope="session")
def gateway(ray_cluster, tmp_path_factory, ingest_cache):
    from gateway.server import create_app
    from infra.llm.fakes import FunctionLLM
    from tests.e2e import brain as brain_module

    ray_cluster.cloudpickle.register_pickle_by_value(brain_module)
    tmp = tmp_path_factory.mktemp("gateway")
    # the owner allowed the demo library: the dashboard test names it as a run's library
    app = create_app(gateway_settings(tmp, ingest_cache), llm=FunctionLLM(brain_module.brain),
                     allowed_libraries=[DEMO_LIBRARY])
    server = LiveServer(app)
    yield server
    server.stop()


@dataclass
class WatchedRun:
    run_id: str
    proposal: Any
    listeners: list[list[dict]]  # every event frame each of the 50 clients received
    ends: list[dict]
    dropper_first: list[dict]  # the reconnecting client, before it dropped
    dropper_second: list[dict]  # after it reconnected with ?after=
    dropped_after: int
    chatty_frames: list[dict]
    disk_events: list[dict]



async def _watch(url: str, run_id: str, approve: Any) -> dict[str, Any]:
    import websockets

    ws_base = url.replace("http://", "ws://") + f"/ws/runs/{run_id}"
    opened = 0
    all_open = asyncio.Event()
    later = asyncio.Event()
    dropped: dict[str, int] = {}

    def one_open() -> None:
        nonlocal opened
        opened += 1
        if opened == N_CLIENTS + 2:
            all_open.set()

    async def listener(i: int) -> tuple[list[dict], dict]:
        frames: list[dict] = []
        async with websockets.connect(ws_base + "?after=0", proxy=None, max_size=None) as ws:
            one_open()
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "end":
                    return frames, frame
                assert frame["type"] == "event", frame
                frames.append(frame["event"])
                if i == 0 and "after" in dropped and frame["event"]["seq"] >= dropped["after"] + 3:
                    later.set()  # the dropped client has missed at least three events by now
        raise AssertionError(f"client {i}: the stream closed without an end frame")

    async def dropper() -> tuple[list[dict], list[dict], int]:
        first: list[dict] = []
        async with websockets.connect(ws_base, proxy=None, max_size=None) as ws:
            one_open()
            async for raw in ws:
                frame = json.loads(raw)
                assert frame["type"] == "event", frame
                first.append(frame["event"])
                if frame["event"]["stage"] == "run" and frame["event"]["kind"] == "started":
                    break  # drop the connection mid-run
        dropped["after"] = first[-1]["seq"]
        await asyncio.wait_for(later.wait(), 600)
        second: list[dict] = []
        async with websockets.connect(ws_base + f"?after={dropped['after']}", proxy=None, max_size=None) as ws:
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] == "end":
                    break
                second.append(frame["event"])
        return first, second, dropped["after"]

    async def chatty() -> list[dict]:
        frames: list[dict] = []
        async with websockets.connect(ws_base, proxy=None, max_size=None) as ws:
            for bad in ("not json", b"\x00\x01binary", "[1, 2]", '{"type": "subscribe"}', "", '{"type": "ping"}'):
                await ws.send(bad)
            one_open()
            async for raw in ws:
                frame = json.loads(raw)
                frames.append(frame)
                if frame["type"] == "end":
                    break
        return frames

    tasks = [asyncio.create_task(listener(i)) for i in range(N_CLIENTS)]
    drop_task = asyncio.create_task(dropper())
    chat_task = asyncio.create_task(chatty())
    await asyncio.wait_for(all_open.wait(), 120)
    await asyncio.to_thread(approve)
    results = await asyncio.wait_for(asyncio.gather(*tasks), 900)
    later.set()  # the run is over: whatever the dropped client missed, it must now get on reconnecting
    first, second, after = await asyncio.wait_for(drop_task, 60)
    return {"listeners": [r[0] for r in results], "ends": [r[1] for r in results], "first": first,
            "second": second, "after": after, "chatty": await asyncio.wait_for(chat_task, 60)}


@pytest.fixture(scope="session")
def watched_run(gateway) -> WatchedRun:
    """One run through the typed client: proposed, watched by 50 clients + one that drops and reconnects +
    one that sends malformed frames, approved with an edited requirement, finished."""
    from gateway.client import GatewayClient

    with GatewayClient(gateway.url) as client:
        created = client.create_run(QUERY)
        proposal = client.wait_for_proposal(created.run_id)

        def approve() -> None:
            client.approve(created.run_id, requirements=[{"id": "R1", "text": EDITED_R1}], search_queries=[])

        out = asyncio.run(_watch(gateway.url, created.run_id, approve))
    runs_dir = gateway.app.state.manager.runs_dir
    disk = [json.loads(line) for line in (runs_dir / created.run_id / "events.jsonl").read_text().splitlines()]
    return WatchedRun(run_id=created.run_id, proposal=proposal, listeners=out["listeners"], ends=out["ends"],
                      dropper_first=out["first"], dropper_second=out["second"], dropped_after=out["after"],
                      chatty_frames=out["chatty"], disk_events=disk)


@pytest.fixture(scope="module")
def browser():
    """Debian's headless Chromium through Playwright, one per module of the dashboard's browser tests."""
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM}: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright python package")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()
