"""Searcher actor: a thin wrapper over the search steps.

Two kinds of source answer each ``SearchRequest``: the local library (a folder of PDFs, when one is
configured) and the online databases (OpenAlex, arXiv), asked only with the search strings the
researcher approved and never when ``net.offline`` is set. Every outbound request of the run goes
through one :class:`infra.net.Egress` whose ledger is ``runs/<run_id>/egress.jsonl``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from actors.status_hub import HubEmit
from actors.steps.search.library import LibrarySearch
from infra.errors import ConfigError
from infra.ingest_cache import IngestCache
from infra.settings import Settings
from messages.search import SearchRequest, SearchResults


def merge_results(request: SearchRequest, parts: list[SearchResults]) -> SearchResults:
    return SearchResults(run_id=request.run_id, iteration=request.iteration,
                         candidates=tuple(c for p in parts for c in p.candidates),
                         skipped=tuple(s for p in parts for s in p.skipped),
                         exhausted=all(p.exhausted for p in parts))


def build_web_search(settings: Settings, run_id: str, llm: Any, emit: Any) -> Any:
    """The run's WebSearch: sources, downloader and (optionally) Zotero over one ledgered Egress."""
    from actors.steps.run.rundir import RunDir
    from actors.steps.search.web import WebSearch
    from infra.net import Egress, EgressLedger
    from infra.sources.arxiv_source import ArxivSource
    from infra.sources.download import Downloader
    from infra.sources.openalex import OpenAlexSource

    egress = Egress(settings.net, EgressLedger(RunDir(settings.run.runs_dir, run_id).path / "egress.jsonl"))
    sources: list[Any] = []
    for name in settings.search.sources:
        if name == "openalex":
            sources.append(OpenAlexSource(settings.search, settings.net, egress))
        elif name == "arxiv":
            sources.append(ArxivSource(settings.search, settings.net, egress))
    downloader = Downloader(settings.net, egress, settings.search.papers_dir,
                            arxiv_pdf_base=settings.search.arxiv_pdf_url)
    zotero = None
    if settings.zotero.push:
        from infra.sources.zotero import ZoteroLibrary

        zotero = ZoteroLibrary(settings.zotero, egress)
    return WebSearch(settings, llm, sources, downloader, zotero=zotero, run_id=run_id, emit=emit)


class Searcher:
    def __init__(self, settings: Settings, run_id: str, hub: object | None = None, llm: Any | None = None) -> None:
        self.settings = settings
        self.run_id = run_id
        self._emit = HubEmit(run_id, hub)
        self._llm = llm
        cache = IngestCache(settings.ingest.cache_dir) if settings.ingest.cache_dir is not None else None
        self._library = (LibrarySearch(settings.search.library, emit=self._emit, cache=cache,
                                       confined=settings.search.library_confined)
                         if settings.search.library is not None else None)
        self._web: Any | None = None

    def _web_search(self) -> Any:
        if self._web is None:
            llm = self._llm
            if llm is None:
                from actors.llm_endpoint import actor_llm

                # screening calls go through a node's LLM endpoint to its own Ollama, like every LLM call of a run
                llm = actor_llm(self.settings)
            self._web = build_web_search(self.settings, self.run_id, llm, self._emit)
        return self._web

    async def search(self, request: SearchRequest) -> SearchResults:
        try:
            parts: list[SearchResults] = []
            if self._library is not None:
                parts.append(await asyncio.to_thread(self._library.search, request))
            if request.search_queries and self.settings.online():
                parts.append(await self._web_search().search(request))
            if not parts:
                raise ConfigError("no source to search: give a library folder (--library DIR) or approve search "
                                  "strings for the online databases (not possible with --offline)")
            return merge_results(request, parts)
        finally:
            await self._emit.aflush()
