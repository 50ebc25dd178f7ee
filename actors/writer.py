"""Writer actor: the cited Markdown report from all requirements' evidence."""

from __future__ import annotations

from typing import Any

from actors.status_hub import HubEmit
from infra.settings import Settings
from messages.write import Report, WriteRequest


class Writer:
    def __init__(self, settings: Settings, run_id: str, hub: object | None = None, llm: Any | None = None,
                 embedder: Any | None = None) -> None:
        self.settings = settings
        self._emit = HubEmit(run_id, hub)
        self._llm = llm
        self._embedder = embedder
        self._step = None

    async def write(self, request: WriteRequest) -> Report:
        if self._step is None:
            from actors.embed_endpoint import actor_embedder
            from actors.llm_endpoint import actor_llm
            from actors.steps.write.step import WriteStep
            from infra.store import build_store

            # like a Forager's: with ray.llm_slots every call is made by a node's LLM endpoint, to that node's
            # Ollama (ray.ollama_hosts), so the Writer needs no model server on its own node
            llm = actor_llm(self.settings, self._llm)
            # the embedder checks the comparison's labels against each paper's own text
            self._step = WriteStep(self.settings, build_store(self.settings), llm, emit=self._emit,
                                   embedder=actor_embedder(self.settings, self._embedder))
        try:
            return await self._step.write(request)
        finally:
            await self._emit.aflush()
