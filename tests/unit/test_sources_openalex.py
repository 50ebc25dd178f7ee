"""OpenAlex through pyalex-built URLs and the egress layer, against the loopback replay of recorded responses."""

from __future__ import annotations

import copy

import pyalex
import pytest

from infra.errors import SourceError
from infra.net import Egress, OfflineError
from infra.settings import NetSettings, SearchSettings
from infra.sources.openalex import OpenAlexSource, pdf_locations
from messages.plan import SearchQuery
from tests.loopback_sources import loopback_sources  # noqa: F401  (fixture)

FAST = NetSettings(timeout_s=5, retries=2, backoff_s=0.01, max_backoff_s=5)


def _source(srv, net: NetSettings = FAST, **search) -> tuple[OpenAlexSource, Egress]:
    egress = Egress(net)
    settings = SearchSettings(openalex_url=srv.openalex_url, **{"mailto": "me@example.org", **search})
    return OpenAlexSource(settings, net, egress), egress


def test_search_maps_recorded_works_and_sends_only_the_approved_string(loopback_sources):
    srv = loopback_sources
    oa, egress = _source(srv, per_query=25)
    found = oa.search(SearchQuery(text="machine learning AND public health"), limit=25)
    assert len(found) == 25
    recorded = {w["id"].rsplit("/", 1)[-1]: w for w in srv.recorded_search()}
    first = found[0]
    raw = recorded[first.openalex_id]
    assert first.key == "doi:10.4081/gh.2014.294" and first.doi == "10.4081/gh.2014.294"
    assert first.source == "openalex" and first.found_by == "machine learning AND public health"
    assert first.year == raw["publication_year"] and first.title == raw["display_name"]
    assert first.abstract == pyalex.Work(raw)["abstract"] and first.abstract.startswith("Existing climate")
    assert first.authors == tuple(a["author"]["display_name"] for a in raw["authorships"])
    assert first.venue == "Geospatial Health"
    assert first.pdf_urls == ("https://www.geospatialhealth.net/index.php/gh/article/download/294/291",)
    oberski = next(c for c in found if c.openalex_id == "W789391616")
    assert oberski.pdf_urls == (
        "https://link.springer.com/content/pdf/10.1007/s11634-015-0211-0.pdf",
        "https://research.tilburguniversity.edu/files/7594386/MTO_Oberski_beyond_the_number_AiDAaC_2015.pdf",
        "https://dspace.library.uu.nl/bitstream/handle/1874/342234/Beyond.pdf?sequence=1&isAllowed=y",
        "https://pure.uvt.nl/ws/files/7594386/MTO_Oberski_beyond_the_number_AiDAaC_2015.pdf")
    # one request, to the configured base (not api.openalex.org), with the polite-pool mailto
    [req] = srv.received("/works")
    assert req.param("search") == "machine learning AND public health"
    assert req.param("mailto") == "me@example.org" and req.param("cursor") == "*" and req.param("per-page") == "25"
    assert req.param("filter") == "has_abstract:true"
    [rec] = egress.ledger.records()
    assert (rec.purpose, rec.host, rec.path, rec.status) == ("openalex", "127.0.0.1", "/works", 200)
    assert "search=machine+learning+AND+public+health" in rec.query


def test_arxiv_id_comes_from_locations_or_the_datacite_doi(loopback_sources):
    oa, _ = _source(loopback_sources, per_query=50)
    found = {c.openalex_id: c for c in oa.search(SearchQuery(text="anything"), limit=50)}
    assert found["W4385568269"].arxiv_id == "2306.14003"  # an arxiv.org location
    assert found["W4385568269"].key == "doi:10.1145/3580305.3599544"
    assert found["W4365441044"].arxiv_id == "2304.04761"  # DOI 10.48550/arxiv.2304.04761
    assert found["W4365441044"].doi == "10.48550/arxiv.2304.04761"


