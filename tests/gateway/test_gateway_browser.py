"""The dashboard in a real headless Chromium (Debian's, driven by Playwright) against a live gateway that needs
its token, as `forage serve` runs it: opened at the address it prints (``#token=…``), start a run in the page,
approve an edited proposal, watch coverage update, open the report, click a citation and see the cited chunk,
open the run again after a reload. Without the token the page gets nothing; without a model server the page says
so in one sentence before any work. Every request the page makes goes
to the gateway (works offline). A screenshot is kept under $FORAGE_TEST_ARTIFACTS (default tests/artifacts/)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.gateway.live import DEMO_LIBRARY, REPO, LiveServer

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TOKEN = "browser-s3cret-token"


def artifacts_dir() -> Path:
    path = Path(os.environ.get("FORAGE_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def token_gateway(gateway):
    """The session gateway's settings and scripted brain behind a token (a second app over the same runs folder)."""
    from gateway.server import create_app
    from infra.llm.fakes import FunctionLLM
    from tests.e2e import brain as brain_module

    server = LiveServer(create_app(gateway.app.state.manager.settings, llm=FunctionLLM(brain_module.brain),
                                   token=TOKEN, allowed_libraries=[DEMO_LIBRARY]))
    yield server
    server.stop()


def test_without_the_token_the_page_gets_nothing(browser, token_gateway) -> None:
    from playwright.sync_api import expect

    page = browser.new_page()
    page.goto(token_gateway.url + "/")
    expect(page.locator("#start-error")).to_contain_text("missing or wrong token", timeout=30_000)
    assert page.locator("#runs li").count() == 0
    page.close()


def test_without_a_model_server_the_page_says_so_in_one_sentence_before_any_work(browser, tmp_path) -> None:
    """A gateway on default settings (Ollama) where no Ollama runs: the form's model note says what is missing
    (and takes the embedded backend); a start on Ollama chosen all the same says it in one sentence (never a
    traceback, a Ray error name or a terminal escape code), and no run is created."""
    from playwright.sync_api import expect

    from gateway.server import create_app
    from infra.settings import Settings
    from tests.loopback_ollama import closed_loopback_url

    settings = Settings.load().updated(run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "store"},
                                       llm={"backend": "ollama", "host": closed_loopback_url()})
    server = LiveServer(create_app(settings, token=TOKEN, allowed_libraries=[DEMO_LIBRARY]))
    try:
        page = browser.new_page()
        page.goto(server.url + f"/#token={TOKEN}")
        expect(page.locator("#model-note")).to_contain_text("not reachable", timeout=30_000)
        assert page.input_value("#backend") == "embedded"  # what works without a server (test_gateway_browser_run)
        page.select_option("#backend", "ollama")  # the researcher insists on the missing one
        page.fill("#query", "How do zebrafish fins regrow?")
        page.fill("#library", str(DEMO_LIBRARY))
        page.click("#start")
        expect(page.locator("#start-error")).to_contain_text("not reachable", timeout=30_000)
        said = page.inner_text("#start-error")  # "503: Ollama is not reachable at http://…: start it with …"
        assert "start it with `ollama serve`" in said
        assert "\n" not in said.strip() and "Traceback" not in said and "Error(" not in said and "\x1b" not in said
        assert page.locator("#runs li").count() == 0 and not (tmp_path / "runs").exists()
        page.close()
    finally:
        server.stop()


