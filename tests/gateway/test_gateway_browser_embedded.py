"""A newcomer's first run from the dashboard: a gateway on default settings (Ollama, which is not running), the
embedded backend the New-run form takes when no model server answers, and the run goes from the proposal to a
report on the real embedded model (SmolLM2-135M through xllamacpp) — no model server, nothing fetched.

Opt-in (``FORAGE_TEST_EMBEDDED_BROWSER=1``): the real model's run takes about two minutes of one core on its own,
which the whole suite's 12-minute budget cannot spare, and beside the other tests (tried as an early start) its
actors held the session Ray's CPUs while another test's run waited for them.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.gateway.live import DEMO_LIBRARY, LiveServer

pytestmark = [
    pytest.mark.ray, pytest.mark.slow, pytest.mark.real_llm,
    pytest.mark.skipif(os.environ.get("FORAGE_TEST_EMBEDDED_BROWSER") != "1",
                       reason="opt-in: a real 135M-model run through the dashboard (about 2 minutes alone); "
                              "set FORAGE_TEST_EMBEDDED_BROWSER=1"),
]

TOKEN = "embedded-browser-token"
QUERY = "What are the complications of thromboprophylaxis in trauma patients?"
FINISHED_MS = 1_200_000


def test_the_embedded_backend_chosen_in_the_form_runs_to_a_report(browser, ray_cluster, ingest_cache,
                                                                 tmp_path) -> None:
    pytest.importorskip("xllamacpp", reason="the embedded backend needs xllamacpp (pip install 'forage[embedded]')")
    from playwright.sync_api import expect

    from gateway.server import create_app
    from infra.settings import Settings
    from tests.loopback_ollama import closed_loopback_url

    # a gateway's defaults: the Ollama backend, and no Ollama where it looks
    settings = Settings.load().updated(run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "store"},
                                       ingest={"cache_dir": ingest_cache},
                                       llm={"backend": "ollama", "host": closed_loopback_url()})
    server = LiveServer(create_app(settings, token=TOKEN, allowed_libraries=[DEMO_LIBRARY]))
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(server.url + f"/#token={TOKEN}")
        # the note says Ollama is not there, and the form took the embedded backend, the way out
        expect(page.locator("#model-note")).to_contain_text("not reachable", timeout=60_000)
        expect(page.locator("#model-note")).to_contain_text("the embedded backend is selected")
        assert page.input_value("#backend") == "embedded"
        page.fill("#query", QUERY)
        page.fill("#library", str(DEMO_LIBRARY))
        page.select_option("#preset", "quick")
        page.fill("#max-iterations", "1")
        page.fill("#max-requirements", "1")
        page.click("#start")
        page.wait_for_selector("#approval:not([hidden])", timeout=FINISHED_MS)
        assert page.inner_text("#start-error") == "" and page.locator("#req-edit li").count() == 1
        run_id = page.evaluate("state.runId")
        page.click("#approve")
        page.wait_for_selector("#report-box:not([hidden])", timeout=FINISHED_MS)
        status, shown = page.inner_text("#run-status"), page.inner_text("#report")
        ingested, failed = int(page.inner_text("#n-ingested")), int(page.inner_text("#n-failed"))
        cites = page.locator("#report a.cite").count()
        page.close()
    finally:
        server.stop()
    assert errors == [] and status == "finished" and (ingested, failed) == (4, 0)
    run_dir = tmp_path / "runs" / run_id
    state = json.loads((run_dir / "run.json").read_text())
    assert state["status"] == "finished"
    assert state["settings"]["llm"] == "embedded", "the run did not record the backend the form chose"
    resolved = state["settings"]["resolved"]["llm"]
    assert (resolved["n_ctx"], resolved["max_tokens"]) == (4096, 512)  # the small model's window, not 8192 / 1024
    assert "## Sources Consulted" in (run_dir / "report.md").read_text() and "Sources Consulted" in shown
    # what a 135M model finds varies; what the page shows agrees with what the run earned either way
    if state["coverage"]["R1"] > 0:
        assert cites >= 1  # its evidence is cited, each citation a link to a stored chunk
    else:
        assert cites == 0 and "did not cover this requirement" in shown