def test_pdf_locations_order_best_then_locations_then_oa_url(loopback_sources):
    work = loopback_sources.known_work("W789391616")
    work["best_oa_location"] = copy.deepcopy(work["locations"][2])
    work["open_access"]["oa_url"] = "https://oa.example.org/only-here.pdf"
    assert pdf_locations(work) == (
        "https://dspace.library.uu.nl/bitstream/handle/1874/342234/Beyond.pdf?sequence=1&isAllowed=y",
        "https://link.springer.com/content/pdf/10.1007/s11634-015-0211-0.pdf",
        "https://research.tilburguniversity.edu/files/7594386/MTO_Oberski_beyond_the_number_AiDAaC_2015.pdf",
        "https://pure.uvt.nl/ws/files/7594386/MTO_Oberski_beyond_the_number_AiDAaC_2015.pdf",
        "https://oa.example.org/only-here.pdf")


def test_cursor_paging_resumes_across_iterations(loopback_sources):
    srv = loopback_sources
    oa, _ = _source(srv, per_query=10)
    q = SearchQuery(text="machine learning AND public health")
    first = oa.search(q, limit=15)
    second = oa.search(q, limit=15)
    assert len(first) == len(second) == 15
    assert not {c.key for c in first} & {c.key for c in second}
    assert [r.param("cursor") for r in srv.received("/works")] == ["*", "offset-10", "offset-20"]
    rest = oa.search(q, limit=100)
    total = len([w for w in srv.recorded_search() if w.get("abstract_inverted_index") is not None])
    assert len(first) + len(second) + len(rest) == total
    assert oa.exhausted(q)
    before = len(srv.requests)
    assert oa.search(q, limit=10) == [] and len(srv.requests) == before  # nothing more is asked


def test_filters_years_and_open_access(loopback_sources):
    srv = loopback_sources
    oa, _ = _source(srv, per_query=50)
    q = SearchQuery(text="machine learning AND public health", year_from=2019, year_to=2022, open_access=True)
    found = oa.search(q, limit=50)
    assert found and all(2019 <= c.year <= 2022 for c in found)
    assert srv.received("/works")[-1].param("filter") == "publication_year:2019-2022,is_oa:true,has_abstract:true"
    expected = [w for w in srv.recorded_search() if 2019 <= w["publication_year"] <= 2022
                and w["open_access"]["is_oa"] and w.get("abstract_inverted_index") is not None]
    assert len(found) == len(expected)
    since = oa.search(SearchQuery(text="ml", year_from=2023), limit=50)
    assert since and all(c.year >= 2023 for c in since)
    assert srv.received("/works")[-1].param("filter") == "publication_year:>2022,has_abstract:true"


def test_title_and_author_lookup(loopback_sources):
    srv = loopback_sources
    oa, _ = _source(srv)
    title = "PaperQA: Retrieval-Augmented Generative Agent for Scientific Research"
    [paper] = oa.search(SearchQuery(text=title, kind="title"))
    assert paper.title == title and paper.arxiv_id == "2312.07559" and paper.found_by == title
    assert srv.received("/works")[-1].param("filter") == f"title.search:{title}"
    oa.lookup_title("Beyond the number of classes, separating | dependence")
    assert srv.received("/works")[-1].param("filter") == "title.search:Beyond the number of classes separating dependence"
    by_author = oa.lookup_author("Daniel L. Oberski")
    assert [c.openalex_id for c in by_author] == ["W789391616"]
    # the name as one quoted phrase (one byline), a middle initial let in
    assert srv.received("/works")[-1].param("filter") == 'raw_author_name.search:"Daniel L. Oberski"~1'