def test_dashboard_start_approve_watch_read_cite(browser, token_gateway) -> None:
    from playwright.sync_api import expect

    gateway = token_gateway
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(gateway.url + f"/#token={TOKEN}")  # the address `forage serve` prints
    assert TOKEN not in page.url  # taken into the tab's storage, out of the address bar
    # the gateway's Ollama address is a closed port (its runs use the scripted brain instead), so the form took the
    # embedded backend: back to the gateway's default, which is what this gateway's runs are made with
    expect(page.locator("#model-note")).to_contain_text("the embedded backend is selected", timeout=30_000)
    page.select_option("#backend", "")

    page.fill("#query", "Anticoagulation after trauma, and how JIT compilers specialize types")
    page.fill("#library", str(DEMO_LIBRARY))
    page.select_option("#preset", "quick")
    page.fill("#max-iterations", "1")
    page.fill("#max-requirements", "2")
    page.click("#start")

    # the proposal: two requirements, no outgoing search strings (offline)
    page.wait_for_selector("#approval:not([hidden])", timeout=300_000)
    assert page.locator("#req-edit li").count() == 2
    assert page.is_visible("#no-search")
    # edit: drop R2, reword R1
    page.locator("#req-edit li").nth(1).locator("button").click()
    page.locator("#req-edit li .req-text").fill("Complication rates of anticoagulant prophylaxis after injury")
    page.click("#approve")
    page.wait_for_selector("#approval[hidden]", state="attached", timeout=30_000)

    # coverage bars update from the live events
    page.wait_for_selector('#coverage .covrow[data-req="R1"][data-coverage]', state="attached", timeout=600_000)
    assert float(page.get_attribute('#coverage .covrow[data-req="R1"]', "data-coverage")) > 0
    assert page.locator('#timeline .lane[data-lane="forager R1"] .step').count() >= 1
    assert page.locator('#timeline .lane[data-lane="orchestrator"] .step').count() >= 1

    # the report, then a citation
    page.wait_for_selector("#report-box:not([hidden])", timeout=600_000)
    assert page.inner_text("#run-status") == "finished"
    assert int(page.inner_text("#n-ingested")) == 4 and int(page.inner_text("#n-failed")) == 0
    # the charts load through the gateway (figures/<name> in the report)
    assert page.locator("#report img").count() >= 2
    # (expect, not wait_for_function: the page's CSP has no 'unsafe-eval', which wait_for_function's polling needs)
    images = page.locator("#report img")
    for i in range(images.count()):  # fetched with the token, then shown from a blob (never a broken first load)
        expect(images.nth(i)).to_have_attribute("src", re.compile(r"^blob:"), timeout=30_000)
        expect(images.nth(i)).to_have_js_property("complete", True, timeout=30_000)
    assert page.evaluate("[...document.querySelectorAll('#report img')].every(i => i.naturalWidth > 0)")
    page.locator("#report a.cite").first.click()
    page.wait_for_selector("#chunk-view:not([hidden])", timeout=30_000)
    quote = page.inner_text("#chunk-quote")
    text = page.inner_text("#chunk-text")
    assert quote and " ".join(quote.split())[:40] in " ".join(text.split())
    shot = artifacts_dir() / "dashboard-citation.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # the runs list shows it
    page.click("#chunk-close")
    page.click("#refresh-runs")
    page.wait_for_selector("#runs li .badge.finished", timeout=30_000)

    # opened again after a reload (its address, #run=ID, names it), its events replayed: each document still
    # counted once (it read 8 of 4)
    run_id = page.evaluate("state.runId")
    assert page.evaluate("location.hash") == f"#run={run_id}"
    page.reload()
    expect(page.locator("#run-id")).to_have_text(run_id, timeout=60_000)
    page.wait_for_selector("#report-box:not([hidden])", timeout=60_000)
    expect(page.locator("#conn")).to_have_text("run over", timeout=60_000)
    assert int(page.inner_text("#n-ingested")) == 4 and int(page.inner_text("#n-failed")) == 0
    assert page.inner_text(f'#runs li[data-run="{run_id}"] .badge') == page.inner_text("#run-status") == "finished"
    assert errors == []
    # every request went to the gateway (blob: URLs are the page's own copies of the charts it fetched)
    outside = [u for u in requests if not (u.startswith(gateway.url) or u.startswith("blob:" + gateway.url))]
    assert requests and not outside, outside


def test_api_docs_render_offline(browser, gateway) -> None:
    """/docs renders every operation with Swagger UI from the gateway's own assets: no request goes elsewhere."""
    page = browser.new_page()
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{gateway.url}/docs")
    page.wait_for_selector(".opblock")
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert {"/api/runs", "/api/runs/{run_id}/resume"} <= {p.replace("\u200b", "") for p in paths}, paths
    assert not problems, problems
    assert requests and all(u.startswith(gateway.url + "/") for u in requests), requests
    page.close()
