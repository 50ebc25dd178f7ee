"""What the gateway tests share (not fixtures: those are in conftest.py): the demo library and query, a live
uvicorn server on loopback, the settings of the gateway that runs the test brain, and an app on a base URL for
TestClient."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEMO_LIBRARY = REPO / "examples" / "demo_library"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
QUERY = "Anticoagulation after trauma, and how JIT compilers specialize types"
EDITED_R1 = "Complication rates of anticoagulant prophylaxis against venous thrombosis after injury in adults"


class LiveServer:
    """uvicorn serving ``app`` on a loopback socket bound before the thread starts (so it is ready at once)."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(256)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = app
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws="websockets-sansio",
                                                    lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def gateway_settings(tmp: Path, ingest_cache: Path | None = None) -> Any:
    from infra.settings import Settings
    from tests.loopback_ollama import closed_loopback_url

    return Settings.load("quick").updated(
        run={"runs_dir": tmp / "runs", "max_iterations": 1, "max_requirements": 2},
        store={"path": tmp / "store"}, search={"library": DEMO_LIBRARY},
        ingest={"pool_size": 1, "cache_dir": ingest_cache},
        net={"offline": True},
        # a worker that built a real client by mistake would fail loudly: nothing listens there
        llm={"backend": "ollama", "host": closed_loopback_url()})


BASE = "http://127.0.0.1:8765"


def app_for(tmp: Path, token: str | None = None):
    from gateway.server import create_app
    from infra.settings import Settings

    settings = Settings.load("quick").updated(run={"runs_dir": tmp / "runs"}, store={"path": tmp / "store"})
    return create_app(settings, token=token)


N_CLIENTS = 50
