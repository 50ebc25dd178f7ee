"""`forage library add PATH...`, `library remove DOC...`, `library fix-metadata DOC`, `library stats` and `library
list --json` end to end
(typer's CliRunner): two real PDFs and a broken one ingested once per module into a LanceDB store in a temporary
folder (PyMuPDF parser, in-process MiniLM embedder, the same IngestStep as a run); tests that change the store
work on a copy of it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gateway.cli import app
from gateway.cli_library import ingest_candidates, resolve_ids
from infra.settings import Settings
from infra.store import ChunkFilter, DocumentRecord, build_store
from messages.search import Candidate

# slow (whole suite only): the library CLI over real PDF folders, ~10 s
pytestmark = pytest.mark.slow

runner = CliRunner()
DVT, PHRASE = "dvt_prophylaxis_trauma_bmc2010.pdf", "phrase_generation_acl2014.pdf"  # 4 and 10 pages
PAGES = 4 + 10


def env(root: Path) -> dict[str, str]:
    return {"FORAGE_EMBED__BACKEND": "minilm", "FORAGE_NET__OFFLINE": "true",
            "FORAGE_RUN__RUNS_DIR": str(root / "runs")}


def invoke(args: list[str], root: Path):
    result = runner.invoke(app, args, env=env(root))
    return result, " ".join(result.output.split())


def flat(output: str) -> str:
    """The output without spaces, line breaks and table rules (rich wraps long cells)."""
    return re.sub(r"[\s│┃|]+", "", output)


def settings_for(store: Path) -> Settings:
    return Settings.load(embed={"backend": "minilm"}, store={"path": str(store)})


class Library:
    def __init__(self, root: Path, store: Path, papers: Path, added) -> None:
        self.root, self.store, self.papers, self.added = root, store, papers, added

    def copy(self, tmp_path: Path) -> Path:
        """A copy of the store to change (LanceDB is a folder of files)."""
        target = tmp_path / "store"
        shutil.copytree(self.store, target)
        return target


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, shared_pdfs: list[Path]) -> Library:
    root = tmp_path_factory.mktemp("library")
    pdf = {p.name: p for p in shared_pdfs}
    papers = root / "papers"
    (papers / "sub").mkdir(parents=True)
    shutil.copy(pdf[DVT], papers / DVT)
    shutil.copy(pdf[PHRASE], papers / "sub" / PHRASE)  # folders are searched recursively
    (papers / "broken.pdf").write_bytes(b"these bytes are not a PDF\n" * 8)
    (papers / "notes.txt").write_text("not a PDF, and not named like one: never tried\n")
    store = root / "store"
    added = invoke(["library", "add", str(papers), "--store", str(store)], root)
    return Library(root, store, papers, added)


def test_add_folder_ingests_its_pdfs_and_reports_the_broken_one(library: Library) -> None:
    result, text = library.added
    assert result.exit_code == 1, result.output  # one file failed, the others went on
    assert "3 files" in text and "2 new · 0 changed · 0 skipped · 1 failed" in text
    assert "broken.pdf" in text and "notaPDF" in flat(result.output)
    assert "notes.txt" not in text
    documents = build_store(settings_for(library.store)).list_documents()
    assert sorted(d.key for d in documents) == sorted(
        [f"file:{(library.papers / DVT).resolve()}", f"file:{(library.papers / 'sub' / PHRASE).resolve()}"])
    assert all(d.n_chunks > 0 and d.parser.startswith("pymupdf") for d in documents)


def test_add_again_skips_stored_files_also_under_another_name(library: Library, tmp_path: Path) -> None:
    twin = tmp_path / "same-bytes.pdf"  # another name, the same bytes: skipped by its hash
    shutil.copy(library.papers / DVT, twin)
    # options before the paths, and the explicit spelling `add files`, work as well
    result, text = invoke(["library", "add", "--store", str(library.store), str(library.papers / DVT), str(twin)],
                          library.root)
    assert result.exit_code == 0, result.output
    assert "0 new · 0 changed · 2 skipped · 0 failed" in text
    result, text = invoke(["library", "add", "files", str(library.papers / "sub"), "--store", str(library.store)],
                          library.root)
    assert result.exit_code == 0 and "0 new · 0 changed · 1 skipped · 0 failed" in text
    assert len(build_store(settings_for(library.store)).list_documents()) == 2


def test_bad_input_is_refused_before_anything_is_ingested(tmp_path: Path) -> None:
    store = tmp_path / "store"
    result, text = invoke(["library", "add", str(tmp_path / "gone.pdf"), "--store", str(store)], tmp_path)
    assert result.exit_code == 2 and "no such file or folder" in text and "gone.pdf" in text
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    (tmp_path / "empty" / "deeper" / "readme.txt").write_text("no PDFs here")
    result, text = invoke(["library", "add", str(tmp_path / "empty"), "--store", str(store)], tmp_path)
    assert result.exit_code == 2 and "no PDFs found" in text
    assert not store.exists()


def test_list_shows_ids_and_json_has_every_field(library: Library) -> None:
    documents = build_store(settings_for(library.store)).list_documents()
    result, text = invoke(["library", "list", "--store", str(library.store)], library.root)
    assert result.exit_code == 0 and all(d.doc_id[:12] in text for d in documents)
    result, _ = invoke(["library", "list", "--json", "--store", str(library.store)], library.root)
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert {d["doc_id"] for d in listed} == {d.doc_id for d in documents}
    assert {d["origin"] for d in listed} == {f"{DVT}, doi:10.1186/1752-2897-4-1", PHRASE}  # the file, then its DOI
    assert set(listed[0]) == {"doc_id", "key", "title", "authors", "year", "n_chunks", "parser", "flags", "origin",
                              "doi", "arxiv_id", "venue", "venue_kind"}
    assert {d["doi"] for d in listed} == {"10.1186/1752-2897-4-1", ""}
    venues = {d["origin"].split(", ")[0]: (d["venue"], d["venue_kind"]) for d in listed}
    assert venues[DVT] == ("Journal of Trauma Management & Outcomes", "journal")  # page 1's running header


def test_stats_counts_documents_chunks_pages_parsers_and_flags(library: Library, tmp_path: Path) -> None:
    store = library.copy(tmp_path)
    # a paper with no PDF, through the real ingest path: stored from title and abstract, flagged abstract_only
    abstract = Candidate(key="doi:10.1234/abstract-only", source="openalex", title="Heparin after trauma",
                         abstract="Low-molecular-weight heparin reduced deep venous thrombosis after major trauma "
                                  "without more bleeding.", year=2009, abstract_only=True)
    [stored] = ingest_candidates(settings_for(store), "test", [abstract])
    assert stored.status == "stored", stored.reason

    result, _ = invoke(["library", "stats", "--json", "--store", str(store)], tmp_path)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    documents = build_store(settings_for(store)).list_documents()
    assert data["documents"] == 3 and data["chunks"] == sum(d.n_chunks for d in documents)
    assert data["pages"] == PAGES and data["documents_with_pages"] == 2
    assert sum(data["by_parser"].values()) == 3 and data["by_parser"]["text"] == 1
    assert data["flagged_documents"] == 1
    assert data["flags"] == {"abstract_only": {"documents": 1, "doc_ids": [stored.doc_id]}}
    assert data["store"]["path"] == str(store.resolve()) and data["store"]["size_bytes"] > 0
    assert data["embedding"] == {"model": "minilm:all-minilm-l6-v2", "dim": 384, "recorded": True}

    result, text = invoke(["library", "stats", "--store", str(store)], tmp_path)
    assert result.exit_code == 0, result.output
    for expected in ("documents3", f"chunks{data['chunks']}", f"pages{PAGES}", "abstract_only:1",
                     "minilm:all-minilm-l6-v2", "sizeondisk"):
        assert expected in flat(result.output), expected


def test_remove_by_prefix_deletes_document_and_chunks_but_not_run_evidence(library: Library,
                                                                          tmp_path: Path) -> None:
    store = library.copy(tmp_path)
    lance = build_store(settings_for(store))
    gone = next(d for d in lance.list_documents() if d.origin.startswith(DVT))
    kept = next(d for d in lance.list_documents() if d.origin.startswith(PHRASE))
    [first_chunk] = lance.chunks(ChunkFilter(doc_ids=(gone.doc_id,)), limit=1)
    chunk_id = first_chunk.chunk_id
    assert lance.get_chunk(chunk_id) is not None
    evidence = tmp_path / "runs" / "r1" / "evidence.jsonl"
    evidence.parent.mkdir(parents=True)
    evidence.write_text(json.dumps({"chunk_id": chunk_id, "doc_id": gone.doc_id, "quote": "…"}) + "\n")
    before = evidence.read_bytes()
    zotero_state = tmp_path / "store.zotero-users-1.json"  # the default state file of `add zotero`
    zotero_state.write_text(json.dumps({"library": "users/1", "attachments": {
        "AAAA1111": {"version": 3, "sha256": gone.doc_id, "path": "/x/a.pdf"},
        "BBBB2222": {"version": 4, "sha256": kept.doc_id, "path": "/x/b.pdf"}}}))

    result, text = invoke(["library", "remove", gone.doc_id[:8].upper(), "--store", str(store)], tmp_path)
    assert result.exit_code == 0, result.output
    assert f"removed {gone.doc_id[:12]}" in text and "1 removed" in text
    lance = build_store(settings_for(store))
    assert [d.doc_id for d in lance.list_documents()] == [kept.doc_id]
    assert lance.count_chunks(gone.doc_id) == 0 and lance.get_chunk(chunk_id) is None
    assert lance.count_chunks() == kept.n_chunks
    assert evidence.read_bytes() == before  # runs keep their own evidence
    assert set(json.loads(zotero_state.read_text())["attachments"]) == {"BBBB2222"}  # add zotero brings it back


def test_the_dvt_paper_is_named_by_its_doi_and_fix_metadata_corrects_a_paper(library: Library,
                                                                              tmp_path: Path) -> None:
    from actors.steps.tools.export import to_bibtex
    from messages.write import SourceRef

    store = library.copy(tmp_path)
    docs = {d.origin.split(", ")[0]: d for d in build_store(settings_for(store)).list_documents()}
    assert docs[DVT].origin == f"{DVT}, doi:10.1186/1752-2897-4-1"  # labelled in the PDF's subject metadata
    assert (docs[DVT].doi, docs[DVT].arxiv_id) == ("10.1186/1752-2897-4-1", "")
    phrase = docs[PHRASE]
    assert phrase.origin == PHRASE  # the ACL 2014 paper prints no DOI
    result, text = invoke(["library", "fix-metadata", phrase.doc_id[:10], "--title", "How to make words with vectors",
                           "--author", "Georgiana Dinu", "--author", "Marco Baroni", "--year", "2014",
                           "--doi", "https://doi.org/10.3115/V1/P14-1059", "--store", str(store)], tmp_path)
    assert result.exit_code == 0, result.output
    assert f"fixed {phrase.doc_id[:12]}" in text and "Georgiana Dinu, Marco Baroni (2014)" in text
    lance = build_store(settings_for(store))
    fixed = lance.get_document(phrase.doc_id)
    assert fixed is not None and fixed.title == "How to make words with vectors" and fixed.year == 2014
    assert fixed.origin == f"{PHRASE}, doi:10.3115/v1/p14-1059" and fixed.n_chunks == phrase.n_chunks
    assert fixed.doi == "10.3115/v1/p14-1059" and phrase.doi == ""
    assert lance.count_chunks(phrase.doc_id) == phrase.n_chunks
    # the venue page 1 prints (ACL's proceedings): a conference paper, @inproceedings with its booktitle
    assert (fixed.venue, fixed.venue_kind) == ("Proceedings of the 52nd Annual Meeting of the Association for "
                                               "Computational Linguistics", "conference")
    [entry] = to_bibtex([SourceRef(n=1, doc_id=fixed.doc_id, title=fixed.title, authors=fixed.authors,
                                   year=fixed.year, origin=fixed.origin, venue=fixed.venue,
                                   venue_kind=fixed.venue_kind)]).split("\n\n")[:1]
    assert entry.startswith("@inproceedings{dinu2014,") and "doi = {10.3115/v1/p14-1059}" in entry
    assert "booktitle = {Proceedings of the 52nd Annual Meeting" in entry
    # --venue keeps the kind it had; a first venue needs its kind; '' removes both
    result, _ = invoke(["library", "fix-metadata", phrase.doc_id, "--venue", "ACL 2014", "--store", str(store)],
                       tmp_path)
    assert result.exit_code == 0 and (build_store(settings_for(store)).get_document(phrase.doc_id).venue_kind
                                      == "conference")
    result, _ = invoke(["library", "fix-metadata", phrase.doc_id, "--venue", "", "--store", str(store)], tmp_path)
    gone = build_store(settings_for(store)).get_document(phrase.doc_id)
    assert result.exit_code == 0 and (gone.venue, gone.venue_kind) == ("", "")
    result, text = invoke(["library", "fix-metadata", phrase.doc_id, "--venue", "ACL 2014", "--store", str(store)],
                          tmp_path)
    assert result.exit_code == 2 and "--venue needs --venue-kind" in text
    # --doi '' drops it again; a wrong DOI, an unknown id or nothing to change is one clear error
    result, _ = invoke(["library", "fix-metadata", phrase.doc_id, "--doi", "", "--store", str(store)], tmp_path)
    dropped = build_store(settings_for(store)).get_document(phrase.doc_id)
    assert result.exit_code == 0 and dropped.origin == PHRASE and dropped.doi == ""
    result, text = invoke(["library", "fix-metadata", phrase.doc_id, "--doi", "P14-1059", "--store", str(store)],
                          tmp_path)
    assert result.exit_code == 1 and "'P14-1059' is not a DOI" in text
    result, text = invoke(["library", "fix-metadata", "ffff", "--year", "2000", "--store", str(store)], tmp_path)
    assert result.exit_code == 2 and "no document 'ffff'" in text and "nothing was changed" in text
    result, text = invoke(["library", "fix-metadata", phrase.doc_id, "--store", str(store)], tmp_path)
    assert result.exit_code == 2 and "nothing to change" in text


def test_remove_refuses_unknown_ids_and_removes_nothing(library: Library, tmp_path: Path) -> None:
    store = library.copy(tmp_path)
    [first, _] = build_store(settings_for(store)).list_documents()
    result, text = invoke(["library", "remove", first.doc_id, "nothing-like-this", "--store", str(store)], tmp_path)
    assert result.exit_code == 2 and "no document 'nothing-like-this'" in text and "nothing was removed" in text
    assert len(build_store(settings_for(store)).list_documents()) == 2
    result, text = invoke(["library", "remove", "abc", "--store", str(tmp_path / "none")], tmp_path)
    assert result.exit_code == 2 and "no store at" in text


def test_an_ambiguous_prefix_names_the_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    docs = [DocumentRecord(doc_id=f"ab{c}" + "0" * 61, key=f"file:/{c}", title=c, markdown="", parser="text")
            for c in "cd"]
    assert [d.title for d in resolve_ids(docs, ["abd", "ABC", "abc0"])] == ["d", "c"]  # each once, in order
    with pytest.raises(typer.Exit) as caught:
        resolve_ids(docs, ["ab"])
    assert caught.value.exit_code == 2
    message = " ".join(capsys.readouterr().err.split())
    assert "'ab' is ambiguous (2 documents: abc000000000, abd000000000)" in message
