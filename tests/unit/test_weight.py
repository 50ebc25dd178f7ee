"""Retractions and what a reader weighs a source by, on recorded responses (shared/data/api-fixtures).

From OpenAlex and arXiv through the loopback replay (tests/loopback_sources.py) onto the Candidate; into the
stored document (LanceDB, an older table without the columns still reads); into run.json, the report's
"Sources Consulted", every export; a retracted paper is cited only with a warning in its section and in
Sources, and a section that other papers answer too leaves it out.

**No recorded response holds a retracted work** (every work in ``api-fixtures/openalex`` has
``"is_retracted": false``). The retracted work here is therefore DERIVED, not recorded: :func:`derived_retracted`
copies the recorded ``work_by_doi_10.1073_pnas.1414271111.json`` and changes only its id, DOI and
``is_retracted`` (true), labelled in its title. Everything else in it (citation count 138, open access bronze,
locations) is as recorded.
"""

from __future__ import annotations

import copy
import json

import pytest

from infra.net import Egress
from infra.settings import NetSettings, SearchSettings
from infra.sources.openalex import OpenAlexSource, weight
from messages.plan import SearchQuery
from messages.search import WEIGHT_FIELDS, weight_of
from tests.loopback_sources import loopback_sources  # noqa: F401  (fixture)

FAST = NetSettings(timeout_s=5, retries=2, backoff_s=0.01, max_backoff_s=5)
PNAS = "work_by_doi_10.1073_pnas.1414271111.json"
DERIVED_ID, DERIVED_DOI = "W9000000001", "10.1073/pnas.1414271111.derived-retracted"


def recorded(shared_data, name: str) -> dict:
    return json.loads((shared_data / "api-fixtures" / "openalex" / name).read_text())


def derived_retracted(shared_data) -> dict:
    """DERIVED from the recorded PNAS work (see the module docstring): a new id and DOI, is_retracted true."""
    work = copy.deepcopy(recorded(shared_data, PNAS))
    work.update(id=f"https://openalex.org/{DERIVED_ID}", doi=f"https://doi.org/{DERIVED_DOI}", is_retracted=True,
                display_name=work["display_name"] + " [derived test variant: marked retracted]")
    work["title"] = work["display_name"]
    return work


def _openalex(srv) -> OpenAlexSource:
    return OpenAlexSource(SearchSettings(openalex_url=srv.openalex_url, mailto="me@example.org"), FAST, Egress(FAST))


def test_openalex_weight_of_recorded_works_and_of_the_derived_retracted_one(loopback_sources, shared_data):
    srv = loopback_sources
    assert all(w["is_retracted"] is False for w in srv.recorded_search())  # why the retracted work is derived
    srv.add_work(derived_retracted(shared_data))
    oa = _openalex(srv)
    real = oa.by_doi("10.1073/pnas.1414271111")
    assert weight_of(real) == {"is_retracted": False, "cited_by_count": 138, "oa_status": "bronze",
                               "preprint_only": False}
    retracted = oa.work(DERIVED_ID)
    assert retracted.is_retracted and retracted.cited_by_count == 138 and retracted.doi == DERIVED_DOI

    found = oa.search(SearchQuery(text="machine learning AND public health"), limit=49)
    raw = {w["id"].rsplit("/", 1)[-1]: w for w in srv.recorded_search()}
    for c in found:
        assert c.cited_by_count == raw[c.openalex_id]["cited_by_count"]
        assert c.oa_status == raw[c.openalex_id]["open_access"]["oa_status"]
    preprints = {c.openalex_id for c in found if c.preprint_only}
    assert {w for w, r in raw.items() if r["type"] == "preprint"} <= preprints
    # a journal article with repository copies is not a preprint
    assert not next(c for c in found if c.openalex_id == "W2897157249").preprint_only


