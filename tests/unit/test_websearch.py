"""WebSearch: approved strings → sources → dedupe → batched screening → acquisition, one iteration at a time.

The sources and the downloader here are small in-memory collaborators (the real OpenAlex/arXiv clients and
the downloader have their own loopback tests); what is under test is the step's own logic.
"""

from __future__ import annotations

import asyncio
import re

from actors.steps.events import RecordingEmit
from actors.steps.search.paper_scoring import PaperScores
from actors.steps.search.web import WebSearch
from infra.errors import SourceError
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from infra.sources.download import Acquired
from messages.plan import Requirement, SearchQuery
from messages.search import Candidate, SearchRequest
from tests.loopback_sources import loopback_sources  # noqa: F401  (fixture)

REQ = Requirement(id="R1", text="How do microplastics move through marine food webs?")
Q = SearchQuery(text="microplastics marine food webs", year_from=2015, requirement_ids=("R1",))


def paper(n: int, source: str = "openalex", **kw) -> Candidate:
    base = dict(key=f"doi:10.1/{n}", source=source, doi=f"10.1/{n}", title=f"Paper {n} about microplastics",
                abstract=f"Abstract {n}.", year=2020, found_by=Q.text, openalex_id=f"W{n}",
                pdf_urls=(f"https://oa.example/{n}.pdf",))
    return Candidate(**{**base, **kw})


class PagedSource:
    """A source of keyword pages only (no direct lookup, no citations)."""

    kinds = frozenset({"keywords"})
    cites = False

    def __init__(self, name: str, pages: list[list[Candidate]], fail: Exception | None = None) -> None:
        self.name, self.pages, self.fail, self.asked = name, list(pages), fail, []
        self.last: list[Candidate] | None = None

    def search(self, query: SearchQuery, limit: int) -> list[Candidate]:
        self.asked.append((query.text, limit))
        if self.fail is not None:
            raise self.fail
        self.last = self.pages.pop(0) if self.pages else []
        return self.last

    def exhausted(self, query: SearchQuery) -> bool:
        """Its end is the first empty page."""
        return self.last == []


class SnowballSource(PagedSource):
    cites = True

    def __init__(self, *a, refs: dict[str, list[Candidate]] | None = None, **kw) -> None:
        super().__init__(*a, **kw)
        self.refs = refs or {}
        self.snowballed: list[tuple[str, str, int]] = []

    def references(self, work_id: str, limit: int) -> list[Candidate]:
        self.snowballed.append(("references", work_id, limit))
        return self.refs.get(work_id, [])[:limit]

    def cited_by(self, work_id: str, limit: int) -> list[Candidate]:
        self.snowballed.append(("cited_by", work_id, limit))
        return []


class Downloads:
    """PDFs for even-numbered papers; odd ones fail and go on from their abstract."""

    def __init__(self) -> None:
        self.fetched: list[str] = []

    async def fetch(self, papers: list[Candidate]) -> list[Acquired]:
        out = []
        for c in papers:
            self.fetched.append(c.key)
            n = int(c.key.rsplit("/", 1)[1])
            if n % 2 == 0:
                out.append(Acquired(c.model_copy(update={"path": f"/papers/{n}.pdf"})))
            else:
                out.append(Acquired(c.model_copy(update={"abstract_only": True, "download_failures": (
                    f"{c.pdf_urls[0]}: answered HTML",)})))
        return out


def scores_by_number(low: set[int] = frozenset()):
    def fn(messages, schema):
        assert schema is PaperScores
        listed = re.findall(r"^\[(\d+)\] Paper (\d+)", messages[-1]["content"], re.M)
        return {"scores": [{"paper": int(i), "score": 1 if int(n) in low else 4, "reason": "r"} for i, n in listed]}
    return fn


def settings(**search) -> Settings:
    return Settings.load(search={"score_batch": 5, "accept_score": 3, "per_query": 10, **search})


def request(iteration: int, **kw) -> SearchRequest:
    return SearchRequest(run_id="r", iteration=iteration, query="(protected)", requirements=(REQ,), max_results=3,
                         search_queries=(Q,), **kw)


