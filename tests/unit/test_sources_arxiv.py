"""arXiv through the arxiv package's client and the egress layer, against the loopback replay of recorded feeds."""

from __future__ import annotations

import arxiv
import pytest

from infra.errors import SourceError
from infra.net import Egress, OfflineError
from infra.settings import NetSettings, SearchSettings
from infra.sources.arxiv_source import ArxivSource, arxiv_delay, arxiv_query
from messages.plan import SearchQuery
from tests.loopback_sources import Reply, loopback_sources  # noqa: F401  (fixture)

FAST = NetSettings(timeout_s=5, retries=2, backoff_s=0.01)


def _source(srv, net: NetSettings = FAST, **search) -> tuple[ArxivSource, Egress]:
    egress = Egress(net)
    settings = SearchSettings(arxiv_url=srv.arxiv_url, **{"arxiv_delay_s": 0.0, **search})
    return ArxivSource(settings, net, egress), egress


def test_search_maps_the_recorded_feed(loopback_sources):
    srv = loopback_sources
    ax, egress = _source(srv)
    found = ax.search(SearchQuery(text="software testing"), limit=10)
    assert len(found) == 10
    first = found[0]
    assert first.key == "doi:10.1109/icstw55395.2022.00035" and first.arxiv_id == "2202.12139"
    assert first.title == "Testing Deep Learning Models: A First Comparative Study of Multiple Testing Techniques"
    assert first.year == 2022 and first.source == "arxiv" and first.found_by == "software testing"
    assert first.pdf_urls == ("https://arxiv.org/pdf/2202.12139",)
    assert first.landing_url == "https://arxiv.org/abs/2202.12139"
    assert first.authors and first.abstract and "\n" not in first.abstract
    no_doi = next(c for c in found if c.doi is None)
    assert no_doi.key == f"arxiv:{no_doi.arxiv_id}" and "v" not in no_doi.arxiv_id
    [req] = srv.received("/api/query")
    assert req.param("search_query") == "all:software AND all:testing"
    assert (req.param("start"), req.param("max_results")) == ("0", "10")
    [rec] = egress.ledger.records()
    assert (rec.purpose, rec.host, rec.path, rec.status) == ("arxiv", "127.0.0.1", "/api/query", 200)


def test_localized_feed_links_point_at_loopback_pdfs(loopback_sources):
    srv = loopback_sources
    srv.localize_pdfs = True
    ax, _ = _source(srv)
    found = ax.search(SearchQuery(text="software testing"), limit=2)
    assert [c.pdf_urls for c in found] == [(srv.url(f"/pdf/{c.arxiv_id}"),) for c in found]


def test_query_forms():
    assert arxiv_query(SearchQuery(text="graph neural  networks")) == "all:graph AND all:neural AND all:networks"
    assert arxiv_query(SearchQuery(text="Attention (is): all", kind="title")) == 'ti:"Attention is all"'
    assert (arxiv_query(SearchQuery(text="machine learning AND public-health"))
            == "all:machine AND all:learning AND all:public-health")
    assert arxiv_query(SearchQuery(text="Ann Lee", kind="author")) == 'au:"Ann Lee"'
    assert (arxiv_query(SearchQuery(text="graph networks", authors=("Ann Lee", "Bo (AND) Li")))
            == '(all:graph AND all:networks) AND (au:"Ann Lee" OR au:"Bo Li")')
    assert arxiv_query(SearchQuery(text="graphs", authors=("Ann Lee",))) == 'all:graphs AND au:"Ann Lee"'
    assert (arxiv_query(SearchQuery(text="Attention is all", kind="title", authors=("Ann Lee",)))
            == 'ti:"Attention is all" AND au:"Ann Lee"')


def test_title_and_author_lookups(loopback_sources):
    srv = loopback_sources
    ax, _ = _source(srv)
    title = "Testing Deep Learning Models: A First Comparative Study of Multiple Testing Techniques"
    [paper] = ax.lookup_title(title)
    assert paper.arxiv_id == "2202.12139" and paper.title == title and paper.found_by == title
    assert srv.received("/api/query")[-1].param("search_query") == (
        'ti:"Testing Deep Learning Models A First Comparative Study of Multiple Testing Techniques"')
    by = ax.lookup_author("Andrea Arcuri")
    assert [c.title for c in by] == ["A Survey on Web Testing: On the Rise of AI and Applications in Industry"]
    assert srv.received("/api/query")[-1].param("search_query") == 'au:"Andrea Arcuri"'
    # the approved string's filters apply to a lookup too (years, after the fact)
    q = SearchQuery(text="Andrea Arcuri", kind="author", year_to=2020)
    assert ax.lookup_author(q.text, query=q) == []


def test_authors_are_sent_and_the_venue_is_checked_after_the_fact(loopback_sources):
    srv = loopback_sources
    ax, _ = _source(srv)
    by = ax.search(SearchQuery(text="software testing", authors=("Wing Lam", "Alessandro Orso")), limit=10)
    assert sorted(c.title for c in by) == ["Automated Test Generation for REST APIs: No Time to Rest Yet",
                                           "ChatGPT and Software Testing Education: Promises & Perils"]
    assert srv.received("/api/query")[-1].param("search_query") == (
        '(all:software AND all:testing) AND (au:"Wing Lam" OR au:"Alessandro Orso")')
    in_venue = ax.search(SearchQuery(text="software testing", venue="ICSTW"), limit=10)
    assert len(in_venue) == 3 and all("ICSTW" in c.venue for c in in_venue)
    assert "ICSTW" not in srv.received("/api/query")[-1].raw_query  # arXiv has no venue filter: not sent