def test_arxiv_papers_are_open_and_preprints_unless_published(loopback_sources):
    from infra.sources.arxiv_source import ArxivSource

    settings = SearchSettings(arxiv_url=loopback_sources.arxiv_url, arxiv_delay_s=0.0)
    found = ArxivSource(settings, FAST, Egress(FAST)).search(SearchQuery(text="software testing"), limit=10)
    assert {c.oa_status for c in found} == {"green"} and not any(c.is_retracted for c in found)
    published = [c for c in found if c.doi or c.venue]
    assert published and not any(c.preprint_only for c in published)
    assert all(c.preprint_only for c in found if not (c.doi or c.venue))


def test_the_stored_document_keeps_the_weight_and_an_older_store_still_reads(tmp_path, shared_data, minilm):
    import lancedb
    import pyarrow as pa

    from actors.steps.ingest.step import IngestStep
    from infra.settings import Settings
    from infra.sources.openalex import to_candidate
    from infra.store.lancedb import LanceStore
    from messages.ingest import IngestRequest

    candidate = to_candidate(derived_retracted(shared_data), found_by="test").model_copy(
        update={"abstract_only": True})
    store = LanceStore(tmp_path / "store", dim=384)
    step = IngestStep(Settings.load().updated(ingest={"contextual": False}), store, minilm, parser=None)
    result = step.ingest(IngestRequest(run_id="r", candidate=candidate))
    assert result.status == "stored", result
    doc = LanceStore(tmp_path / "store", dim=384).get_document(result.doc_id)
    assert weight_of(doc) == {"is_retracted": True, "cited_by_count": 138, "oa_status": "bronze",
                              "preprint_only": False}

    # a documents table written before the weight columns: read as "not known", and writable again
    db = lancedb.connect(str(tmp_path / "store"))
    table = db.open_table("documents")
    old = table.to_arrow().drop_columns(list(WEIGHT_FIELDS))
    db.drop_table("documents")
    db.create_table("documents", old, schema=old.schema)
    assert "is_retracted" not in db.open_table("documents").schema.names
    reopened = LanceStore(tmp_path / "store", dim=384)
    old_doc = reopened.get_document(result.doc_id)
    assert weight_of(old_doc) == {"is_retracted": False, "cited_by_count": None, "oa_status": "",
                                  "preprint_only": False}
    assert isinstance(db.open_table("documents").schema.field("is_retracted").type, type(pa.bool_()))


@pytest.fixture(scope="module")
def weighed_run(tmp_path_factory, shared_data):
    """A finished run (tests/finished_run.py) whose papers carry weights from recorded responses: C (the Calvin
    cycle) the derived retracted work's, A the recorded PNAS work's (cited by 138, bronze), B a recorded preprint's.
    R2 is answered by C alone, so the report must cite the retracted paper, with its warning."""
    from tests.finished_run import make_run
    from tests.leaves import A, B, C, R1, R2, ev
    from messages.forage import RequirementCoverage
    from tests.finished_run import RUN

    preprint = next(w for w in json.loads((shared_data / "api-fixtures" / "openalex" /
                                           "works_search_machine_learning_public_health.json").read_text())["results"]
                    if w["type"] == "preprint")
    weights = {C[0].doc_id: weight(derived_retracted(shared_data)),
               A[0].doc_id: weight(recorded(shared_data, PNAS)), B[0].doc_id: weight(preprint)}
    covs = (RequirementCoverage(run_id=RUN, requirement=R1, iteration=2, coverage=1.0, evidence=(
                ev(A, "answers", "Photosystem II absorbs photons and splits water.", 1),
                ev(B, "interesting", "Sun leaves hold more chlorophyll.", 0))),
            RequirementCoverage(run_id=RUN, requirement=R2, iteration=2, coverage=1.0, evidence=(
                ev(C, "answers", "The Calvin cycle fixes carbon with ATP and NADPH.", 0),)))
    settings, run_dir = make_run(tmp_path_factory.mktemp("weighed"), weights=weights, covs=covs)
    return settings, run_dir, weights


