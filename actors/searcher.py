"""Searcher actor: a thin wrapper over the search step (local library in this version)."""

from __future__ import annotations

from actors.status_hub import HubEmit
from actors.steps.search import LibrarySearch
from infra.errors import ConfigError
from infra.settings import Settings
from messages.search import SearchRequest, SearchResults


class Searcher:
    def __init__(self, settings: Settings, run_id: str, hub: object | None = None) -> None:
        if settings.search.library is None:
            raise ConfigError("no source library configured (settings.search.library)")
        self._emit = HubEmit(run_id, hub)
        self._step = LibrarySearch(settings.search.library, emit=self._emit)

    def search(self, request: SearchRequest) -> SearchResults:
        try:
            return self._step.search(request)
        finally:
            self._emit.flush()
