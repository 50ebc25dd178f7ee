"""`forage verify` and `forage export` on a run produced in-process (see finished_run.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from actors.steps.run.rundir import RunDir
from actors.steps.tools.verify import verify_run
from gateway.cli import app
from infra.store.lancedb import LanceStore
from tests.finished_run import RUN, make_run

runner = CliRunner()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """(settings, run folder) of one finished run; tests copy it before changing anything."""
    return make_run(tmp_path_factory.mktemp("finished"))


def copy_run(finished, tmp_path):
    _, folder = finished
    target = tmp_path / "runs" / RUN
    shutil.copytree(folder, target)
    return target


def invoke(*args: str):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_verify_passes_on_a_finished_run(finished):
    settings, folder = finished
    result = invoke("verify", RUN, "--runs-dir", str(folder.parent))
    assert result.exit_code == 0, result.output
    assert "FAIL" not in result.output and "checks passed" in result.output
    checks = verify_run(RunDir(folder.parent, RUN), LanceStore(settings.store.path, dim=384))
    state = json.loads((folder / "run.json").read_text())
    assert len(checks) == 1 + len((folder / "evidence.jsonl").read_text().splitlines())
    assert all(c.ok for c in checks) and len(state["sources"]) == 3


def test_verify_fails_on_a_tampered_quote_a_dangling_citation_and_a_missing_chunk(finished, tmp_path):
    target = copy_run(finished, tmp_path)
    lines = (target / "evidence.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["quote"] = "A sentence the paper never wrote."
    second = json.loads(lines[1])
    second["chunk_id"] = second["chunk_id"].split(":")[0] + ":999"
    (target / "evidence.jsonl").write_text("\n".join([json.dumps(first), json.dumps(second), *lines[2:]]) + "\n")
    md = (target / "report.md").read_text()
    (target / "report.md").write_text(md.replace("[1].", "[9].", 1))
    result = invoke("verify", str(target))
    assert result.exit_code == 1
    assert "quote not found in the chunk" in result.output
    assert "not in the store" in result.output
    assert "dangling citation [9]" in result.output


def test_verify_fails_when_a_chunk_text_changed(finished, tmp_path):
    target = copy_run(finished, tmp_path)
    lines = (target / "evidence.jsonl").read_text().splitlines()
    row = json.loads(lines[0])
    row["sha256"] = "0" * 64
    (target / "evidence.jsonl").write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    result = invoke("verify", RUN, "--runs-dir", str(target.parent))
    assert result.exit_code == 1 and "sha256 differs" in result.output


def test_verify_an_unknown_run_is_one_clear_error(tmp_path):
    result = invoke("verify", "no-such-run", "--runs-dir", str(tmp_path))
    assert result.exit_code == 2 and "no run 'no-such-run'" in result.output


# -- export -------------------------------------------------------------------------------------------------
def export_text(folder, fmt: str, tmp_path) -> str:
    out = tmp_path / f"out.{fmt}"
    result = invoke("export", str(folder), "--format", fmt, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def test_export_markdown_is_the_report(finished, tmp_path):
    _, folder = finished
    assert export_text(folder, "md", tmp_path) == (folder / "report.md").read_text()
    printed = invoke("export", RUN, "--runs-dir", str(folder.parent), "--format", "md")
    assert printed.exit_code == 0 and printed.output == (folder / "report.md").read_text()


def test_export_bibtex_parses_with_all_sources(finished, tmp_path):
    import bibtexparser

    _, folder = finished
    entries = bibtexparser.loads(export_text(folder, "bibtex", tmp_path)).entries
    assert len(entries) == 3 and len({e["ID"] for e in entries}) == 3
    by_title = {e["title"]: e for e in entries}
    calvin = by_title["The Calvin Cycle"]
    assert calvin["ENTRYTYPE"] == "article" and calvin["doi"] == "10.1000/calvin" and calvin["year"] == "1950"
    assert calvin["author"] == "Melvin Calvin" and calvin["url"] == "https://doi.org/10.1000/calvin"
    light = by_title["Light Reactions of Photosynthesis"]
    assert light["author"] == "Ada Lovelace and Alan Turing" and light["ENTRYTYPE"] == "misc"
    assert light["ID"] == "lovelace2020" and light["note"] == "a.pdf"
    assert "Notes on [Leaf] *Energy*" in by_title  # brackets and asterisks survive as text


def test_an_export_reads_a_sources_own_identifiers_and_an_older_reports_origin() -> None:
    """A source's DOI and arXiv id are its fields; a report written before them names them in the origin only."""
    from actors.steps.tools.export import arxiv_of, doi_of, url_of
    from messages.write import SourceRef

    typed = SourceRef(n=1, doc_id="a", title="T", origin="t.pdf", doi="10.1000/typed", arxiv_id="2302.07302")
    assert (doi_of(typed), arxiv_of(typed), url_of(typed)) == ("10.1000/typed", "2302.07302",
                                                               "https://doi.org/10.1000/typed")
    older = SourceRef(n=2, doc_id="b", title="T", origin="o.pdf, doi:10.1000/old, arXiv:2101.00001")
    assert (doi_of(older), arxiv_of(older)) == ("10.1000/old", "2101.00001")
    preprint = SourceRef(n=3, doc_id="c", title="T", origin="p.pdf", arxiv_id="2101.00002")
    assert doi_of(preprint) is None and url_of(preprint) == "https://arxiv.org/abs/2101.00002"


