"""PDF acquisition against a loopback server that serves real PDFs and misbehaves on purpose.

Every misbehaviour gives a recorded reason and the next location is tried; a paper with no usable
location comes back abstract_only with its reasons.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from infra.net import Egress, OfflineError
from infra.settings import NetSettings
from infra.sources.download import Downloader
from messages.search import Candidate
from tests.loopback_sources import loopback_sources  # noqa: F401  (fixture)

PDF = "vespa_peerjcs2017.pdf"
SMALL = "bosonic_dark_matter_arxiv0908.0054.pdf"  # 180 kB
FAST = NetSettings(timeout_s=5, retries=2, backoff_s=0.01, max_backoff_s=5, download_timeout_s=5)


def _cand(n: int = 1, urls: tuple[str, ...] = (), **kw) -> Candidate:
    return Candidate(key=f"doi:10.1/{n}", source="openalex", doi=f"10.1/{n}", title=f"Paper {n}",
                     pdf_urls=urls, **kw)


def _fetch(srv, tmp_path, cands, net: NetSettings = FAST):
    egress = Egress(net)
    dl = Downloader(net, egress, tmp_path / "papers", arxiv_pdf_base=srv.url("/pdf/"))
    return asyncio.run(dl.fetch(cands)), egress, dl


def test_a_real_pdf_is_saved_by_hash_and_indexed(loopback_sources, tmp_path, shared_data):
    srv = loopback_sources
    [got], egress, dl = _fetch(srv, tmp_path, [_cand(urls=(srv.url(f"/pdf/{PDF}"),), arxiv_id="2101.00001")])
    data = (shared_data / "pdfs" / PDF).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    assert got.ok and got.sha256 == sha and not got.reused and got.url == srv.url(f"/pdf/{PDF}")
    assert got.candidate.path == str(tmp_path / "papers" / f"{sha}.pdf")
    assert (tmp_path / "papers" / f"{sha}.pdf").read_bytes() == data
    assert not got.candidate.abstract_only and got.candidate.download_failures == ()
    index = json.loads((tmp_path / "papers" / "index.json").read_text())
    assert index["doi:10.1/1"]["sha256"] == sha and index["arxiv:2101.00001"]["file"] == f"{sha}.pdf"
    assert [(r.purpose, r.path, r.status) for r in egress.ledger] == [("download", f"/pdf/{PDF}", 200)]
    assert sorted(p.name for p in (tmp_path / "papers").iterdir()) == [f"{sha}.pdf", "index.json"]


def test_each_bad_location_is_recorded_and_the_next_is_tried(loopback_sources, tmp_path, shared_data):
    srv = loopback_sources
    bad = {
        "html": srv.url(f"/html/{PDF}"),
        "truncated": srv.url(f"/truncated/{PDF}"),
        "redirects": srv.url(f"/redirect/8/{PDF}"),
        "oversized": srv.url(f"/oversized/{PDF}"),
        "declared": srv.url(f"/oversized-declared/{PDF}"),
        "missing": srv.url("/status/404"),
    }
    net = FAST.model_copy(update={"max_pdf_bytes": 500_000})
    [got], egress, _ = _fetch(srv, tmp_path, [_cand(urls=(*bad.values(), srv.url(f"/pdf/{SMALL}")))], net)
    assert got.ok and got.url == srv.url(f"/pdf/{SMALL}")
    reasons = dict(f.split(": ", 1) for f in got.candidate.download_failures)
    assert list(reasons) == list(bad.values())
    assert reasons[bad["html"]].startswith("not a PDF (text/html")
    assert reasons[bad["truncated"]].startswith("truncated PDF (no %%EOF")
    assert reasons[bad["redirects"]] == "too many redirects (more than 5)"
    assert reasons[bad["oversized"]] == "too large (more than 500000 bytes)"
    size = (shared_data / "pdfs" / PDF).stat().st_size
    assert reasons[bad["declared"]] == f"too large ({size} bytes > 500000)"
    assert reasons[bad["missing"]] == "HTTP 404"
    # nothing half-written is left behind, and bad locations were not retried
    assert [p.suffix for p in (tmp_path / "papers").iterdir() if p.name != "index.json"] == [".pdf"]
    assert len(srv.received("/html")) == len(srv.received("/truncated")) == len(srv.received("/status/404")) == 1


def test_a_short_redirect_chain_is_followed_and_every_hop_is_in_the_ledger(loopback_sources, tmp_path):
    srv = loopback_sources
    [got], egress, _ = _fetch(srv, tmp_path, [_cand(urls=(srv.url(f"/redirect/3/{SMALL}"),))])
    assert got.ok
    assert [(r.path, r.status) for r in egress.ledger] == [
        (f"/redirect/3/{SMALL}", 302), (f"/redirect/2/{SMALL}", 302), (f"/redirect/1/{SMALL}", 302),
        (f"/pdf/{SMALL}", 200)]


def test_429_retry_after_is_honoured_then_the_pdf_comes(loopback_sources, tmp_path):
    srv = loopback_sources
    [got], egress, _ = _fetch(srv, tmp_path, [_cand(urls=(srv.url(f"/flaky429/1/{SMALL}?after=1"),))])
    assert got.ok and got.candidate.download_failures == ()
    first, second = srv.received("/flaky429")
    assert second.at - first.at >= 0.95
    assert [r.status for r in egress.ledger] == [429, 200]


def test_retry_after_is_capped(loopback_sources, tmp_path):
    srv = loopback_sources
    net = FAST.model_copy(update={"max_backoff_s": 0.05})
    [got], _, _ = _fetch(srv, tmp_path, [_cand(urls=(srv.url(f"/flaky429/2/{SMALL}?after=3600"),))], net)
    assert got.ok
    reqs = srv.received("/flaky429")
    assert len(reqs) == 3 and reqs[-1].at - reqs[0].at < 3


def test_500_then_success_and_always_500_falls_through(loopback_sources, tmp_path):
    srv = loopback_sources
    always, flaky = srv.url("/status/500"), srv.url(f"/flaky500/2/{SMALL}")
    [got], _, _ = _fetch(srv, tmp_path, [_cand(urls=(always, flaky))])
    assert got.ok and got.url == flaky
    assert got.candidate.download_failures == (f"{always}: HTTP 500 after 3 tries",)
    assert len(srv.received("/status/500")) == 3 and len(srv.received("/flaky500")) == 3


def test_hang_and_trickle_are_abandoned_by_the_download_timeout(loopback_sources, tmp_path):
    srv = loopback_sources
    hang, trickle = srv.url(f"/hang/{PDF}"), srv.url(f"/trickle/{PDF}")
    net = FAST.model_copy(update={"download_timeout_s": 0.5, "timeout_s": 5})
    [got], _, _ = _fetch(srv, tmp_path, [_cand(urls=(hang, trickle, srv.url(f"/pdf/{SMALL}")))], net)
    assert got.ok
    assert got.candidate.download_failures == (f"{hang}: timed out (no complete PDF within 0.5s)",
                                               f"{trickle}: timed out (no complete PDF within 0.5s)")


def test_no_usable_location_gives_abstract_only_with_reasons(loopback_sources, tmp_path):
    srv = loopback_sources
    urls = (srv.url(f"/html/{PDF}"), srv.url("/status/403"))
    nothing = _cand(2, abstract="what the paper says")
    [a, b], _, _ = _fetch(srv, tmp_path, [_cand(1, urls=urls), nothing])
    assert not a.ok and a.candidate.abstract_only and a.candidate.path is None
    assert [f.split(": ", 1)[0] for f in a.candidate.download_failures] == list(urls)
    assert b.candidate.abstract_only and b.candidate.download_failures == ("no open-access PDF location",)
    assert b.candidate.abstract == "what the paper says"


def test_arxiv_pdf_is_the_last_fallback(loopback_sources, tmp_path):
    srv = loopback_sources
    srv.arxiv_pdfs["2202.00535"] = "novelty_paraphrase_arxiv2202.00535v1.pdf"
    c = _cand(urls=(srv.url(f"/html/{PDF}"),), arxiv_id="2202.00535v1")
    [got], _, dl = _fetch(srv, tmp_path, [c])
    assert dl.locations(c) == [srv.url(f"/html/{PDF}"), srv.url("/pdf/2202.00535")]
    assert got.ok and got.url == srv.url("/pdf/2202.00535")


def test_a_paper_already_downloaded_is_not_downloaded_again(loopback_sources, tmp_path):
    srv = loopback_sources
    first = _cand(urls=(srv.url(f"/pdf/{SMALL}"),), arxiv_id="0908.0054")
    [got], _, _ = _fetch(srv, tmp_path, [first])
    # found again later by arXiv only (another key of the same paper), with another location
    again = Candidate(key="arxiv:0908.0054", source="arxiv", arxiv_id="0908.0054", title="Paper",
                      pdf_urls=(srv.url(f"/pdf/{PDF}"),))
    [second], egress, dl = _fetch(srv, tmp_path, [again])
    assert second.reused and second.candidate.path == got.candidate.path and second.sha256 == got.sha256
    assert len(egress.ledger) == 0 and len(srv.received("/pdf")) == 1
    assert dl.known(again) == tmp_path / "papers" / f"{got.sha256}.pdf"


@pytest.mark.parametrize(("per_host", "downloads", "expected"), [(2, 6, 2), (6, 3, 3)])
def test_concurrency_is_bounded_per_host_and_in_all(loopback_sources, tmp_path, per_host, downloads, expected):
    srv = loopback_sources
    net = FAST.model_copy(update={"per_host": per_host, "downloads": downloads})
    cands = [_cand(i, urls=(srv.url(f"/pdf/{SMALL}?delay=0.3&n={i}"),)) for i in range(6)]
    got, _, _ = _fetch(srv, tmp_path, cands, net)
    assert all(a.ok for a in got) and [a.candidate.key for a in got] == [c.key for c in cands]
    assert srv.max_in_flight == expected


def test_one_downloader_serves_several_event_loops(loopback_sources, tmp_path):
    """The research step may call fetch once per iteration, each time under a new asyncio.run."""
    srv = loopback_sources
    net = FAST.model_copy(update={"per_host": 1})
    dl = Downloader(net, Egress(net), tmp_path / "papers", arxiv_pdf_base=srv.url("/pdf/"))
    for batch in range(2):
        cands = [_cand(10 * batch + i, urls=(srv.url(f"/pdf/{SMALL}?delay=0.05&n={batch}{i}"),)) for i in range(3)]
        assert all(a.ok for a in asyncio.run(dl.fetch(cands)))
    assert srv.max_in_flight == 1


def test_offline_downloads_nothing(loopback_sources, tmp_path):
    srv = loopback_sources
    with pytest.raises(OfflineError):
        _fetch(srv, tmp_path, [_cand(urls=(srv.url(f"/pdf/{PDF}"),))], NetSettings(offline=True))
    assert srv.requests == []


def test_openalex_results_rewritten_to_loopback_pdfs_are_acquired(loopback_sources, tmp_path):
    """The path the research step takes: OpenAlex search → Deduper → Downloader, all on loopback."""
    from infra.settings import SearchSettings
    from infra.sources.keys import Deduper
    from infra.sources.openalex import OpenAlexSource
    from messages.plan import SearchQuery

    srv = loopback_sources
    srv.localize_pdfs = True  # every recorded external PDF location becomes a loopback 404
    srv.pdf_map["W789391616"] = [srv.url(f"/html/{PDF}"), srv.url(f"/pdf/{SMALL}")]
    egress = Egress(FAST)
    oa = OpenAlexSource(SearchSettings(openalex_url=srv.openalex_url, per_query=50), FAST, egress)
    found = Deduper().add(oa.search(SearchQuery(text="latent class analysis"), limit=50))
    assert all(u.startswith(srv.base_url) for c in found for u in c.pdf_urls)
    target = next(c for c in found if c.openalex_id == "W789391616")
    other = next(c for c in found if c.pdf_urls and c.openalex_id != "W789391616")
    dl = Downloader(FAST, egress, tmp_path / "papers", arxiv_pdf_base=srv.url("/pdf/"))
    got, lost = asyncio.run(dl.fetch([target, other]))
    assert got.ok and got.url == srv.url(f"/pdf/{SMALL}")
    assert got.candidate.download_failures[0].startswith(srv.url(f"/html/{PDF}") + ": not a PDF")
    assert lost.candidate.abstract_only and all("HTTP 404" in f for f in lost.candidate.download_failures)
    assert {r.purpose for r in egress.ledger} == {"openalex", "download"}
    assert all(r.host == "127.0.0.1" for r in egress.ledger)
