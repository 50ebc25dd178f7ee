"""A newcomer's first run from the dashboard: a gateway on default settings (Ollama, which is not running), the
embedded backend chosen in the New-run form, and the run goes from the proposal to a report on the real embedded
model (SmolLM2-135M through xllamacpp) — no model server, nothing fetched.

An early start (tests/conftest.py ``_early_starts``): the page is opened and the run started when the session
starts (the gateway's model check loads the real model in this process, which the other tests' guard forbids
while they run); a thread of its own then approves the proposal in the page and waits for the report while the
other tests run (the model mostly keeps one core busy). The test, marked ``last``, reads what the page showed.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.early import early_started
from tests.gateway.conftest import DEMO_LIBRARY, LiveServer
from tests.gateway.test_gateway_browser import ARGS, CHROMIUM

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.real_llm, pytest.mark.last]

TOKEN = "embedded-browser-token"
QUERY = "What are the complications of thromboprophylaxis in trauma patients?"
STARTED_S = 300.0  # the page, the model check and the run's creation
FINISHED_S = 1500.0  # the whole run on the 135M model, beside the other tests


class EmbeddedRunInPage:
    """The browser work in a thread of its own (Playwright's sync API belongs to the thread that made it)."""

    def __init__(self, server: LiveServer, runs_dir: Path) -> None:
        self.server, self.runs_dir = server, runs_dir
        self.seen: dict[str, Any] = {}
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.thread = threading.Thread(target=self._drive, name="embedded-browser-run", daemon=True)
        self.thread.start()

    def _drive(self) -> None:
        try:
            from playwright.sync_api import expect, sync_playwright

            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
                try:
                    self._page(browser.new_page(viewport={"width": 1400, "height": 1100}), expect)
                finally:
                    browser.close()
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which raises it
            self.error = exc
        finally:
            self.started.set()

    def _page(self, page: Any, expect: Any) -> None:
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(self.server.url + f"/#token={TOKEN}")
        # on default settings the note says Ollama is not there; choosing the embedded backend is the way out
        expect(page.locator("#model-note")).to_contain_text("not reachable", timeout=60_000)
        page.fill("#query", QUERY)
        page.fill("#library", str(DEMO_LIBRARY))
        page.select_option("#preset", "quick")
        page.fill("#max-iterations", "1")
        page.fill("#max-requirements", "1")
        page.select_option("#backend", "embedded")
        page.click("#start")
        expect(page.locator("#run-id")).not_to_be_empty(timeout=STARTED_S * 1000)
        self.seen["start_error"] = page.inner_text("#start-error")
        self.seen["run_id"] = page.evaluate("state.runId")
        self.started.set()  # the model check is done: the other tests may start

        page.wait_for_selector("#approval:not([hidden])", timeout=FINISHED_S * 1000)
        self.seen["proposed"] = page.locator("#req-edit li").count()
        page.click("#approve")
        page.wait_for_selector("#report-box:not([hidden])", timeout=FINISHED_S * 1000)
        self.seen["status"] = page.inner_text("#run-status")
        self.seen["n_ingested"] = int(page.inner_text("#n-ingested"))
        self.seen["n_failed"] = int(page.inner_text("#n-failed"))
        self.seen["report"] = page.inner_text("#report")
        self.seen["cites"] = page.locator("#report a.cite").count()
        self.seen["page_errors"] = errors
        page.close()

    def result(self) -> dict[str, Any]:
        self.thread.join(FINISHED_S * 2)
        if self.thread.is_alive():
            raise AssertionError(f"the page's run did not finish in {FINISHED_S * 2:.0f} s; seen: {self.seen}")
        if self.error is not None:
            raise self.error
        return self.seen

    def stop(self) -> None:
        self.thread.join(5)
        self.server.stop()


def early_start(request: pytest.FixtureRequest) -> EmbeddedRunInPage:
    if not CHROMIUM.exists():
        pytest.skip(f"needs Debian's Chromium at {CHROMIUM}: apt-get install chromium")
    pytest.importorskip("playwright.sync_api", reason="needs the playwright python package")
    pytest.importorskip("xllamacpp", reason="the embedded backend needs xllamacpp (pip install 'forage[embedded]')")
    from gateway.server import create_app
    from infra.settings import Settings
    from tests.loopback_ollama import closed_loopback_url

    request.getfixturevalue("ray_cluster")
    cache = request.getfixturevalue("ingest_cache")
    tmp = request.getfixturevalue("tmp_path_factory").mktemp("embedded-browser")
    # a gateway's defaults: the Ollama backend, and no Ollama where it looks
    settings = Settings.load().updated(run={"runs_dir": tmp / "runs"}, store={"path": tmp / "store"},
                                       ingest={"cache_dir": cache},
                                       llm={"backend": "ollama", "host": closed_loopback_url()})
    server = LiveServer(create_app(settings, token=TOKEN, allowed_libraries=[DEMO_LIBRARY]))
    run = EmbeddedRunInPage(server, tmp / "runs")
    run.started.wait(STARTED_S + 60)
    return run


@pytest.fixture(scope="module")
def page_run(request: pytest.FixtureRequest) -> tuple[dict[str, Any], Path]:
    run: EmbeddedRunInPage = early_started(request)
    return run.result(), run.runs_dir


def test_the_embedded_backend_chosen_in_the_form_runs_to_a_report(page_run) -> None:
    seen, runs_dir = page_run
    assert seen["start_error"] == ""
    assert seen["proposed"] == 1 and seen["status"] == "finished"
    assert seen["n_ingested"] == 4 and seen["n_failed"] == 0
    assert seen["page_errors"] == []
    state = json.loads((runs_dir / seen["run_id"] / "run.json").read_text())
    assert state["status"] == "finished"
    assert state["settings"]["llm"] == "embedded", "the run did not record the backend the form chose"
    report = (runs_dir / seen["run_id"] / "report.md").read_text()
    assert "## Sources Consulted" in report and "Sources Consulted" in seen["report"]
    # what a 135M model finds varies; what the page shows agrees with what the run earned either way
    if state["coverage"]["R1"] > 0:
        assert seen["cites"] >= 1  # its evidence is cited, each citation a link to a stored chunk
    else:
        assert seen["cites"] == 0 and "did not cover this requirement" in seen["report"]
