"""`forage research "QUERY" --yes` against loopback OpenAlex, arXiv, PDF hosts, Zotero and Ollama.

What a researcher runs, end to end: the CLI derives requirements and search strings through the real
Ollama client (a loopback server answering from the test brain), auto-approves them, and the Ray actors
search the real pyalex/arxiv client paths against a server replaying recorded real responses, screen the
candidates in batches, download PDFs from hosts that misbehave on purpose (429 with Retry-After, HTML
instead of a PDF, a redirect chain, a truncated PDF, a hang, a 500), ingest what they got (and the
abstracts of what they did not), forage, write the report, file the papers in (loopback) Zotero, and
record every outbound request in egress.jsonl. The query carries a canary phrase that must never leave.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.ray, pytest.mark.slow]

CANARY = "zebra-canary-7f3a"
QUERY = (f"My unpublished idea {CANARY}: anticoagulation after trauma, JIT compilers, and open relation "
         "extraction, in the last 15 years")
ACCEPT = {  # OpenAlex id or arXiv id → how its PDF is served
    "W2068311567": ["/flaky429/1/dvt_prophylaxis_trauma_bmc2010.pdf"],  # 429 + Retry-After, then the PDF
    "W2897157249": ["/html/tracemonkey_pldi2009.pdf", "/redirect/2/tracemonkey_pldi2009.pdf"],  # HTML, then redirects
    "W789391616": ["/truncated/reverb_openie_emnlp2011.pdf"],  # truncated; other locations 404 → abstract only
    "W4206064211": ["/hang/phrase_generation_acl2014.pdf"],  # hangs → timeout → abstract only
    "W3212676313": ["/status/500", "/pdf/reverb_openie_emnlp2011.pdf"],  # 500 (retried), then the next location
}
ARXIV_ID = "2202.12139"
ACCEPTED_TITLES = ("Redefining climate regions", "Use of a Machine Learning Algorithm to Predict",
                   "Beyond the number of classes", "Mathematical modeling and machine learning",
                   "Crowdsourcing for Machine Learning in Public Health Surveillance")
SEARCHES = [["anticoagulant prophylaxis", "venous thrombosis", "injury"],
            ["just-in-time compilers", "type specialization", "dynamic languages"],
            ["relation phrases", "open information extraction"]]


def responder(brain_module):
    """Answers /api/chat like a model would, from the schema Ollama was asked for (its JSON-schema title)."""

    def answer(messages, fmt):
        name = (fmt or {}).get("title", "")
        user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        if name == "SearchTermsAnswer":
            return {"searches": [{"keywords": kw, "requirement": f"R{i}"} for i, kw in enumerate(SEARCHES, 1)],
                    "year_from": 1990}
        if name == "PaperScores":
            listed = re.findall(r"^\[(\d+)\] (.*)$", user, re.M)
            return {"scores": [{"paper": int(n), "score": 5 if any(t in title for t in ACCEPTED_TITLES)
                                or "Testing Deep Learning Models" in title else 1, "reason": "screened"}
                               for n, title in listed]}
        return asyncio.run(brain_module.brain(messages, type(name, (), {})))

    return answer


@pytest.fixture(scope="module")
def online_run(ray_cluster, shared_data, tmp_path_factory):
    from gateway.cli import app
    from tests.e2e import brain as brain_module
    from tests.loopback_ollama import LoopbackOllama
    from tests.loopback_sources import LoopbackSources
    from tests.loopback_zotero import LoopbackZotero

    tmp = tmp_path_factory.mktemp("online")
    with LoopbackSources(shared_data, hang_limit_s=20) as src, \
            LoopbackZotero(shared_data / "api-fixtures" / "zotero") as zot, \
            LoopbackOllama(responder=responder(brain_module)) as llm:
        src.localize_pdfs = True
        src.pdf_map = {wid: [src.url(p) for p in paths] for wid, paths in ACCEPT.items()}
        src.arxiv_pdfs[ARXIV_ID] = "novelty_paraphrase_arxiv2202.00535v1.pdf"
        src.fail_next("/works", 503, times=1)  # OpenAlex's first answer is a 503: retried
        env = {
            "FORAGE_NET__OFFLINE": "false", "FORAGE_NET__BACKOFF_S": "0.05", "FORAGE_NET__RETRIES": "2",
            "FORAGE_NET__DOWNLOAD_TIMEOUT_S": "4", "FORAGE_NET__TIMEOUT_S": "10",
            "FORAGE_SEARCH__OPENALEX_URL": src.openalex_url, "FORAGE_SEARCH__ARXIV_URL": src.arxiv_url,
            "FORAGE_SEARCH__ARXIV_PDF_URL": src.url("/pdf/"), "FORAGE_SEARCH__ARXIV_DELAY_S": "0",
            "FORAGE_SEARCH__PER_QUERY": "10", "FORAGE_SEARCH__BATCH_SIZE": "10",
            "FORAGE_SEARCH__PAPERS_DIR": str(tmp / "papers"),
            "FORAGE_RUN__MAX_ITERATIONS": "2", "FORAGE_LLM__HOST": llm.url,
            "FORAGE_ZOTERO__LIBRARY_ID": zot.library_id, "FORAGE_ZOTERO__API_KEY": zot.api_key,
            "FORAGE_ZOTERO__ENDPOINT": zot.url,
        }
        result = CliRunner().invoke(app, ["research", QUERY, "--yes", "--llm", "ollama", "--zotero",
                                          "--mailto", "researcher@example.org", "--runs-dir", str(tmp / "runs"),
                                          "--store", str(tmp / "store")], env=env)
        run_dir = next((tmp / "runs").iterdir(), None)
        yield result, run_dir, src, zot, llm


def test_the_command_finishes_with_a_report(online_run):
    result, run_dir, *_ = online_run
    assert result.exit_code == 0, result.output
    assert "Search strings sent to the online databases" in result.output
    report = (run_dir / "report.md").read_text()
    assert "## Sources" in report or "Sources" in report
    state = json.loads((run_dir / "run.json").read_text())
    assert state["status"] == "finished"
    assert [q["text"] for q in state["search_queries"]] == [
        "anticoagulant prophylaxis venous thrombosis injury", "just-in-time compilers type specialization "
        "dynamic languages", "relation phrases open information extraction"]


def test_papers_are_acquired_with_fallbacks_and_the_rest_go_on_from_abstracts(online_run):
    _, run_dir, *_ = online_run
    state = json.loads((run_dir / "run.json").read_text())
    docs, acquired = state["documents"], state["acquisition"]
    assert all(d["status"] in ("stored", "skipped") for d in docs.values()), docs
    by_work = {a["openalex_id"] or a["arxiv_id"]: (key, a) for key, a in acquired.items()}
    pdf = {w for w, (k, a) in by_work.items() if not a["abstract_only"] and docs[k]["parser"] != "text"}
    text = {w for w, (k, a) in by_work.items() if a["abstract_only"] and docs[k]["flags"] == ["abstract_only"]}
    # 429 then the PDF; HTML then the redirect chain; 500 (retried) then the next location; arXiv's PDF
    assert pdf == {"W2068311567", "W2897157249", "W3212676313", ARXIV_ID}
    # a truncated PDF and a hanging host: their abstracts are ingested instead (and the preprint record of
    # W3212676313, which OpenAlex lists separately and has no PDF here)
    assert text >= {"W789391616", "W4206064211"}
    reasons = " ".join(r for _, a in by_work.values() for r in a["download_failures"])
    for expected in ("not a PDF (text/html", "truncated PDF", "timed out", "HTTP 500 after 3 tries"):
        assert expected in reasons, reasons


def test_duplicates_are_screened_and_downloaded_once(online_run):
    _, run_dir, src, *_ = online_run
    pdf_gets = [r.path for r in src.received() if r.path.startswith(("/pdf/", "/redirect/", "/flaky429/"))]
    assert pdf_gets.count("/pdf/tracemonkey_pldi2009.pdf") == 1
    assert pdf_gets.count(f"/pdf/{ARXIV_ID}") == 1


def test_papers_are_filed_in_the_runs_zotero_collection(online_run):
    _, run_dir, _, zot, _ = online_run
    coll = zot.collection_named(f"Forage {run_dir.name}")
    assert coll is not None
    items = [i for i in zot.in_collection(coll["key"]) if i["data"]["itemType"] != "attachment"]
    acquired = json.loads((run_dir / "run.json").read_text())["acquisition"]
    assert sorted(i["data"]["title"] for i in items) == sorted(a["title"] for a in acquired.values())
    assert {i["data"].get("DOI", "").lower() for i in items} == {a["doi"] for a in acquired.values()}


def test_the_egress_ledger_holds_every_request_and_only_approved_strings(online_run):
    _, run_dir, src, zot, _ = online_run
    from infra.net import EgressLedger

    records = EgressLedger.read(run_dir / "egress.jsonl")
    assert {r.purpose for r in records} >= {"openalex", "arxiv", "download", "zotero"}
    assert {r.host for r in records} == {"127.0.0.1"}
    # the servers saw exactly what the ledger lists (every request went through the one HTTP layer)
    assert len([r for r in records if r.purpose in ("openalex", "arxiv", "download")]) == len(src.received())
    state = json.loads((run_dir / "run.json").read_text())
    approved = {q["text"] for q in state["search_queries"]}
    approved_words = {w for t in approved for w in t.split()}
    for r in records:
        blob = f"{r.path}?{r.query}"
        assert CANARY not in blob and "unpublished" not in blob
        params = parse_qs(r.query)
        if r.purpose == "openalex" and "search" in params:
            assert params["search"][0] in approved
            assert params["mailto"] == ["researcher@example.org"]
        if r.purpose == "arxiv" and "search_query" in params:
            words = re.findall(r"all:(\S+)", params["search_query"][0])
            assert words and set(words) <= approved_words
    # nothing derived from the query reached the model server's neighbours: the canary only went to the LLM.
    # The servers' own records are checked whole — path, query string, headers and body of every request —
    # so a leak outside the URL (a Zotero item's fields, a header) is caught too.
    received = src.received() + zot.requests
    assert any(r.body for r in zot.requests)  # bodies are recorded (the Zotero writes), so the check can fail
    for r in received:
        seen = r.text()
        assert CANARY not in seen, f"{r.method} {r.path} carried the canary"
        assert CANARY.replace("-", " ") not in seen and CANARY.replace("-", "+") not in seen
        assert "unpublished" not in f"{r.path}?{r.raw_query}"