def test_export_ris_has_its_fields(finished, tmp_path):
    _, folder = finished
    records = [r for r in export_text(folder, "ris", tmp_path).split("\n\n") if r.strip()]
    assert len(records) == 3
    for record in records:
        lines = record.splitlines()
        assert lines[0].startswith("TY  - ") and lines[-1] == "ER  - "
        assert any(x.startswith("TI  - ") for x in lines)
    calvin = next(r for r in records if "TI  - The Calvin Cycle" in r)
    assert "AU  - Melvin Calvin" in calvin and "PY  - 1950" in calvin and "DO  - 10.1000/calvin" in calvin
    assert "TY  - JOUR" in calvin


def test_export_json_loads(finished, tmp_path):
    _, folder = finished
    data = json.loads(export_text(folder, "json", tmp_path))
    assert data["run_id"] == RUN and data["status"] == "finished"
    assert len(data["iterations"]) == 2 and len(data["report"]["sources"]) == 3
    assert data["report"]["markdown"] == (folder / "report.md").read_text()


def test_export_an_unknown_run_is_one_clear_error(tmp_path):
    result = invoke("export", "nope", "--runs-dir", str(tmp_path), "--format", "html")
    assert result.exit_code == 2 and "no run 'nope'" in result.output


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20" '
       'fill="#36c"/></svg>')


def test_export_html_is_self_contained_and_opens_offline_in_chromium(finished, tmp_path):
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Chromium at {CHROMIUM} (install.sh installs it)")
    from playwright.sync_api import sync_playwright

    target = copy_run(finished, tmp_path)
    (target / "figures").mkdir(exist_ok=True)
    (target / "figures" / "probe.svg").write_text(SVG)
    md = (target / "report.md").read_text()
    (target / "report.md").write_text(md + "\n![probe chart](figures/probe.svg)\n\n"
                                      "![remote](http://example.invalid/x.png)\n\n<script>fetch('http://x')</script>\n")
    html = export_text(target, "html", tmp_path)
    assert "figures/probe.svg" not in html and "data:image/svg+xml;base64," in html
    assert "example.invalid" not in html and "<script>" not in html
    page_file = tmp_path / "report.html"
    page_file.write_text(html)
    requested: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.on("request", lambda r: requested.append(r.url))
            page.goto(page_file.as_uri(), wait_until="load")
            heading = page.inner_text("h1")
            images = page.eval_on_selector_all("img", "els => els.map(e => [e.naturalWidth, e.complete])")
            sections = page.eval_on_selector_all("h2", "els => els.map(e => e.textContent)")
        finally:
            browser.close()
    assert heading.endswith("— Report")
    assert "Sources Consulted" in sections and "Overview" in sections
    assert [40, True] in images  # the inlined chart rendered
    assert requested and all(u.startswith(("file:", "data:")) for u in requested), requested


