"""Ingestor actor: one PDF at a time through parse → chunk → embed → store.

The ports (parser, embedder, store) are built in the actor's own process on first use, so a crash
in a parser takes down only this actor; Ray restarts it and the Orchestrator records the document
as failed.
"""

from __future__ import annotations

import os
from typing import Any

from actors.status_hub import HubEmit
from infra.settings import Settings
from messages.ingest import IngestRequest, IngestResult


class Ingestor:
    def __init__(self, settings: Settings, run_id: str, hub: object | None = None,
                 embedder: Any | None = None, llm: Any | None = None) -> None:
        self.settings = settings
        self.run_id = run_id
        self._emit = HubEmit(run_id, hub)
        self._embedder = embedder
        self._llm = llm
        self._step = None

    def _context_llm(self) -> Any | None:
        """The LLM that writes chunk contexts, only when ``ingest.contextual`` is on (as a Forager's:
        the one given, else built from the settings; each call is made by a node's LLM endpoint when
        ``ray.llm_slots`` is set). None when the setting is off: no LLM is built."""
        if not self.settings.ingest.contextual:
            return None
        from actors.llm_endpoint import actor_llm

        return actor_llm(self.settings, self._llm)

    def _ensure(self):
        if self._step is None:
            from actors.embed_endpoint import actor_embedder
            from actors.steps.ingest.step import IngestStep
            from infra.pdf import build_parser
            from infra.store import build_store

            self._step = IngestStep(self.settings, build_store(self.settings),
                                    actor_embedder(self.settings, self._embedder),
                                    build_parser(self.settings), emit=self._emit, llm=self._context_llm())
        return self._step

    def ingest(self, request: IngestRequest) -> IngestResult:
        try:
            return self._ensure().ingest(request)
        finally:
            self._emit.flush()  # the document's events are in the log before its result

    def index_new_chunks(self) -> int:
        """Fold the chunks written so far into the store's search indexes (after a batch; idempotent)."""
        try:
            return self._ensure().index_new_chunks()
        finally:
            self._emit.flush()

    def pid(self) -> int:
        return os.getpid()

    def ready(self) -> int:
        """Build the step (store, embedder, parser) now, so a document's timeout counts its own work
        and not the actor's start; the pid. An in-process embedding model (MiniLM) is loaded here too."""
        step = self._ensure()
        step.embedder.warm()
        return os.getpid()