def test_an_iteration_screens_in_batches_and_offers_the_best_first():
    openalex = PagedSource("openalex", [[paper(i) for i in range(1, 8)]])
    llm = FunctionLLM(scores_by_number(low={1, 2}))
    downloads = Downloads()
    emit = RecordingEmit()
    web = WebSearch(settings(), llm, [openalex], downloads, emit=emit)
    res = asyncio.run(web.search(request(1)))
    assert llm.calls == 2  # 7 papers, batches of 5
    assert [c.key for c in res.candidates] == ["doi:10.1/3", "doi:10.1/4", "doi:10.1/5"]
    assert [bool(c.path) for c in res.candidates] == [False, True, False]
    assert all(c.abstract_only and c.download_failures for c in res.candidates if not c.path)
    assert {s.item.split(" [")[1][:-1] for s in res.skipped} == {"doi:10.1/1", "doi:10.1/2"}
    assert not res.exhausted  # two accepted papers wait for the next iteration
    # the source was asked with the approved string only
    assert openalex.asked == [(Q.text, 10)]
    # iteration 2: the waiting papers first, no new scoring of known papers
    res2 = asyncio.run(web.search(request(2, exclude_keys=tuple(c.key for c in res.candidates))))
    assert [c.key for c in res2.candidates] == ["doi:10.1/6", "doi:10.1/7"]
    assert llm.calls == 2 and res2.exhausted
    assert downloads.fetched == [f"doi:10.1/{i}" for i in range(3, 8)]


def test_duplicates_across_sources_and_iterations_are_fetched_once():
    dup = paper(2, source="arxiv", key="arxiv:2101.00002", arxiv_id="2101.00002", openalex_id=None)
    openalex = PagedSource("openalex", [[paper(2), paper(4)], [paper(4), paper(6)]])
    arxiv = PagedSource("arxiv", [[dup.model_copy(update={"doi": "10.1/2"})]])
    downloads = Downloads()
    web = WebSearch(settings(), FunctionLLM(scores_by_number()), [openalex, arxiv], downloads)
    res = asyncio.run(web.search(request(1)))
    assert [c.key for c in res.candidates] == ["doi:10.1/2", "doi:10.1/4"]
    res2 = asyncio.run(web.search(request(2)))
    assert [c.key for c in res2.candidates] == ["doi:10.1/6"]
    assert downloads.fetched == ["doi:10.1/2", "doi:10.1/4", "doi:10.1/6"]


def test_arxiv_results_outside_the_years_are_dropped():
    old = paper(8, source="arxiv", year=2009)
    web = WebSearch(settings(), FunctionLLM(scores_by_number()), [PagedSource("arxiv", [[old, paper(10)]])],
                    Downloads())
    res = asyncio.run(web.search(request(1)))
    assert [c.key for c in res.candidates] == ["doi:10.1/10"]


def test_a_failing_source_is_recorded_and_the_others_go_on():
    broken = PagedSource("arxiv", [], fail=SourceError("arXiv answered HTTP 503", retryable=True))
    emit = RecordingEmit()
    web = WebSearch(settings(), FunctionLLM(scores_by_number()), [broken, PagedSource("openalex", [[paper(2)]])],
                    Downloads(), emit=emit)
    res = asyncio.run(web.search(request(1)))
    assert [c.key for c in res.candidates] == ["doi:10.1/2"]
    assert [(s.item, s.retryable) for s in res.skipped] == [(f"arxiv: {Q.text}", True)]
    assert "source_failed" in [e.kind for e in emit.events]
    # retryable: asked again next iteration
    asyncio.run(web.search(request(2)))
    assert len(broken.asked) == 2


def test_snowballing_follows_accepted_papers_within_the_budget():
    refs = {"W2": [paper(20, found_by=None), paper(22, found_by=None), paper(24, found_by=None)]}
    source = SnowballSource("openalex", [[paper(2)]], refs=refs)
    web = WebSearch(settings(snowball_max=2), FunctionLLM(scores_by_number()), [source], Downloads())
    first = asyncio.run(web.search(request(1)))
    assert [c.key for c in first.candidates] == ["doi:10.1/2"]
    second = asyncio.run(web.search(request(2)))
    assert source.snowballed == [("references", "W2", 2)]  # budget used up by references
    assert [c.key for c in second.candidates] == ["doi:10.1/20", "doi:10.1/22"]
    assert all(c.found_by == "snowball:references:W2" for c in second.candidates)


