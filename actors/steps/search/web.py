"""Finding papers online: approved search strings → OpenAlex / arXiv → screened → downloaded.

One :class:`WebSearch` lives for a run (inside the Searcher actor) and answers a ``SearchRequest``
per iteration:

1. **gather** — each approved search string, with its filters, asks each source for its next page
   (title / author strings are direct lookups, asked once, of every source that has them: OpenAlex
   and arXiv); from the second iteration on, accepted OpenAlex papers are snowballed (references and
   citing works, bounded by ``search.snowball_max``);
2. **dedupe** — against everything seen in the run (DOI, arXiv id, OpenAlex id, title + first
   author + year); a paper found again is merged, never fetched twice;
3. **screen** — the LLM scores title + abstract in batches (:mod:`actors.steps.search.paper_scoring`);
4. **acquire** — accepted papers (best first, ``max_results`` per iteration; the rest wait for the
   next iteration) are downloaded trying every open-access location; a paper without a PDF goes on
   as ``abstract_only``;
5. **file** — with ``zotero.push`` the acquired papers go to the run's Zotero collection.

Only the approved strings (and the papers' public ids, for snowballing and downloads) leave the
machine, all through the run's :class:`infra.net.Egress`, which records each request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from actors.steps.events import Emit, null_emit
from actors.steps.search.paper_scoring import score_candidates
from infra.errors import ForageError
from infra.llm.base import LLM
from infra.settings import Settings
from infra.sources.keys import Deduper
from messages.plan import SearchQuery
from messages.search import Candidate, SearchRequest, SearchResults, Skipped
from messages.status import Stage


class PaperSource(Protocol):
    name: str
    #: the search-string kinds the source answers: "keywords" (paged :meth:`search`), and "title" / "author"
    #: (:meth:`lookup_title` / :meth:`lookup_author`, answered once)
    kinds: frozenset[str]
    #: whether the source knows who cites whom (:meth:`references`, :meth:`cited_by`: citation snowballing)
    cites: bool

    def search(self, query: SearchQuery, limit: int) -> list[Candidate]:
        """The next page of results for ``query`` ([] once exhausted)."""
        ...

    def lookup_title(self, title: str, limit: int | None = None, query: SearchQuery | None = None) -> list[Candidate]:
        """Works with this title (where "title" is one of :attr:`kinds`), with ``query``'s filters."""
        ...

    def lookup_author(self, name: str, limit: int | None = None, query: SearchQuery | None = None) -> list[Candidate]:
        """Works by this author (where "author" is one of :attr:`kinds`), with ``query``'s filters."""
        ...

    def references(self, work_id: str, limit: int) -> list[Candidate]:
        """The works ``work_id`` cites (where :attr:`cites`)."""
        ...

    def cited_by(self, work_id: str, limit: int) -> list[Candidate]:
        """The works citing ``work_id`` (where :attr:`cites`)."""
        ...

    def exhausted(self, query: SearchQuery) -> bool:
        """Whether ``query`` has handed out everything the source has for it (a source that filters its pages, as
        arXiv's years, may return an empty page before its end)."""
        ...


@dataclass
class _Pending:
    """Accepted papers waiting for their turn, and papers the model has not scored yet."""

    accepted: list[Candidate] = field(default_factory=list)
    unscored: list[Candidate] = field(default_factory=list)