def test_authors_venue_and_pdf_filters_are_sent_and_honoured(loopback_sources):
    srv = loopback_sources
    oa, egress = _source(srv, per_query=50)
    recorded = [w for w in srv.recorded_search() if w.get("abstract_inverted_index") is not None]
    # authors: any of the names, each matched within one byline
    q = SearchQuery(text="machine learning public health", authors=("Wendy Thompson", "Joon Lee"))
    found = oa.search(q, limit=50)
    assert srv.received("/works")[-1].param("filter") == (
        'raw_author_name.search:"Wendy Thompson"~1 OR "Joon Lee"~1,has_abstract:true')
    names = {w["id"].rsplit("/", 1)[-1]: {a.get("raw_author_name") for a in w["authorships"]} for w in recorded}
    expected = {wid for wid, n in names.items() if n & {"Wendy Thompson", "Joon Lee"}}
    assert expected and {c.openalex_id for c in found} == expected
    # has a PDF: OpenAlex's has_pdf_url
    with_pdf = oa.search(SearchQuery(text="machine learning public health", has_pdf=True), limit=50)
    assert srv.received("/works")[-1].param("filter") == "has_pdf_url:true,has_abstract:true"
    assert with_pdf and len(with_pdf) < len(recorded) and all(c.pdf_urls for c in with_pdf)
    # venue: the name is looked up among OpenAlex's sources, then the works are filtered by their ids
    venue = "Journal of Medical Internet Research"
    in_venue = oa.search(SearchQuery(text="machine learning public health", venue=venue), limit=50)
    lookup, works = srv.received()[-2:]
    assert lookup.path == "/sources" and lookup.param("search") == venue
    source_ids = {(w["primary_location"]["source"] or {}).get("id", "").rsplit("/", 1)[-1] for w in recorded
                  if "Journal of medical internet research" in ((w.get("primary_location") or {}).get("source")
                                                               or {}).get("display_name", "")}
    assert works.param("filter") == f"primary_location.source.id:{'|'.join(sorted(source_ids))},has_abstract:true"
    assert in_venue and {c.venue for c in in_venue} == {
        "JMIR. Journal of medical internet research/Journal of medical internet research"}
    oa.search(SearchQuery(text="other words", venue=venue), limit=5)
    assert len(srv.received("/sources")) == 1  # a venue's sources are looked up once
    # a venue OpenAlex does not know matches nothing: no works request is made
    before = len(srv.received("/works"))
    q = SearchQuery(text="machine learning public health", venue="Annals of Imaginary Results")
    assert oa.search(q, limit=5) == [] and oa.exhausted(q)
    assert len(srv.received("/works")) == before
    # only the approved string and its filters went out
    assert all(r.purpose == "openalex" for r in egress.ledger)


def test_snowballing_references_and_citing_works(loopback_sources):
    srv = loopback_sources
    recorded = srv.recorded_search()
    cited = [w["id"] for w in recorded[1:4]]
    citing = copy.deepcopy(recorded[0])
    citing["id"] = "https://openalex.org/W999000001"
    citing["doi"] = None
    citing["referenced_works"] = [*cited, "https://openalex.org/W1"]  # W1 is unknown to OpenAlex (loopback)
    srv.add_work(citing)
    oa, _ = _source(srv)
    refs = oa.references("https://openalex.org/W999000001", limit=10)
    assert [c.openalex_id for c in refs] == [c.rsplit("/", 1)[-1] for c in cited]
    assert {c.found_by for c in refs} == {"snowball:W999000001"}
    reqs = srv.received("/works")
    assert reqs[0].path == "/works/W999000001"
    assert reqs[1].param("filter") == "openalex_id:" + "|".join(c.rsplit("/", 1)[-1] for c in cited) + "|W1"
    assert oa.references("W999000001", limit=2) == refs[:2]
    by = oa.cited_by(cited[0], limit=5)
    assert [c.openalex_id for c in by] == ["W999000001"]
    assert srv.received("/works")[-1].param("filter") == f"cites:{cited[0].rsplit('/', 1)[-1]}"
    with pytest.raises(SourceError):
        oa.references("not-an-id", limit=3)


def test_work_by_id_and_unknown_work(loopback_sources):
    oa, _ = _source(loopback_sources)
    assert oa.work("W2068311567").doi == "10.4081/gh.2014.294"
    with pytest.raises(SourceError, match="HTTP 404") as err:
        oa.work("W1")
    assert err.value.retryable is False


