"""A loopback fake Ollama server for tests, and the guard that keeps unit tests off real models.

:class:`LoopbackOllama` is a real HTTP server on ``127.0.0.1`` (stdlib ``ThreadingHTTPServer`` in a
thread, port 0) speaking enough of Ollama's REST API for the ``ollama`` client:

- ``POST /api/chat`` (non-streaming): replays a queue of behaviours pushed by the test — a JSON
  answer (any content, any ``done_reason``, optionally slow), an HTTP error (500, 429, 404, ...),
  a hang (until the client's timeout fires; bounded by ``hang_limit_s`` so the thread always
  ends), or a connection reset. An unknown model gets Ollama's 404; an empty queue gets a 500
  saying so, which makes a test that under-scripts the server fail loudly.
- ``GET /api/tags``, ``POST /api/show``, ``GET /api/version``, ``GET /``: the configured models.
- ``POST /api/embed``: deterministic unit vectors derived from the text (sha256), or a pushed
  error/hang/reset behaviour.

Every request is recorded (``requests``, ``chat_requests``) so tests can assert what was sent,
e.g. that ``format`` is the schema. Response bodies follow the shapes in ``ollama._types``
(``ChatResponse``, ``ListResponse``, ``ShowResponse``, ``EmbedResponse``).

:func:`install_real_llm_guard` patches the ``ollama`` clients and the embedded GGUF loader so a
test can reach only loopback servers started here (or ports from :func:`closed_loopback_url`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

# ---------------------------------------------------------------- behaviours

Kind = Literal["answer", "status", "hang", "reset"]


@dataclass(frozen=True)
class Behaviour:
    """What the server does with one request. Build with the helper functions below."""

    kind: Kind
    content: str = ""
    done_reason: str = "stop"
    status: int = 200
    error: str = ""
    delay_s: float = 0.0


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump_json"):
        return value.model_dump_json()
    return json.dumps(value)


def answer(value: Any, *, done_reason: str = "stop", delay_s: float = 0.0) -> Behaviour:
    """A 200 chat answer whose ``message.content`` is ``value`` (str verbatim; dict/model as JSON)."""
    return Behaviour("answer", content=_text(value), done_reason=done_reason, delay_s=delay_s)


def slow(value: Any, delay_s: float) -> Behaviour:
    """An answer sent after ``delay_s`` seconds (cut short if the server stops)."""
    return answer(value, delay_s=delay_s)


def http_error(status: int, error: str | None = None) -> Behaviour:
    """An HTTP error with Ollama's ``{"error": ...}`` body."""
    return Behaviour("status", status=status, error=error or f"loopback-ollama: scripted HTTP {status}")


def hang() -> Behaviour:
    """Accept the request and never answer (until ``hang_limit_s`` or stop; then the connection closes)."""
    return Behaviour("hang")


def reset() -> Behaviour:
    """Read the request, then reset the TCP connection without answering."""
    return Behaviour("reset")


def invalid_json() -> Behaviour:
    return answer('{"requirements": ["battery ageing", oops}')


def truncated(json_prefix: str) -> Behaviour:
    """JSON cut off by the token limit (``done_reason: "length"``)."""
    return answer(json_prefix, done_reason="length")


def thinking(value: Any, thought: str = "The user wants JSON. Let me think about it.") -> Behaviour:
    """A ``<think>`` block, then the JSON answer."""
    return answer(f"<think>\n{thought}\n</think>\n\n{_text(value)}")


def empty() -> Behaviour:
    return answer("")


# ---------------------------------------------------------------- server

@dataclass
class RecordedRequest:
    method: str
    path: str
    body: Any = None


_ALLOWED_LOCK = threading.Lock()
_ALLOWED_PORTS: set[int] = set()  # 127.0.0.1 ports that tests may reach through the ollama client


def _allow(port: int) -> None:
    with _ALLOWED_LOCK:
        _ALLOWED_PORTS.add(port)