class WebSearch:
    def __init__(self, settings: Settings, llm: LLM, sources: Sequence[PaperSource], downloader: Any | None,
                 *, zotero: Any | None = None, run_id: str = "", emit: Emit = null_emit) -> None:
        self.settings = settings
        self.llm = llm
        self.sources = list(sources)
        self.downloader = downloader
        self.zotero = zotero
        self.run_id = run_id
        self.emit = emit
        self.deduper: Deduper | None = None  # seeded with the run's earlier keys at the first request
        self.pending = _Pending()
        self.accepted_ids: list[str] = []  # OpenAlex ids of accepted papers, snowballing seeds
        self.snowballed: set[str] = set()
        self.exhausted_pairs: set[tuple[str, str]] = set()  # (source, search string) with no more pages
        self.llm_calls = 0
        self._retried: set[str] = set()  # keys of papers the model skipped once (scored again, once)

    # -- gather ------------------------------------------------------------------------------------
    def _gather(self, request: SearchRequest, skipped: list[Skipped]) -> list[Candidate]:
        found: list[Candidate] = []
        limit = self.settings.search.per_query
        for query in request.search_queries:
            for source in self.sources:
                pair = (source.name, query.text)
                if pair in self.exhausted_pairs:
                    continue
                try:
                    if query.kind not in source.kinds:
                        continue  # this source has no direct lookup of this kind
                    if query.kind == "title":
                        page = source.lookup_title(query.text, query=query)  # with the string's filters
                        self.exhausted_pairs.add(pair)  # a lookup is answered once
                    elif query.kind == "author":
                        page = source.lookup_author(query.text, query=query)
                        self.exhausted_pairs.add(pair)
                    else:
                        page = source.search(query, limit)
                except Exception as exc:  # noqa: BLE001 — one source failing is recorded; the others go on
                    exc = exc if isinstance(exc, ForageError) else ForageError(
                        f"{type(exc).__name__}: {exc}", retryable=False)
                    skipped.append(Skipped(item=f"{source.name}: {query.text}", reason=str(exc),
                                           retryable=exc.retryable))
                    self.emit(Stage.SEARCH, "source_failed", f"{source.name} failed for '{query.text}': {exc}",
                              iteration=request.iteration, source=source.name, retryable=exc.retryable)
                    if not exc.retryable:
                        self.exhausted_pairs.add(pair)
                    continue
                if query.kind == "keywords":
                    # a source that filters pages (arXiv's years) may return an empty page before its end
                    if source.exhausted(query):
                        self.exhausted_pairs.add(pair)
                elif not page:
                    self.exhausted_pairs.add(pair)
                self.emit(Stage.SEARCH, "source_results", f"{source.name}: {len(page)} results for '{query.text}'",
                          iteration=request.iteration, source=source.name, query=query.text, found=len(page))
                found.extend(page)
        if self.settings.search.snowball and self.settings.search.snowball_max > 0:
            found.extend(self._snowball(request, skipped))
        return found

    def _snowball(self, request: SearchRequest, skipped: list[Skipped]) -> list[Candidate]:
        citing = next((s for s in self.sources if s.cites), None)
        if citing is None:
            return []
        seeds = [w for w in dict.fromkeys([*request.accepted_ids, *self.accepted_ids]) if w not in self.snowballed]
        budget = self.settings.search.snowball_max
        out: list[Candidate] = []
        for seed in seeds:
            if budget <= 0:
                break
            self.snowballed.add(seed)
            for direction in ("references", "cited_by"):
                if budget <= 0:
                    break
                try:
                    got = (citing.references if direction == "references" else citing.cited_by)(seed, budget)
                except ForageError as exc:
                    skipped.append(Skipped(item=f"snowball {direction} {seed}", reason=str(exc),
                                           retryable=exc.retryable))
                    continue
                got = got[:budget]
                budget -= len(got)
                out.extend(c.model_copy(update={"found_by": f"snowball:{direction}:{seed}"}) for c in got)
        if out:
            self.emit(Stage.SEARCH, "snowball", f"snowballing found {len(out)} papers",
                      iteration=request.iteration, found=len(out))
        return out

    # -- the iteration -----------------------------------------------------------------------------
    async def search(self, request: SearchRequest) -> SearchResults:
        skipped: list[Skipped] = []
        if self.deduper is None:
            self.deduper = Deduper(request.exclude_keys)
        gathered = self._gather(request, skipped)
        fresh = self.deduper.add(gathered)
        fresh = [c for c in fresh if self._in_years(c, request.search_queries)]
        to_score = [*self.pending.unscored, *fresh]
        self.pending.unscored = []
        if to_score:
            s = self.settings.search
            screening = await score_candidates(to_score, request.requirements, self.llm, batch_size=s.score_batch,
                                               accept_score=s.accept_score, fallback_keep=s.fallback_keep)
            self.llm_calls += screening.calls
            for c in screening.rejected:
                skipped.append(Skipped(item=self._label(c), reason=f"scored {c.score}/5"
                                       + (f": {c.score_reason}" if c.score_reason else "")))
            retry_once = [c for c in screening.unscored if c.key not in self._retried]
            self._retried.update(c.key for c in retry_once)
            for c in screening.unscored:
                if c not in retry_once:
                    skipped.append(Skipped(item=self._label(c), reason="the model did not score it", retryable=True))
            self.pending.unscored = retry_once if not screening.fallback else []
            self.pending.accepted.extend(screening.accepted)
            self.pending.accepted.sort(key=lambda c: -(c.score or 0))
            self.emit(Stage.SEARCH, "screened",
                      f"{len(screening.accepted)} of {len(to_score)} papers accepted"
                      + (" (the model failed: kept the top-ranked)" if screening.fallback else ""),
                      iteration=request.iteration, accepted=len(screening.accepted),
                      rejected=len(screening.rejected), unscored=len(screening.unscored),
                      llm_calls=screening.calls, fallback=screening.fallback, failures=screening.failures)
        take = self.pending.accepted[:request.max_results]
        self.pending.accepted = self.pending.accepted[request.max_results:]
        self.accepted_ids.extend(c.openalex_id for c in take if c.openalex_id)
        acquired = await self._acquire(take, request.iteration)
        offered: list[Candidate] = []
        for c in acquired:
            if c.path or (c.abstract_only and c.abstract):
                offered.append(c)
            else:
                skipped.append(Skipped(item=self._label(c), reason="no PDF could be downloaded and there is no "
                                       "abstract: " + "; ".join(c.download_failures or ("no location",))))
        if self.zotero is not None and offered:
            self._file_in_zotero(offered, request.iteration)
        exhausted = (not self.pending.accepted and not self.pending.unscored
                     and all((s.name, q.text) in self.exhausted_pairs
                             for s in self.sources for q in request.search_queries)
                     and not self._snowball_left(request))
        return SearchResults(run_id=request.run_id, iteration=request.iteration, candidates=tuple(offered),
                             skipped=tuple(skipped), exhausted=exhausted)

    def _snowball_left(self, request: SearchRequest) -> bool:
        if not (self.settings.search.snowball and self.settings.search.snowball_max > 0):
            return False
        if not any(s.cites for s in self.sources):
            return False
        return any(w not in self.snowballed for w in [*request.accepted_ids, *self.accepted_ids])

    async def _acquire(self, papers: list[Candidate], iteration: int) -> list[Candidate]:
        if not papers:
            return []
        if self.downloader is None:
            return [c.model_copy(update={"abstract_only": True}) for c in papers]
        acquired = [a.candidate for a in await self.downloader.fetch(papers)]
        got = sum(1 for c in acquired if c.path)
        self.emit(Stage.SEARCH, "downloads", f"{got} of {len(papers)} PDFs downloaded; "
                  f"{sum(1 for c in acquired if not c.path)} go on from their abstract",
                  iteration=iteration, downloaded=got, abstract_only=len(papers) - got,
                  failures={c.key: list(c.download_failures) for c in acquired if c.download_failures})
        return list(acquired)

    def _file_in_zotero(self, papers: list[Candidate], iteration: int) -> None:
        try:
            outcome = self.zotero.push(self.run_id, f"Forage {self.run_id}", papers)
        except ForageError as exc:
            self.emit(Stage.SEARCH, "zotero_failed", f"Zotero filing failed: {exc}", iteration=iteration,
                      retryable=exc.retryable)
            return
        self.emit(Stage.SEARCH, "zotero", f"filed in Zotero: {outcome}", iteration=iteration)

    @staticmethod
    def _in_years(c: Candidate, queries: Sequence[SearchQuery]) -> bool:
        """Sources without year filters (arXiv) are filtered here, by the string that found the paper."""
        q = next((q for q in queries if q.text == c.found_by), None)
        if q is None or c.year is None:
            return True
        return (q.year_from is None or c.year >= q.year_from) and (q.year_to is None or c.year <= q.year_to)

    @staticmethod
    def _label(c: Candidate) -> str:
        return f"{c.title or c.key} [{c.key}]"