def test_a_retracted_source_is_flagged_in_run_json_the_report_and_every_export(weighed_run, tmp_path):
    from actors.steps.run.rundir import RunDir
    from actors.steps.tools.export import export
    from actors.steps.tools.verify import verify_run
    from tests.leaves import A, B, C, R2, section

    settings, run_dir, _ = weighed_run
    state = json.loads((run_dir / "run.json").read_text())
    by_doc = {s["doc_id"]: s for s in state["sources"]}
    assert by_doc[C[0].doc_id]["is_retracted"] is True and by_doc[A[0].doc_id]["cited_by_count"] == 138
    assert by_doc[B[0].doc_id]["preprint_only"] is True and by_doc[A[0].doc_id]["oa_status"] == "bronze"
    n_c, n_a = by_doc[C[0].doc_id]["n"], by_doc[A[0].doc_id]["n"]

    report = (run_dir / "report.md").read_text()
    r2 = section(report, R2.text)
    assert f"[{n_c}]" in r2 and f"Warning: [{n_c}] *The Calvin Cycle* has been retracted" in r2
    sources = report.split("## Sources Consulted", 1)[1]
    entry_c = next(line for line in sources.splitlines() if line.startswith(f"[{n_c}]"))
    entry_a = next(line for line in sources.splitlines() if line.startswith(f"[{n_a}]"))
    assert "**RETRACTED**" in entry_c and "Cited by 138." in entry_c
    assert "Cited by 138." in entry_a and "Free to read (bronze)." in entry_a and "RETRACTED" not in entry_a
    assert "Preprint only" in next(line for line in sources.splitlines()
                                   if line.startswith(f"[{by_doc[B[0].doc_id]['n']}]"))
    # every [n] of the retracted paper in the body sits in a section that warns about it
    body = report.split("## Sources Consulted", 1)[0]
    for part in body.split("\n## ")[1:]:
        if f"[{n_c}]" in part:
            assert f"Warning: [{n_c}]" in part, part

    from infra.store import build_store

    rundir = RunDir(run_dir.parent, run_dir.name)
    checks = verify_run(rundir, build_store(settings))
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    html = export(rundir, "html")
    assert "RETRACTED" in html and "has been retracted" in html and "Cited by 138" in html
    data = json.loads(export(rundir, "json"))
    assert {s["doc_id"]: s["is_retracted"] for s in data["report"]["sources"]}[C[0].doc_id] is True
    bib = export(rundir, "bibtex")
    entry = next(e for e in bib.split("\n@") if "Calvin" in e)
    assert "note = {RETRACTED" in entry and "keywords = {retracted}" in entry and "cited by 138" in entry
    assert "pubstate = {prepublished}" in next(e for e in bib.split("\n@") if "Leaf" in e)
    ris = export(rundir, "ris")
    record = next(r for r in ris.split("\n\n") if "Calvin" in r)
    assert "KW  - retracted" in record and "N1  - RETRACTED (OpenAlex)" in record
    assert "N1  - cited by 138 (OpenAlex)" in next(r for r in ris.split("\n\n") if "Light Reactions" in r)


def test_the_writer_leaves_a_retracted_paper_out_where_another_paper_answers(tmp_path, shared_data):
    """The leaf coverages: R2 is answered by C and by A. With C retracted, R2 is written from A alone, says what it
    left out, and C is cited nowhere (listed in Sources with RETRACTED, as a paper with evidence)."""
    from actors.steps.write.step import WriteStep
    from infra.llm.fakes import FunctionLLM
    from tests.finished_run import answer, fill_store
    from tests.leaves import C, R2, request, section, settings

    store = fill_store(tmp_path / "store", {C[0].doc_id: weight(derived_retracted(shared_data))})
    report = __import__("asyncio").run(WriteStep(settings(), store, FunctionLLM(answer)).write(request()))
    n_c = next(s.n for s in report.sources if s.doc_id == C[0].doc_id)
    r2 = section(report.markdown, R2.text)
    assert "Left out as retracted (OpenAlex)" in r2 and "*The Calvin Cycle*" in r2
    body = report.markdown.split("## Sources Consulted", 1)[0]
    assert f"[{n_c}]" not in body and "Warning:" not in body
    assert "**RETRACTED**" in next(line for line in report.markdown.splitlines() if line.startswith(f"[{n_c}] "))
    assert not {c.doc_id for c in report.cited_chunks} & {C[0].doc_id}