# -- charts and comparison in the finished run ------------------------------------------------------------------
def test_charts_are_written_beside_the_report_and_linked(finished):
    from xml.etree import ElementTree

    _, folder = finished
    md = (folder / "report.md").read_text()
    for name in ("coverage", "years", "gaps"):
        png = (folder / "figures" / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
        root = ElementTree.parse(folder / "figures" / f"{name}.svg").getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert f"](figures/{name}.png)" in md and f"(figures/{name}.svg)" in md
    coverage_svg = (folder / "figures" / "coverage.svg").read_text()
    assert "Coverage per requirement per iteration" in coverage_svg or "Coverage" in coverage_svg
    assert md.index("## Figures") < md.index("## Sources Consulted")
    report = json.loads((folder / "report.json").read_text())
    assert "figures" not in report  # the files hold them


def test_comparison_is_saved_and_rendered(finished):
    _, folder = finished
    comparison = json.loads((folder / "comparison.json").read_text())
    assert [r["n"] for r in comparison["records"]] == [1, 2, 3]
    assert comparison["compliant"] == 2  # paper 2 stated no novelty
    assert comparison["overlaps"] == [{"papers": [1, 2], "element": "problem", "shared": "light capture in leaves"}]
    assert [d["n"] for d in comparison["differences"]] == [1, 2, 3]  # the invented paper 42 is dropped
    matrix = comparison["matrix"]
    row = matrix["problems"].index("causal effect or mechanism")
    assert matrix["cells"][row][matrix["methods"].index("laboratory experiment")] == [1, 2]
    assert matrix["cells"][row][matrix["methods"].index("observational or cohort study")] == [3]
    md = (folder / "report.md").read_text()
    part = md.split("## Comparison of the Cited Papers\n", 1)[1].split("\n## ", 1)[0]
    assert "| [1] Light Reactions of Photosynthesis | Paper 1 asks about this: Plants depend on sunlight. This study" in part
    assert "all four fields stated: 2 of 3" in part
    assert "| [1] [2] | problem | light capture in leaves |" in part
    assert "| causal effect or mechanism | [3] | [1] [2] |" in part  # columns in taxonomy order
    assert "Empty cells: 70 of 72 (see the heatmap).\n" in part


def test_html_export_inlines_the_run_charts(finished, tmp_path):
    _, folder = finished
    html = export_text(folder, "html", tmp_path)
    assert html.count("data:image/png;base64,") == 3 and "src=\"figures/" not in html
    assert '<a href="#source-1">[1]</a>' in html and '<p id="source-1">[1]' in html
    assert '<p id="source-3">[3]' in html and "#source-4" not in html


def test_verify_a_run_saved_before_report_json_existed(finished, tmp_path):
    target = copy_run(finished, tmp_path)
    (target / "report.json").unlink()  # older runs: sources from run.json, cited chunks from evidence.jsonl
    result = invoke("verify", str(target))
    assert result.exit_code == 0, result.output
    md = (target / "report.md").read_text()
    (target / "report.md").write_text(md.replace("[2].", "[5].", 1))
    assert invoke("verify", str(target)).exit_code == 1


def test_bibtex_and_ris_name_a_pdf_by_its_doi_and_arxiv_id():
    """The origin ingestion writes for a PDF (actors.steps.ingest.step.source_origin) becomes DOI, eprint and url."""
    import bibtexparser

    from actors.steps.tools.export import to_bibtex, to_ris
    from actors.steps.ingest.documents import source_origin
    from messages.write import SourceRef

    both = SourceRef(n=1, doc_id="a" * 64, title="CiteSee", authors=("Joseph Chee Chang",), year=2023,
                     origin=source_origin("citesee.pdf", "10.1145/3544548.3580847", "2302.07302"))
    preprint = SourceRef(n=2, doc_id="b" * 64, title="Beyond Summarization", authors=("Zejiang Shen",), year=2023,
                         origin=source_origin("beyond.pdf", None, "2304.02623"))
    plain = SourceRef(n=3, doc_id="c" * 64, title="TIMP", year=2007, origin=source_origin("timp.pdf", None, None))
    assert both.origin == "citesee.pdf, doi:10.1145/3544548.3580847, arXiv:2302.07302" and plain.origin == "timp.pdf"
    entries = {e["title"]: e for e in bibtexparser.loads(to_bibtex([both, preprint, plain])).entries}
    assert entries["CiteSee"]["ENTRYTYPE"] == "article" and entries["CiteSee"]["doi"] == "10.1145/3544548.3580847"
    assert entries["CiteSee"]["url"] == "https://doi.org/10.1145/3544548.3580847"
    assert entries["CiteSee"]["eprint"] == "2302.07302" and entries["CiteSee"]["archiveprefix"] == "arXiv"
    beyond = entries["Beyond Summarization"]
    assert beyond["ENTRYTYPE"] == "misc" and beyond["eprint"] == "2304.02623" and "doi" not in beyond
    assert beyond["url"] == "https://arxiv.org/abs/2304.02623"
    assert entries["TIMP"]["note"] == "timp.pdf" and "url" not in entries["TIMP"]
    ris = to_ris([both, preprint, plain]).split("\n\n")
    assert "TY  - JOUR" in ris[0] and "DO  - 10.1145/3544548.3580847" in ris[0]
    assert "TY  - UNPB" in ris[1] and "UR  - https://arxiv.org/abs/2304.02623" in ris[1]
    assert "TY  - GEN" in ris[2]


def test_a_unique_run_id_prefix_works_in_every_command_that_takes_a_run_id(finished, tmp_path):
    """verify, export, chunk --run, cancel, resume and forget take a unique prefix of a run id (as `forage runs`
    lists them) and act on that run; a prefix two runs share is one clear error naming both."""
    target = copy_run(finished, tmp_path)
    runs = str(target.parent)
    prefix = RUN[:15]  # "20260101-000000": the date and time, not the random part
    assert invoke("verify", prefix, "--runs-dir", runs).exit_code == 0
    exported = invoke("export", prefix, "--format", "md", "--runs-dir", runs)
    assert exported.exit_code == 0 and exported.output == (target / "report.md").read_text()
    cited = json.loads((target / "evidence.jsonl").read_text().splitlines()[0])
    chunk = invoke("chunk", cited["chunk_id"], "--json", "--run", prefix, "--runs-dir", runs)
    assert chunk.exit_code == 0 and cited["quote"] in json.loads(chunk.output)["text"]
    cancel = invoke("cancel", prefix, "--runs-dir", runs)  # a finished run: nothing to stop, said with its whole id
    assert cancel.exit_code == 0 and f"run {RUN} is already finished" in cancel.output
    resume = invoke("resume", prefix, "--runs-dir", runs)  # refused (finished), pointing at the whole run's report
    assert resume.exit_code == 2 and str(target / "report.md") in resume.output.replace("\n", "")

    twin = target.parent / (RUN[:-4] + "0000")  # a second run sharing the prefix
    shutil.copytree(target, twin)
    for command in (["verify"], ["export", "--format", "json"], ["cancel"], ["resume"], ["forget"]):
        shared = invoke(*command, prefix, "--runs-dir", runs)
        assert shared.exit_code == 2 and "starts 2 run ids" in shared.output, (command, shared.output)
    shutil.rmtree(twin)

    forgot = invoke("forget", prefix, "--runs-dir", runs)
    assert forgot.exit_code == 0, forgot.output
    assert not target.exists() and RUN in forgot.output