def _disallow(port: int) -> None:
    with _ALLOWED_LOCK:
        _ALLOWED_PORTS.discard(port)


def closed_loopback_url() -> str:
    """A loopback URL where nothing listens (a port just bound and released), allowed by the guard."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _allow(port)
    return f"http://127.0.0.1:{port}"


def _norm_model(name: str) -> str:
    return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _details(model: str) -> dict[str, Any]:
    family = model.split(":")[0].split("/")[-1]
    return {"parent_model": "", "format": "gguf", "family": family, "families": [family],
            "parameter_size": "7.6B", "quantization_level": "Q4_K_M"}


def fake_embedding(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for ``text`` (sha256 stream → floats in [-1, 1], normalised)."""
    raw = b""
    counter = 0
    while len(raw) < dim * 4:
        raw += hashlib.sha256(f"{counter}:{text}".encode()).digest()
        counter += 1
    values = [(v / 0xFFFFFFFF) * 2 - 1 for v in struct.unpack(f"<{dim}I", raw[: dim * 4])]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: LoopbackOllama


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"  # one request per connection: simple and explicit

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_HEAD(self) -> None:
        self._send_text(200, "")

    # -- plumbing

    def _route(self, method: str) -> None:
        owner = self.server.owner
        body = self._read_body()
        owner._record(RecordedRequest(method, self.path, body))
        routes = {
            ("GET", "/"): self._root,
            ("GET", "/api/version"): self._version,
            ("GET", "/api/tags"): self._tags,
            ("POST", "/api/show"): self._show,
            ("POST", "/api/chat"): self._chat,
            ("POST", "/api/embed"): self._embed,
        }
        handler = routes.get((method, self.path.split("?")[0]))
        if handler is None:
            self._send_text(404, "404 page not found")
            return
        handler(body)

    def _read_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        raw = self.rfile.read(length)
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw.decode("utf-8", "replace")

    def _send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _reset(self) -> None:
        """Close with RST: SO_LINGER on with a zero timeout."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def _misbehave(self, behaviour: Behaviour) -> bool:
        """Carry out a non-answer behaviour; True when the request has been dealt with."""
        owner = self.server.owner
        if behaviour.kind == "status":
            self._send_json(behaviour.status, {"error": behaviour.error})
            return True
        if behaviour.kind == "hang":
            owner._release.wait(owner.hang_limit_s)
            self.close_connection = True
            return True
        if behaviour.kind == "reset":
            self._reset()
            return True
        if behaviour.delay_s:
            owner._release.wait(behaviour.delay_s)
        return False

    def _known(self, model: Any) -> bool:
        return isinstance(model, str) and _norm_model(model) in {_norm_model(m) for m in self.server.owner.models}

    # -- endpoints

    def _root(self, _body: Any) -> None:
        self._send_text(200, "Ollama is running")

    def _version(self, _body: Any) -> None:
        self._send_json(200, {"version": self.server.owner.version})

    def _tags(self, _body: Any) -> None:
        models = []
        for name in self.server.owner.models:
            models.append({"name": name, "model": name, "modified_at": _now(), "size": 4_683_087_332,
                           "digest": hashlib.sha256(name.encode()).hexdigest(), "details": _details(name)})
        self._send_json(200, {"models": models})

    def _show(self, body: Any) -> None:
        model = body.get("model") if isinstance(body, dict) else None
        if not self._known(model):
            self._send_json(404, {"error": f"model '{model}' not found"})
            return
        family = _details(model)["family"]
        self._send_json(200, {
            "license": "", "modelfile": f"FROM {model}\n", "parameters": "temperature 0.7",
            "template": "{{ .Prompt }}", "details": _details(model),
            "model_info": {"general.architecture": family, f"{family}.context_length": 32768},
            "capabilities": ["completion"], "modified_at": _now(),
        })

    def _chat(self, body: Any) -> None:
        owner = self.server.owner
        model = body.get("model") if isinstance(body, dict) else None
        if not self._known(model):
            self._send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        behaviour = owner._pop("chat")
        if behaviour is None and owner.responder is not None:
            # computed answers: responder(messages, format) → content (a dict/model is sent as JSON)
            try:
                behaviour = answer(owner.responder(body.get("messages", []), body.get("format")),
                                   delay_s=owner.responder_delay_s)
            except Exception as exc:  # noqa: BLE001 — the test's responder failed: the client sees a 500
                self._send_json(500, {"error": f"loopback-ollama responder: {type(exc).__name__}: {exc}"})
                return
        if behaviour is None:
            self._send_json(500, {"error": "loopback-ollama: no scripted behaviour left for /api/chat"})
            return
        if self._misbehave(behaviour):
            return
        self._send_json(200, {
            "model": model, "created_at": _now(),
            "message": {"role": "assistant", "content": behaviour.content},
            "done": True, "done_reason": behaviour.done_reason,
            "total_duration": 1_000_000, "load_duration": 100_000, "prompt_eval_count": 10,
            "prompt_eval_duration": 200_000, "eval_count": max(1, len(behaviour.content) // 4),
            "eval_duration": 700_000,
        })

    def _embed(self, body: Any) -> None:
        owner = self.server.owner
        model = body.get("model") if isinstance(body, dict) else None
        if not self._known(model):
            self._send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
            return
        behaviour = owner._pop("embed")
        if behaviour is not None and self._misbehave(behaviour):
            return
        inputs = body.get("input", [])
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        if owner.embed_hook is not None:
            owner.embed_hook(texts)  # the test's: may block (its client may be killed meanwhile)
        dim = int(body.get("dimensions") or owner.embed_dim)
        self._send_json(200, {
            "model": model, "embeddings": [fake_embedding(t, dim) for t in texts],
            "total_duration": 1_000_000, "load_duration": 100_000,
            "prompt_eval_count": sum(len(t.split()) for t in texts),
        })


@dataclass
class LoopbackOllama:
    """A fake Ollama on 127.0.0.1; use as a context manager (or start()/stop())."""

    models: tuple[str, ...] = ("qwen2.5:7b-instruct",)
    hang_limit_s: float = 5.0
    embed_dim: int = 8
    version: str = "0.12.6"
    responder: Any = None  # optional callable(messages, format) → answer, used when no behaviour is queued
    responder_delay_s: float = 0.0  # the responder's answers are sent after this many seconds
    embed_hook: Any = None  # optional callable(texts) run before /api/embed answers; it may block
    requests: list[RecordedRequest] = field(default_factory=list, init=False)
    _queues: dict[str, deque[Behaviour]] = field(default_factory=lambda: {"chat": deque(), "embed": deque()},
                                                init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _release: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _server: _Server | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.models = tuple(self.models)

    # -- lifecycle

    def start(self) -> LoopbackOllama:
        self._release.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"loopback-ollama:{self.port}", daemon=True)
        self._thread.start()
        _allow(self.port)
        return self

    def stop(self) -> None:
        """Stop serving; hanging and slow handlers are released at once."""
        self._release.set()
        if self._server is not None:
            _disallow(self.port)
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> LoopbackOllama:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("LoopbackOllama is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- scripting and inspection

    def push(self, *behaviours: Behaviour) -> LoopbackOllama:
        """Queue behaviours for /api/chat, used one per request in order."""
        return self._push("chat", behaviours)

    def push_embed(self, *behaviours: Behaviour) -> LoopbackOllama:
        """Queue behaviours for /api/embed (``answer`` kinds only delay; the vectors are computed)."""
        return self._push("embed", behaviours)

    def _push(self, endpoint: str, behaviours: Iterable[Behaviour]) -> LoopbackOllama:
        with self._lock:
            self._queues[endpoint].extend(behaviours)
        return self

    def _pop(self, endpoint: str) -> Behaviour | None:
        with self._lock:
            queue = self._queues[endpoint]
            return queue.popleft() if queue else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    @property
    def pending(self) -> int:
        """Behaviours queued but not used yet (chat and embed)."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """Bodies of the /api/chat requests received, in order."""
        with self._lock:
            return [r.body for r in self.requests if r.path == "/api/chat"]


# ---------------------------------------------------------------- guard

class RealLLMForbidden(AssertionError):
    """A unit test tried to reach a real model (an Ollama server or a GGUF file)."""


def _allowed_url(url: Any, base_url: Any) -> bool:
    import httpx

    target = httpx.URL(str(url))
    if not target.is_absolute_url:
        target = httpx.URL(str(base_url))
    with _ALLOWED_LOCK:
        return target.host in ("127.0.0.1", "localhost") and target.port in _ALLOWED_PORTS


def install_real_llm_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make real-model access raise :class:`RealLLMForbidden` for the rest of the test.

    Patches ``ollama.Client``/``ollama.AsyncClient`` (every API call goes through ``_request_raw``
    and ``_request``'s stream path) to allow only loopback servers started by :class:`LoopbackOllama`
    and :func:`closed_loopback_url`; patches ``EmbeddedLLM._load`` and ``xllamacpp.Server`` so no
    GGUF model is loaded.
    """
    import ollama

    def refuse(what: str) -> RealLLMForbidden:
        return RealLLMForbidden(f"unit tests may not reach a real LLM ({what}); use a fake from "
                                "infra.llm.fakes or tests.loopback_ollama, or mark the test real_llm")

    original_async = ollama.AsyncClient._request_raw
    original_sync = ollama.Client._request_raw

    async def guarded_async(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not _allowed_url(url, self._client.base_url):
            raise refuse(f"ollama {method} {self._client.base_url}{url}")
        return await original_async(self, method, url, *args, **kwargs)

    def guarded_sync(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not _allowed_url(url, self._client.base_url):
            raise refuse(f"ollama {method} {self._client.base_url}{url}")
        return original_sync(self, method, url, *args, **kwargs)

    monkeypatch.setattr(ollama.AsyncClient, "_request_raw", guarded_async)
    monkeypatch.setattr(ollama.Client, "_request_raw", guarded_sync)

    # streaming requests bypass _request_raw: refuse them unless aimed at a loopback server
    original_async_request = ollama.AsyncClient._request
    original_sync_request = ollama.Client._request

    async def guarded_async_request(self: Any, cls: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not _allowed_url(url, self._client.base_url):
            raise refuse(f"ollama {method} {self._client.base_url}{url}")
        return await original_async_request(self, cls, method, url, *args, **kwargs)

    def guarded_sync_request(self: Any, cls: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not _allowed_url(url, self._client.base_url):
            raise refuse(f"ollama {method} {self._client.base_url}{url}")
        return original_sync_request(self, cls, method, url, *args, **kwargs)

    monkeypatch.setattr(ollama.AsyncClient, "_request", guarded_async_request)
    monkeypatch.setattr(ollama.Client, "_request", guarded_sync_request)

    from infra.llm.embedded import EmbeddedLLM

    def no_load(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise refuse(f"loading {self!r}")

    monkeypatch.setattr(EmbeddedLLM, "_load", no_load)
    try:
        import xllamacpp
    except ImportError:
        return

    class _NoServer:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise refuse("xllamacpp.Server")

    monkeypatch.setattr(xllamacpp, "Server", _NoServer)


NOMIC = "nomic-embed-text"


@contextlib.contextmanager
def nomic_ollama(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackOllama]:
    """A loopback Ollama serving nomic-embed-text (768 dimensions), with real model calls forbidden meanwhile."""
    install_real_llm_guard(monkeypatch)
    with LoopbackOllama(models=(NOMIC,), embed_dim=768) as server:
        yield server