def test_paging_resumes_across_iterations(loopback_sources):
    srv = loopback_sources
    ax, _ = _source(srv)
    q = SearchQuery(text="software testing")
    pages = [ax.search(q, limit=4) for _ in range(3)]
    assert [len(p) for p in pages] == [4, 4, 2]
    assert len({c.key for p in pages for c in p}) == 10
    assert [r.param("start") for r in srv.received("/api/query")] == ["0", "4", "8"]
    assert ax.exhausted(q)
    assert ax.search(q, limit=4) == [] and len(srv.received("/api/query")) == 3


def test_years_are_filtered_after_the_fact(loopback_sources):
    srv = loopback_sources
    ax, _ = _source(srv)
    found = ax.search(SearchQuery(text="software testing", year_from=2022, year_to=2024), limit=10)
    assert sorted(c.year for c in found) == [2022, 2022, 2023, 2024]
    query = srv.received("/api/query")[0].raw_query
    assert "2022" not in query and "2024" not in query  # arXiv has no year filter: nothing is sent


def test_a_page_with_nothing_in_the_years_reads_on(loopback_sources):
    srv = loopback_sources
    ax, _ = _source(srv)
    q = SearchQuery(text="software testing", year_from=2025)  # recorded years: 2022 2024 2020 2022 | 2023 ...
    first = ax.search(q, limit=4)  # page 1 has no 2025 paper, page 2 (entries 4-7) has one
    assert [c.year for c in first] == [2025] and not ax.exhausted(q)
    assert [r.param("start") for r in srv.received("/api/query")] == ["0", "4"]
    second = ax.search(q, limit=4)  # entries 8-9: one 2025 paper, and the recording ends
    assert [c.year for c in second] == [2025] and ax.exhausted(q)
    assert ax.search(q, limit=4) == [] and len(srv.received("/api/query")) == 3


def test_delay_is_never_below_three_seconds_for_arxiv(loopback_sources):
    assert arxiv_delay(SearchSettings(arxiv_delay_s=0.5)) == 3.0
    assert arxiv_delay(SearchSettings(arxiv_delay_s=5.0)) == 5.0
    assert arxiv_delay(SearchSettings(arxiv_delay_s=0.5, arxiv_url="http://127.0.0.1:9/api/query")) == 0.5
    srv = loopback_sources
    ax, _ = _source(srv, arxiv_delay_s=0.3)
    ax.search(SearchQuery(text="software testing"), limit=2)
    ax.search(SearchQuery(text="software testing"), limit=2)
    first, second = srv.received("/api/query")
    assert second.at - first.at >= 0.28


def test_lookup_by_ids_and_unknown_id(loopback_sources):
    ax, _ = _source(loopback_sources)
    [paper] = ax.by_ids(["arXiv:1605.08386v1"])
    assert (paper.key, paper.title, paper.year) == ("arxiv:1605.08386", "Heat-bath random walks with Markov bases", 2016)
    assert paper.authors == ("Caprice Stanley", "Tobias Windisch") and paper.doi is None
    assert ax.by_ids(["0000.0000"]) == []
    with pytest.raises(SourceError, match="not arXiv ids"):
        ax.by_ids(["abc"])


def test_legacy_feed_parses(loopback_sources):
    ax, _ = _source(loopback_sources)
    found = ax.search(SearchQuery(text="del_maestro checkerboard"), limit=10)
    assert found and all(c.arxiv_id and c.title for c in found)


def test_http_400_error_feed_is_a_clear_non_retryable_error(loopback_sources):
    srv = loopback_sources
    ax, _ = _source(srv)
    with pytest.raises(SourceError, match="HTTP 400") as err:
        ax.run(arxiv.Search(id_list=["abc"]))
    assert err.value.retryable is False
    assert len(srv.received("/api/query")) == 1  # a malformed query is not retried


def test_500_is_retried_then_succeeds_and_persistent_5xx_fails_retryable(loopback_sources):
    srv = loopback_sources
    srv.fail_next("/api/query", 500, times=1)
    ax, egress = _source(srv)
    assert len(ax.search(SearchQuery(text="software testing"), limit=3)) == 3
    assert [r.status for r in egress.ledger] == [500, 200]
    srv.fail_next("/api/query", 503, times=99)
    with pytest.raises(SourceError, match="HTTP 503") as err:
        ax.search(SearchQuery(text="other words"), limit=3)
    assert err.value.retryable is True
    assert len(srv.received("/api/query")) == 2 + FAST.retries + 1


def test_a_hanging_server_is_abandoned_by_the_timeout(loopback_sources):
    srv = loopback_sources
    srv.route("/api/query", lambda s, r: Reply(hang=True))
    ax, egress = _source(srv, NetSettings(timeout_s=0.3, retries=0))
    with pytest.raises(SourceError, match="did not answer") as err:
        ax.search(SearchQuery(text="software testing"))
    assert err.value.retryable is True
    assert egress.ledger.records()[0].error.startswith("ReadTimeout")


def test_a_page_that_is_not_a_feed_is_an_error_not_an_empty_result(loopback_sources):
    srv = loopback_sources
    srv.route("/api/query", lambda s, r: Reply(200, b"<html><body>maintenance</body></html>", "text/html"))
    ax, _ = _source(srv, NetSettings(retries=0))
    with pytest.raises(SourceError, match="not an Atom feed"):
        ax.search(SearchQuery(text="software testing"))


def test_offline_sends_nothing(loopback_sources):
    srv = loopback_sources
    ax, egress = _source(srv, NetSettings(offline=True))
    with pytest.raises(OfflineError):
        ax.search(SearchQuery(text="software testing"))
    assert srv.requests == [] and egress.ledger.records()[0].error == "refused: offline"
