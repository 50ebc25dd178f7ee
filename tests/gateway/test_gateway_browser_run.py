"""The dashboard's run page in a real headless Chromium (Debian's, driven by Playwright), on a finished run made
in-process (tests/finished_run.py: the real Orchestrator and Writer over a LanceStore, a scripted model) and served
by a live gateway that needs its token: the run's own address ``/#run=ID`` opens it (with the token, as a link
`forage serve` prints, after a reload, and from the runs list), a question asked on its page gets a cited
answer that is kept with the run, each source's standing shows where sources are listed, and the New-run form
takes the embedded backend when no model server answers. No Ray: the run is on disk, the answers come from
the scripted model."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.gateway.live import DEMO_LIBRARY, LiveServer

pytestmark = [pytest.mark.slow]

TOKEN = "run-page-token"
QUESTION = "How is carbon dioxide fixed into sugars?"
ANSWER = "The Calvin cycle fixes carbon dioxide into sugars."


def ask_model(messages, schema):
    """The model `forage ask --run` asks: one sentence citing the passage of 'The Calvin Cycle' it is shown."""
    from actors.steps.schemas import AskAnswer

    assert schema is AskAnswer, schema
    n = next(int(line[1:line.index("]")]) for line in messages[-1]["content"].splitlines()
             if line.startswith("[") and "The Calvin Cycle" in line)
    return {"sufficient": True, "sentences": [{"sentence": ANSWER, "sources": [n]}]}


@pytest.fixture(scope="module")
def weighed(tmp_path_factory):
    """A finished run whose papers carry a standing (the fields a search copies from OpenAlex/arXiv,
    messages.search.WEIGHT_FIELDS): C (the Calvin cycle) retracted and the only paper answering R2, so the report
    cites it with its warning; A cited by 138 and free to read (bronze); B a preprint only. Served behind a token."""
    from gateway.server import create_app
    from infra.llm.fakes import FunctionLLM
    from messages.forage import RequirementCoverage
    from tests.finished_run import RUN, make_run
    from tests.leaves import A, B, C, R1, R2, ev
    from tests.loopback_ollama import closed_loopback_url

    weights = {C[0].doc_id: {"is_retracted": True, "cited_by_count": 12, "oa_status": "closed"},
               A[0].doc_id: {"cited_by_count": 138, "oa_status": "bronze"},
               B[0].doc_id: {"preprint_only": True}}
    covs = (RequirementCoverage(run_id=RUN, requirement=R1, iteration=2, coverage=1.0, evidence=(
                ev(A, "answers", "Photosystem II absorbs photons and splits water.", 1),
                ev(B, "interesting", "Sun leaves hold more chlorophyll.", 0))),
            RequirementCoverage(run_id=RUN, requirement=R2, iteration=2, coverage=1.0, evidence=(
                ev(C, "answers", "The Calvin cycle fixes carbon with ATP and NADPH.", 0),)))
    # in a thread of its own: Playwright's sync API runs an event loop in this one, and the run uses asyncio.run
    with ThreadPoolExecutor(1) as pool:
        settings, run_dir = pool.submit(make_run, tmp_path_factory.mktemp("weighed"), weights=weights,
                                        covs=covs).result()
    sources = {s["doc_id"]: s for s in json.loads((run_dir / "run.json").read_text())["sources"]}
    settings = settings.updated(llm={"host": closed_loopback_url()})  # the form asks; nothing listens there
    server = LiveServer(create_app(settings, llm=FunctionLLM(ask_model), token=TOKEN))
    yield server, RUN, run_dir, {"A": sources[A[0].doc_id], "B": sources[B[0].doc_id], "C": sources[C[0].doc_id]}
    server.stop()


def watch(page) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def test_the_run_address_opens_the_run_directly_after_a_reload_and_from_the_runs_list(browser, weighed) -> None:
    from playwright.sync_api import expect

    server, run_id, run_dir, _ = weighed
    query = json.loads((run_dir / "run.json").read_text())["query"]
    page = browser.new_page()
    errors = watch(page)
    page.goto(server.url + f"/#token={TOKEN}&run={run_id}")  # a run's address with the token, opened directly
    expect(page.locator("#run-id")).to_have_text(run_id, timeout=30_000)
    expect(page.locator("#run-status")).to_have_text("finished", timeout=30_000)
    page.wait_for_selector("#report-box:not([hidden])", timeout=30_000)
    assert page.inner_text("#run-title") == query and "Sources Consulted" in page.inner_text("#report")
    assert page.evaluate("location.hash") == f"#run={run_id}"  # the token left the address, the run stayed

    page.reload()  # kept on reload: the same run, without a click
    expect(page.locator("#run-id")).to_have_text(run_id, timeout=30_000)
    page.wait_for_selector("#report-box:not([hidden])", timeout=30_000)
    expect(page.locator("#conn")).to_have_text("run over", timeout=30_000)
    assert page.evaluate("state.runId") == run_id

    # the runs list links to the run's address, and marks the open run
    link = page.locator(f'#runs li[data-run="{run_id}"] a.run-link')
    expect(link).to_have_attribute("href", f"#run={run_id}", timeout=30_000)
    expect(page.locator(f'#runs li.open[data-run="{run_id}"]')).to_have_count(1)

    # a stale address says so in the run's place (a 404), and the run's own address opens it again
    page.goto(server.url + "/#run=20990101-000000-0000000000000000")
    expect(page.locator("#run-error")).to_contain_text("404", timeout=30_000)
    assert page.is_hidden("#report-box")
    link.click()
    expect(page.locator("#run-id")).to_have_text(run_id, timeout=30_000)
    page.wait_for_selector("#report-box:not([hidden])", timeout=30_000)
    assert page.inner_text("#run-error") == "" and page.evaluate("location.hash") == f"#run={run_id}"
    page.go_back()  # Back: the address before, and its page
    expect(page.locator("#run-error")).to_contain_text("404", timeout=30_000)
    assert errors == []
    page.close()


def test_a_question_asked_on_the_run_page_gets_a_cited_answer_kept_with_the_run(browser, weighed) -> None:
    from playwright.sync_api import expect

    server, run_id, run_dir, sources = weighed
    page = browser.new_page()
    errors = watch(page)
    page.goto(server.url + f"/#token={TOKEN}&run={run_id}")
    page.wait_for_selector("#ask-box:not([hidden])", timeout=30_000)
    asked_before = page.locator("#asks li.ask").count()
    page.fill("#ask-question", QUESTION)
    page.click("#ask")
    answers = page.locator("#asks li.ask.answer")
    expect(answers).to_have_count(asked_before + 1, timeout=60_000)
    shown = answers.last
    assert shown.locator(".ask-q").inner_text() == QUESTION
    assert shown.locator(".ask-a").inner_text() == ANSWER.rstrip(".") + " [1]."
    cited = shown.locator(".ask-cited li")
    assert cited.count() == 1 and "The Calvin Cycle" in cited.inner_text()
    # the cited paper is retracted: the answer's citation says so
    expect(cited.locator(".standing .flag.retracted")).to_have_count(1)
    assert "cited by 12" in cited.inner_text()
    cited.locator("a.cite").click()  # the passage it rests on
    page.wait_for_selector("#chunk-view:not([hidden])", timeout=30_000)
    assert "The Calvin Cycle" in page.inner_text("#chunk-title") and page.inner_text("#chunk-text")
    page.click("#chunk-close")

    kept = [json.loads(line) for line in (run_dir / "asks.jsonl").read_text().splitlines()]
    assert kept[-1]["question"] == QUESTION and kept[-1]["kind"] == "answer"
    assert kept[-1]["cited"][0]["doc_id"] == sources["C"]["doc_id"]
    page.reload()  # part of the run's history: listed again on its page
    expect(page.locator("#asks li.ask.answer")).to_have_count(asked_before + 1, timeout=30_000)
    assert page.locator("#asks li.ask.answer .ask-q").last.inner_text() == QUESTION
    assert errors == []
    page.close()


def test_each_source_shows_its_standing_where_sources_are_listed(browser, weighed) -> None:
    from playwright.sync_api import expect

    server, run_id, _, sources = weighed
    a, b, c = sources["A"], sources["B"], sources["C"]
    page = browser.new_page()
    errors = watch(page)
    page.goto(server.url + f"/#token={TOKEN}&run={run_id}")
    page.wait_for_selector("#report-box:not([hidden])", timeout=30_000)
    # Sources Consulted: the retracted entry is marked and flagged; the Writer's words of each standing are there
    entry_c = page.locator(f'#report p.source[data-source="{c["n"]}"]')
    expect(entry_c).to_have_class("source retracted", timeout=30_000)
    assert entry_c.locator(".flag.retracted").count() == 1 and "RETRACTED" in entry_c.inner_text()
    entry_a = page.locator(f'#report p.source[data-source="{a["n"]}"]')
    assert "retracted" not in (entry_a.get_attribute("class") or "").split()
    assert "Cited by 138" in entry_a.inner_text() and "Free to read (bronze)" in entry_a.inner_text()
    assert "Preprint only" in page.locator(f'#report p.source[data-source="{b["n"]}"]').inner_text()
    # every citation of the retracted paper in the report is marked, no other
    marked = page.locator("#report a.cite.retracted")
    assert marked.count() >= 2  # in its section and in Sources
    assert {marked.nth(i).get_attribute("data-n") for i in range(marked.count())} == {str(c["n"])}
    # a citation's passage says what its paper weighs
    page.locator(f'#report a.cite[data-n="{a["n"]}"]').first.click()
    page.wait_for_selector("#chunk-view:not([hidden])", timeout=30_000)
    standing = page.inner_text("#chunk-standing")
    assert "cited by 138" in standing and "free to read (bronze)" in standing and "RETRACTED" not in standing
    page.click("#chunk-close")
    page.locator(f'#report a.cite[data-n="{c["n"]}"]').first.click()
    page.wait_for_selector("#chunk-view:not([hidden])", timeout=30_000)
    assert page.locator("#chunk-standing .flag.retracted").count() == 1
    assert "not open access" in page.inner_text("#chunk-standing")
    assert errors == []
    page.close()


def test_the_new_run_form_takes_the_embedded_backend_when_no_model_server_answers(browser, tmp_path: Path) -> None:
    """Default settings (Ollama) and no Ollama where they look: the form selects the embedded backend and says
    why; with an Ollama that answers, the form keeps the gateway's default. Nothing is started either way."""
    from playwright.sync_api import expect

    from gateway.server import create_app
    from infra.settings import Settings
    from tests.loopback_ollama import LoopbackOllama, closed_loopback_url

    def gateway(host: str, name: str) -> LiveServer:
        settings = Settings.load().updated(run={"runs_dir": tmp_path / name / "runs"},
                                           store={"path": tmp_path / name / "store"},
                                           llm={"backend": "ollama", "host": host})
        return LiveServer(create_app(settings, token=TOKEN, allowed_libraries=[DEMO_LIBRARY]))

    server = gateway(closed_loopback_url(), "none")
    try:
        page = browser.new_page()
        errors = watch(page)
        page.goto(server.url + f"/#token={TOKEN}")
        note = page.locator("#model-note")
        expect(note).to_contain_text("the embedded backend is selected", timeout=30_000)
        assert "not reachable" in note.inner_text()  # why: the Ollama it looked for is not there
        assert page.input_value("#backend") == "embedded"
        assert page.get_attribute("#model", "placeholder") == "default: the embedded model"
        # the researcher's own choice stands, and the placeholder follows it
        page.select_option("#backend", "ollama")
        assert page.get_attribute("#model", "placeholder").startswith("default: ollama ")
        assert errors == []
        page.close()
    finally:
        server.stop()

    with LoopbackOllama(models=("qwen2.5:7b-instruct",)) as ollama:
        server = gateway(ollama.url, "ollama")
        try:
            page = browser.new_page()
            page.goto(server.url + f"/#token={TOKEN}")
            expect(page.locator("#model-note")).to_contain_text("1 model(s) on the Ollama server", timeout=30_000)
            assert page.input_value("#backend") == "" and "embedded" not in page.inner_text("#model-note")
            page.close()
        finally:
            server.stop()
    assert not (tmp_path / "none" / "runs").exists() and not (tmp_path / "ollama" / "runs").exists()