def test_a_model_that_fails_every_score_still_keeps_the_top_ranked():
    web = WebSearch(settings(fallback_keep=2), FunctionLLM(lambda m, s: "garbage"),
                    [PagedSource("openalex", [[paper(i) for i in (2, 4, 6)]])], Downloads())
    res = asyncio.run(web.search(request(1)))
    assert [c.key for c in res.candidates] == ["doi:10.1/2", "doi:10.1/4"]


def test_title_lookup_is_asked_once():
    class Lookup(PagedSource):
        kinds = frozenset({"keywords", "title"})

        def lookup_title(self, title: str, query: SearchQuery | None = None) -> list[Candidate]:
            self.asked.append(("title", title))
            assert query is not None and query.text == title  # the approved string, with its filters
            return [paper(2, found_by=title)]

    source = Lookup("openalex", [])
    q = SearchQuery(text="A fast learning algorithm for deep belief nets", kind="title")
    web = WebSearch(settings(), FunctionLLM(scores_by_number()), [source], Downloads())
    res = asyncio.run(web.search(request(1).model_copy(update={"search_queries": (q,)})))
    assert [c.key for c in res.candidates] == ["doi:10.1/2"]
    asyncio.run(web.search(request(2).model_copy(update={"search_queries": (q,)})))
    assert source.asked == [("title", q.text)]


def test_title_and_author_lookups_go_to_openalex_and_arxiv(loopback_sources):
    """The real OpenAlex and arXiv clients against the loopback: both answer direct lookups, once each."""
    from infra.net import Egress
    from infra.settings import NetSettings, SearchSettings
    from infra.sources.arxiv_source import ArxivSource
    from infra.sources.openalex import OpenAlexSource

    srv = loopback_sources
    net = NetSettings(timeout_s=5, retries=0)
    search = SearchSettings(openalex_url=srv.openalex_url, arxiv_url=srv.arxiv_url, arxiv_delay_s=0.0, per_query=10)
    egress = Egress(net)
    sources = [OpenAlexSource(search, net, egress), ArxivSource(search, net, egress)]
    arxiv_title = "Testing Deep Learning Models: A First Comparative Study of Multiple Testing Techniques"
    queries = (SearchQuery(text=arxiv_title, kind="title"),
               SearchQuery(text="Andrea Arcuri", kind="author", year_from=2024))
    emit = RecordingEmit()
    web = WebSearch(settings(per_query=10), FunctionLLM(lambda m, s: {"scores": [
        {"paper": int(i), "score": 4, "reason": "r"} for i in re.findall(r"^\[(\d+)\]", m[-1]["content"], re.M)]}),
                    sources, None, emit=emit)
    res = asyncio.run(web.search(request(1).model_copy(update={"search_queries": queries, "max_results": 10})))
    asked = [(r.path, r.param("search_query") or r.param("filter")) for r in srv.received()]
    assert asked == [("/works", f"title.search:{arxiv_title}"), ("/api/query", f'ti:"{arxiv_title.replace(":", "")}"'),
                     ("/works", 'raw_author_name.search:"Andrea Arcuri"~1,publication_year:>2023'),
                     ("/api/query", 'au:"Andrea Arcuri"')]
    found = {(c.source, c.title) for c in res.candidates}
    assert ("arxiv", arxiv_title) in found
    assert ("arxiv", "A Survey on Web Testing: On the Rise of AI and Applications in Industry") in found
    assert [e.payload["found"] for e in emit.events if e.kind == "source_results"] == [
        0, 1, 0, 1]  # OpenAlex knows neither here; arXiv answers both
    # a lookup is answered once: the next iteration asks nothing
    asyncio.run(web.search(request(2).model_copy(update={"search_queries": queries})))
    assert len(srv.received()) == 4
