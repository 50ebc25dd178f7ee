"""`forage library match`: stored documents matched against OpenAlex (the loopback replay of recorded works) by
DOI or title, only after approval, filling only what is missing; and the BibTeX/RIS entry types the venue gives.

The store is a real LanceDB folder holding documents written directly (one chunk each, a unit vector): matching
reads and rewrites the document registry only, so no embedder is needed."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from actors.steps.ingest.match import best_match, lookup_for, outcome
from actors.steps.tools.export import to_bibtex, to_ris
from gateway.cli import app
from infra.net import EgressLedger
from infra.settings import Settings
from infra.sources.openalex import to_candidate
from infra.store import ChunkRecord, DocumentRecord, build_store
from messages.write import SourceRef
from tests.loopback_sources import loopback_sources  # noqa: F401  (fixture)

runner = CliRunner()
PNAS_DOI = "10.1073/pnas.1414271111"
PNAS_TITLE = ("Developing functional musculoskeletal tissues through hypoxia and lysyl oxidase-induced collagen "
              "cross-linking")
CHEM = "Augmenting large language models with chemistry tools"
PAPERQA = "PaperQA: Retrieval-Augmented Generative Agent for Scientific Research"


def doc(name: str, title: str, *, origin: str = "", authors: tuple[str, ...] = (), year: int | None = None,
        venue: str = "", venue_kind: str = "") -> DocumentRecord:
    return DocumentRecord(doc_id=hashlib.sha256(name.encode()).hexdigest(), key=f"file:/papers/{name}", title=title,
                          authors=authors, year=year, markdown=f"# {title}\n\nSome text.\n", parser="test",
                          n_chunks=1, origin=origin or name, venue=venue, venue_kind=venue_kind)  # type: ignore[arg-type]


def recorded(shared_data: Path, name: str) -> list:
    data = json.loads((shared_data / "api-fixtures" / "openalex" / name).read_text())
    return [to_candidate(w, found_by="test") for w in data.get("results", [data])]


# -- the matching rules, on recorded works ------------------------------------------------------------------------
def test_a_doi_match_fills_only_what_is_missing(shared_data: Path) -> None:
    [work] = recorded(shared_data, "work_by_doi_10.1073_pnas.1414271111.json")
    pnas = doc("pnas.pdf", PNAS_TITLE, origin=f"pnas.pdf, doi:{PNAS_DOI}")
    assert lookup_for(pnas).shown() == f"doi {PNAS_DOI}"
    found = outcome(pnas, [work])
    assert found.work is work and found.differences == []
    assert found.changes == {"authors": work.authors, "year": 2014,
                             "venue": "Proceedings of the National Academy of Sciences", "venue_kind": "journal",
                             "cited_by_count": 138, "oa_status": "bronze"}  # OpenAlex's weight of the work
    # what the document already has stays; what differs is reported
    kept = outcome(doc("pnas.pdf", PNAS_TITLE, origin=f"pnas.pdf, doi:{PNAS_DOI}", authors=("E. Makris",),
                       year=2015, venue="PNAS", venue_kind="journal"), [work])
    assert kept.changes == {"cited_by_count": 138, "oa_status": "bronze"}  # the weight is OpenAlex's to say
    assert kept.differences == ["year: 2015 here, 2014 in OpenAlex",
                                "venue: PNAS here, Proceedings of the National Academy of Sciences in OpenAlex"]


def test_a_title_match_takes_the_journal_version_and_refuses_works_that_disagree(shared_data: Path) -> None:
    works = recorded(shared_data, "works_filter_title_search_chemistry_tools.json")
    chem = doc("chem.pdf", CHEM, authors=("Andres Bran",), year=2023)
    assert lookup_for(chem).shown() == f'title "{CHEM}"'
    found = outcome(chem, works)
    assert found.work is not None and found.work.openalex_id == "W4396723768"  # not the ChemCrow preprint
    assert found.changes == {"venue": "Nature Machine Intelligence", "venue_kind": "journal",
                             "origin": "chem.pdf, doi:10.1038/s42256-024-00832-8", "doi": "10.1038/s42256-024-00832-8",
                             "cited_by_count": 236, "oa_status": "hybrid"}
    assert found.differences == ["year: 2023 here, 2024 in OpenAlex"]
    # another first author, a year too far, or another title: not this paper, nothing filled
    for other, why in ((doc("c.pdf", CHEM, authors=("Jane Smith",)), "first author 'Jane Smith'"),
                       (doc("c.pdf", CHEM, year=2019), "year"),
                       (doc("c.pdf", "Augmenting small models with physics tools"), "title differs")):
        work, reason = best_match(other, works)
        assert work is None and why in reason
        assert outcome(other, works).changes == {}


def test_a_preprint_gives_its_arxiv_id_not_a_venue_or_its_datacite_doi(shared_data: Path) -> None:
    [work] = recorded(shared_data, "works_filter_title_search_paperqa.json")
    found = outcome(doc("paperqa.pdf", PAPERQA), [work])
    assert found.changes["origin"] == "paperqa.pdf, arXiv:2312.07559"  # 10.48550/arxiv.… is not taken as a DOI
    assert "venue" not in found.changes and found.changes["year"] == 2023


# -- the command, against the loopback OpenAlex ---------------------------------------------------------------
def _store(path: Path, docs: list[DocumentRecord]) -> None:
    store = build_store(Settings.load(embed={"backend": "minilm"}, store={"path": str(path)}))
    rng = np.random.default_rng(0)
    for d in docs:
        vector = rng.normal(size=384)
        chunk = ChunkRecord(chunk_id=f"{d.doc_id[:16]}:0", doc_id=d.doc_id, ordinal=0, text="Some text.",
                            section_path="Body", char_start=len(d.markdown) - 11, char_end=len(d.markdown) - 1,
                            token_count=3)
        store.upsert_document(d, [chunk], [list(vector / np.linalg.norm(vector))])


def _run(args: list[str], srv, tmp_path: Path, answer: str | None = None, **env: str):
    environment = {"FORAGE_SEARCH__OPENALEX_URL": srv.openalex_url, "FORAGE_EMBED__BACKEND": "minilm",
                   "FORAGE_RUN__RUNS_DIR": str(tmp_path / "runs"), "FORAGE_NET__OFFLINE": "false",
                   "FORAGE_SEARCH__MAILTO": "", **env}
    result = runner.invoke(app, ["library", "match", *args, "--store", str(tmp_path / "store")], env=environment,
                           input=answer)
    return result, " ".join(result.output.split())


def _flat(text: str) -> str:
    return re.sub(r"[\s│┃|]+", "", text)


@pytest.fixture
def library(tmp_path: Path) -> dict[str, DocumentRecord]:
    docs = {"pnas": doc("pnas.pdf", PNAS_TITLE, origin=f"pnas.pdf, doi:{PNAS_DOI}"),
            "chem": doc("chem.pdf", CHEM, authors=("Andres M. Bran",), year=2024),
            "none": doc("garden.pdf", "Quantum gardening under partial shade conditions", authors=("A. Nobody",),
                        year=2020),
            "done": doc("done.pdf", "A paper already described", authors=("Ann Lee",), year=2021,
                        origin="done.pdf, doi:10.1000/done", venue="Journal of Things", venue_kind="journal")}
    _store(tmp_path / "store", list(docs.values()))
    return docs


def test_match_shows_every_lookup_and_sends_nothing_when_declined(loopback_sources, tmp_path: Path,
                                                                  library: dict[str, DocumentRecord]) -> None:
    result, text = _run([], loopback_sources, tmp_path, answer="n\n")
    assert result.exit_code == 0, result.output
    assert "These 3 lookups would leave this machine, to OpenAlex" in text  # the fully described one is not asked
    assert f"doi {PNAS_DOI}" in text and f'title "{CHEM}"' in text and "Quantum gardening" in text
    assert "A paper already described" not in text
    assert "Nothing was sent; nothing was changed." in text
    assert loopback_sources.received("/works") == [] and not (tmp_path / "runs").exists()
    # offline: shown, refused with one sentence, nothing sent
    result, text = _run(["--yes"], loopback_sources, tmp_path, FORAGE_NET__OFFLINE="true")
    assert result.exit_code == 1 and "net.offline is set: nothing was sent" in text
    assert loopback_sources.received("/works") == []


def test_match_with_approval_fills_the_store_and_records_each_request(loopback_sources, tmp_path: Path,
                                                                      library: dict[str, DocumentRecord]) -> None:
    result, text = _run([], loopback_sources, tmp_path, answer="y\n")
    assert result.exit_code == 0, result.output
    flat = _flat(result.output)
    assert "2filled·0unchanged·1nomatch·0failed" in flat
    store = build_store(Settings.load(embed={"backend": "minilm"}, store={"path": str(tmp_path / "store")}))
    pnas = store.get_document(library["pnas"].doc_id)
    assert pnas.year == 2014 and pnas.authors[0] == "Eleftherios Makris" and pnas.title == PNAS_TITLE
    assert (pnas.venue, pnas.venue_kind) == ("Proceedings of the National Academy of Sciences", "journal")
    chem = store.get_document(library["chem"].doc_id)
    assert chem.origin == "chem.pdf, doi:10.1038/s42256-024-00832-8" and chem.venue == "Nature Machine Intelligence"
    none = store.get_document(library["none"].doc_id)  # no match: untouched but for the looked-up flag
    assert none == library["none"].model_copy(update={"flags": ("openalex_looked_up",)})
    assert store.count_chunks(library["chem"].doc_id) == 1  # chunks and vectors kept
    # the three requests, each in the ledger: the DOI and the two exact titles shown before
    requests = loopback_sources.received("/works")
    assert len(requests) == 3
    [ledger_file] = (tmp_path / "runs").glob("library-*/egress.jsonl")
    records = EgressLedger.read(ledger_file)
    assert len(records) == 3 and {r.purpose for r in records} == {"openalex"}
    assert _flat(f"ledger {ledger_file}") in flat
    # the BibTeX and RIS written from the matched records
    sources = [SourceRef(n=i, doc_id=d.doc_id, title=d.title, authors=d.authors, year=d.year, origin=d.origin,
                         venue=d.venue, venue_kind=d.venue_kind) for i, d in enumerate((pnas, chem), 1)]
    bib = to_bibtex(sources)
    assert "@article{makris2014," in bib and "journal = {Proceedings of the National Academy of Sciences}" in bib
    assert "doi = {10.1038/s42256-024-00832-8}" in bib and "journal = {Nature Machine Intelligence}" in bib
    assert "T2  - Nature Machine Intelligence" in to_ris(sources)
    # a second run finds nothing more to fill for the matched ones (and asks only for what still lacks something)
    result, text = _run([library["pnas"].doc_id[:10], "--yes"], loopback_sources, tmp_path)
    assert result.exit_code == 0 and "This lookup would leave this machine" in text
    assert "0filled·1unchanged·0nomatch·0failed" in _flat(result.output)  # nothing missing it could fill


def test_entry_types_follow_the_venue_kind() -> None:
    base = {"doc_id": "d" * 64, "title": "A title", "authors": ("Ann Lee",), "year": 2020}
    conference = SourceRef(n=1, origin="a.pdf", venue="Proceedings of the 58th Annual Meeting of the ACL",
                           venue_kind="conference", **base)
    preprint = SourceRef(n=2, origin="b.pdf, arXiv:2302.07302", **base)
    bare = SourceRef(n=3, origin="c.pdf", **base)
    bib = to_bibtex([conference, preprint, bare]).split("\n\n")
    assert bib[0].startswith("@inproceedings{lee2020,") and "booktitle = {Proceedings of the 58th" in bib[0]
    assert bib[1].startswith("@misc{lee2020a,") and "eprint = {2302.07302}" in bib[1]
    assert bib[2].startswith("@misc{lee2020b,") and "journal" not in bib[2]
    ris = to_ris([conference, preprint, bare]).split("\n\n")
    assert ris[0].startswith("TY  - CONF") and "T2  - Proceedings of the 58th" in ris[0] and "C3  - " in ris[0]
    assert ris[1].startswith("TY  - UNPB") and ris[2].startswith("TY  - GEN")


def test_a_document_looked_up_before_is_not_sent_again_unless_asked(loopback_sources, tmp_path: Path,
                                                                     library: dict[str, DocumentRecord]) -> None:
    """A document OpenAlex cannot complete (no match, or a preprint, which never gets a venue) was looked up again on
    every run, its title leaving the machine each time."""
    from actors.steps.ingest.match import LOOKED_UP

    result, _ = _run(["--yes"], loopback_sources, tmp_path)
    assert result.exit_code == 0, result.output
    assert len(loopback_sources.received("/works")) == 3
    store = build_store(Settings.load(embed={"backend": "minilm"}, store={"path": str(tmp_path / "store")}))
    none = store.get_document(library["none"].doc_id)
    assert LOOKED_UP in none.flags and none.title == library["none"].title  # no match: only the flag
    assert LOOKED_UP in store.get_document(library["pnas"].doc_id).flags
    assert store.count_chunks(library["none"].doc_id) == 1
    # the next run sends nothing: the one still lacking fields was answered before
    result, text = _run(["--yes"], loopback_sources, tmp_path)
    assert result.exit_code == 0, result.output
    assert "1 document(s) looked up before and still lacking a field are not sent again" in text
    assert "Nothing to look up: the documents still lacking a field were looked up before." in text
    assert len(loopback_sources.received("/works")) == 3
    # asked for: --again, or by name
    result, text = _run(["--yes", "--again"], loopback_sources, tmp_path)
    assert result.exit_code == 0 and "Quantum gardening" in text
    assert len(loopback_sources.received("/works")) == 4
    result, text = _run([library["none"].doc_id[:10], "--yes"], loopback_sources, tmp_path)
    assert result.exit_code == 0 and len(loopback_sources.received("/works")) == 5