def test_429_with_retry_after_is_honoured(loopback_sources):
    srv = loopback_sources
    srv.fail_next("/works", 429, times=1, retry_after="1")
    oa, egress = _source(srv)
    assert len(oa.search(SearchQuery(text="ml"), limit=5)) == 5
    first, second = srv.received("/works")
    assert second.at - first.at >= 0.95  # waited the server's Retry-After, not the 0.01 s backoff
    assert [r.status for r in egress.ledger] == [429, 200]


def test_retry_after_is_capped_and_500s_are_retried(loopback_sources):
    srv = loopback_sources
    srv.fail_next("/works", 429, times=1, retry_after="120")
    srv.fail_next("/works", 500, times=1)
    oa, egress = _source(srv, NetSettings(retries=3, backoff_s=0.01, max_backoff_s=0.05))
    assert len(oa.search(SearchQuery(text="ml"), limit=5)) == 5
    assert [r.status for r in egress.ledger] == [429, 500, 200]
    reqs = srv.received("/works")
    assert reqs[-1].at - reqs[0].at < 5


def test_persistent_500_becomes_a_retryable_source_error(loopback_sources):
    srv = loopback_sources
    srv.fail_next("/works", 503, times=99)
    oa, _ = _source(srv, NetSettings(retries=2, backoff_s=0.01))
    with pytest.raises(SourceError, match="HTTP 503 after 3 tries") as err:
        oa.search(SearchQuery(text="ml"))
    assert err.value.retryable is True and len(srv.received("/works")) == 3


def test_client_error_is_not_retried(loopback_sources):
    srv = loopback_sources
    srv.fail_next("/works", 403, times=1)
    oa, _ = _source(srv)
    with pytest.raises(SourceError, match="HTTP 403") as err:
        oa.search(SearchQuery(text="ml"))
    assert err.value.retryable is False and len(srv.received("/works")) == 1


def test_unreachable_server_is_a_retryable_error():
    from tests.loopback_ollama import closed_loopback_url

    net = NetSettings(retries=1, backoff_s=0.01, timeout_s=2)
    oa = OpenAlexSource(SearchSettings(openalex_url=closed_loopback_url()), net, Egress(net))
    with pytest.raises(SourceError, match="unreachable after 2 tries") as err:
        oa.search(SearchQuery(text="ml"))
    assert err.value.retryable is True


def test_api_key_goes_in_a_header_never_in_the_ledger(loopback_sources):
    srv = loopback_sources
    oa, egress = _source(srv, openalex_api_key="sekrit-key")
    oa.search(SearchQuery(text="ml"), limit=1)
    assert srv.received("/works")[0].headers["authorization"] == "Bearer sekrit-key"
    assert all("sekrit" not in r.query for r in egress.ledger)


def test_offline_sends_nothing(loopback_sources):
    srv = loopback_sources
    oa, egress = _source(srv, NetSettings(offline=True))
    with pytest.raises(OfflineError):
        oa.search(SearchQuery(text="machine learning"))
    with pytest.raises(OfflineError):
        oa.cited_by("W1", limit=3)
    assert srv.requests == []
    assert all(r.error == "refused: offline" and r.query == "" for r in egress.ledger)


def test_the_loopback_records_every_request_whole(loopback_sources):
    """The "this never left" checks read the servers' records: a body (even chunked) and headers are in them."""
    import httpx

    srv = loopback_sources
    with httpx.Client() as client:
        plain = client.post(srv.url("/works"), content=b"secret-phrase-1", headers={"X-Note": "secret-phrase-2"})
        chunked = client.put(srv.url("/anything"), content=iter([b"secret-", b"phrase-3"]))
    assert (plain.status_code, chunked.status_code) == (405, 405)  # only GET is served
    first, second = srv.requests
    assert first.method == "POST" and first.body == b"secret-phrase-1"
    assert "secret-phrase-1" in first.text() and "secret-phrase-2" in first.text()
    assert second.headers.get("transfer-encoding") == "chunked" and "secret-phrase-3" in second.text()
