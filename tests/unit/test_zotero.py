"""ZoteroLibrary (push, pull, CSV) with the real pyzotero client against the loopback Zotero Web API,
which replays the recorded responses of the public test library and keeps writes in memory."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from infra.errors import ConfigError
from infra.net import Egress, EgressLedger
from infra.settings import NetSettings, ZoteroSettings
from infra.sources.zotero import ZoteroLibrary
from infra.sources.zotero_records import ZoteroError, load_state, read_zotero_csv
from messages.search import Candidate
from tests.loopback_zotero import LoopbackZotero

SCIENCES = "BX9965IJ"  # recorded collection "Sciences (miscellaneous)"
BISCROLLING = "33TK9NH9"  # recorded journalArticle in it, DOI 10.1126/science.1195912, 2011
SENSITIZATION = "3EWF3P9V"  # recorded journalArticle in it, 2011, no DOI


@pytest.fixture
def fixtures(shared_data: Path) -> Path:
    return shared_data / "api-fixtures" / "zotero"


@pytest.fixture
def server(fixtures: Path):
    with LoopbackZotero(fixtures) as srv:
        yield srv


@pytest.fixture
def egress(tmp_path: Path) -> Egress:
    return Egress(NetSettings(retries=2, backoff_s=0), EgressLedger(tmp_path / "egress.jsonl"))


def library(server: LoopbackZotero, egress: Egress, **settings) -> ZoteroLibrary:
    values = {"library_id": server.library_id, "api_key": server.api_key, "endpoint": server.url, **settings}
    return ZoteroLibrary(ZoteroSettings(**values), egress)


def accepted(shared_pdfs: list[Path]) -> list[Candidate]:
    pdf = {p.name: p for p in shared_pdfs}
    return [
        Candidate(key="doi:10.7717/peerj-cs.107", source="openalex", doi="10.7717/PEERJ-CS.107",
                  openalex_id="W2744423345", title="Vespa: a search engine for structured data",
                  authors=("Jon Bratseth", "Kristian Haugaard"), year=2017, venue="PeerJ Computer Science",
                  landing_url="https://peerj.com/articles/cs-107/", path=str(pdf["vespa_peerjcs2017.pdf"]),
                  abstract="A search engine."),
        Candidate(key="arxiv:2304.02623", source="arxiv", arxiv_id="2304.02623",
                  title="Beyond Summarization: Designing AI Support for Real-World Expository Writing Tasks",
                  authors=("Zejiang Shen", "Tal August"), year=2023,
                  path=str(pdf["beyond_summarization_arxiv2304.02623v1.pdf"])),
        Candidate(key="doi:10.1000/no-pdf", source="openalex", doi="10.1000/no-pdf", title="A Paper Without a PDF",
                  authors=("Solo",), year=2020, abstract_only=True),
    ]


def ledger_matches_server(egress: Egress, server: LoopbackZotero) -> None:
    """Every request the server saw is in the egress ledger, in order, with its status."""
    sent = [(r.method, r.path) for r in server.requests]
    recorded = [(r.method, r.path) for r in egress.ledger if r.status is not None]
    assert recorded == sent and sent


# ---------------------------------------------------------------------------------------------- push

def test_push_files_papers_in_a_new_collection_with_fields_and_pdfs(server, egress, shared_pdfs) -> None:
    candidates = accepted(shared_pdfs)
    with library(server, egress) as zot:
        result = zot.push("run-7", None, candidates)

    assert result.error is None and result.collection_created
    assert [(i.status, i.attachment) for i in result.items] == [
        ("created", "uploaded"), ("created", "uploaded"), ("created", "none")]
    collection = server.collection_named("Forage run-7")
    assert collection is not None and collection["key"] == result.collection_key
    filed = {i["key"]: i["data"] for i in server.in_collection(result.collection_key)}
    assert set(filed) == {i.item_key for i in result.items}

    vespa = filed[result.items[0].item_key]
    assert vespa["itemType"] == "journalArticle" and vespa["title"] == candidates[0].title
    assert vespa["DOI"] == "10.7717/peerj-cs.107" and vespa["date"] == "2017"
    assert vespa["url"] == "https://peerj.com/articles/cs-107/"
    assert vespa["publicationTitle"] == "PeerJ Computer Science"
    assert vespa["creators"] == [{"creatorType": "author", "firstName": "Jon", "lastName": "Bratseth"},
                                 {"creatorType": "author", "firstName": "Kristian", "lastName": "Haugaard"}]
    assert vespa["extra"].splitlines() == ["Forage run: run-7", "Source database: OpenAlex", "OpenAlex: W2744423345"]
    preprint = filed[result.items[1].item_key]
    assert preprint["itemType"] == "preprint" and preprint["archiveID"] == "arXiv:2304.02623"
    assert preprint["repository"] == "arXiv" and preprint["url"] == "https://arxiv.org/abs/2304.02623"
    assert "Source database: arXiv" in preprint["extra"]

    for item, candidate in zip(result.items[:2], candidates[:2], strict=True):  # the PDFs went up, byte for byte
        [attachment] = server.children_of(item.item_key)
        data = attachment["data"]
        assert (data["itemType"], data["linkMode"], data["contentType"]) == (
            "attachment", "imported_file", "application/pdf")
        content = Path(candidate.path).read_bytes()
        assert server.files[attachment["key"]] == content and data["md5"] == hashlib.md5(content).hexdigest()
        assert data["filename"] == Path(candidate.path).name
    assert server.children_of(result.items[2].item_key) == []
    ledger_matches_server(egress, server)
    uploads = [r for r in egress.ledger if r.path.startswith("/_upload/")]
    assert len(uploads) == 2 and all(r.bytes_out > 100_000 for r in uploads)  # the storage POST is recorded too
    assert all("Authorization" not in r.headers for r in server.requests if r.path.startswith("/_upload/"))


def test_second_push_creates_no_duplicates(server, egress, shared_pdfs) -> None:
    candidates = accepted(shared_pdfs)
    with library(server, egress) as zot:
        first = zot.push("run-7", None, candidates)
        before = len(server.items)
        writes = len(server.writes())
        again = zot.push("run-7", None, candidates)
    assert [(i.status, i.item_key) for i in again.items] == [("existing", i.item_key) for i in first.items]
    assert [i.attachment for i in again.items] == ["present", "present", "none"]
    assert not again.collection_created and again.collection_key == first.collection_key
    assert len(server.items) == before and len(server.writes()) == writes  # nothing written at all


def test_paper_already_in_the_library_is_filed_not_created(server, egress) -> None:
    # the recorded library holds "Sherlock Holmes in Babylon" (DOI 10.2307/2321200, 1980)
    by_doi = Candidate(key="doi:10.2307/2321200", source="openalex", doi="https://doi.org/10.2307/2321200",
                       title="Sherlock Holmes in Babylon (another spelling)", year=1980)
    by_title = Candidate(key="openalex:W1", source="openalex", title="Does Sensitization to Foods in Adults Occur "
                         "Always in the Gut?", year=2011)
    with library(server, egress) as zot:
        result = zot.push("run-1", "Forage shelf", [by_doi, by_title])
    assert [(i.status, i.item_key) for i in result.items] == [("existing", "PQKBRC33"), ("existing", SENSITIZATION)]
    collection = result.collection_key
    assert collection in server.items["PQKBRC33"]["data"]["collections"]
    assert collection in server.items[SENSITIZATION]["data"]["collections"]
    assert not [r for r in server.writes() if r.path.endswith("/items")]  # no item was created


def test_no_write_access_is_reported_not_raised(server, egress, shared_pdfs) -> None:
    server.fail(403, r"/collections$", method="POST", times=-1)
    with library(server, egress) as zot:
        result = zot.push("run-7", None, accepted(shared_pdfs))
    assert result.error is not None and "no write access (403)" in result.error
    assert "zotero.org/settings/keys" in result.error
    assert {i.status for i in result.items} == {"failed"} and not any(i.retryable for i in result.items)
    assert server.collection_named("Forage run-7") is None


def test_403_on_items_fails_each_paper_with_the_reason(server, egress, shared_pdfs) -> None:
    server.fail(403, r"/items$", method="POST", times=-1)
    with library(server, egress) as zot:
        result = zot.push("run-7", None, accepted(shared_pdfs))
    assert result.error is None and result.collection_key is not None
    assert {i.status for i in result.items} == {"failed"}
    assert all("no write access (403)" in i.reason for i in result.items)


def test_412_is_reported_as_retryable(server, egress, shared_pdfs) -> None:
    server.fail(412, r"/items$", method="POST", times=-1)
    with library(server, egress) as zot:
        result = zot.push("run-7", None, accepted(shared_pdfs)[:1])
    [item] = result.items
    assert item.status == "failed" and "412" in item.reason and item.retryable


def test_429_with_retry_after_is_retried(server, egress, shared_pdfs) -> None:
    server.fail(429, r"/items$", method="POST", times=1, retry_after="0")
    with library(server, egress) as zot:
        result = zot.push("run-7", None, accepted(shared_pdfs)[:1])
    assert [(i.status, i.attachment) for i in result.items] == [("created", "uploaded")]
    posts = [r.status for r in egress.ledger if r.method == "POST" and r.path.endswith("/items")]
    assert posts[:2] == [429, 200]


def test_429_for_ever_is_reported(server, egress, shared_pdfs) -> None:
    server.fail(429, r"/items$", method="POST", times=-1, retry_after="0")
    with library(server, egress) as zot:
        result = zot.push("run-7", None, accepted(shared_pdfs)[:1])
    [item] = result.items
    assert item.status == "failed" and "429" in item.reason and item.retryable


def test_failed_upload_is_reported_and_finished_on_the_next_push(server, egress, shared_pdfs) -> None:
    server.fail(500, r"^/_upload/", times=-1)
    candidates = accepted(shared_pdfs)[:1]
    with library(server, egress) as zot:
        first = zot.push("run-7", None, candidates)
        assert (first.items[0].status, first.items[0].attachment) == ("created", "failed")
        assert "PDF not uploaded" in first.items[0].reason
        server._failures.clear()
        again = zot.push("run-7", None, candidates)
    assert (again.items[0].status, again.items[0].attachment) == ("existing", "uploaded")
    [attachment] = server.children_of(first.items[0].item_key)  # the unfinished attachment item was reused
    assert server.files[attachment["key"]] == Path(candidates[0].path).read_bytes()


# ---------------------------------------------------------------------------------------------- pull

@pytest.fixture
def seeded(server, shared_pdfs):
    pdf = {p.name: p for p in shared_pdfs}
    keys = {
        BISCROLLING: server.add_attachment(BISCROLLING, pdf["s2orc_acl2020.pdf"]),
        SENSITIZATION: server.add_attachment(SENSITIZATION, pdf["dvt_prophylaxis_trauma_bmc2010.pdf"]),
    }
    return server, keys, pdf


def test_pull_returns_the_attachments_as_candidates_with_local_files(seeded, egress, tmp_path) -> None:
    server, keys, pdf = seeded
    state = tmp_path / "state.json"
    with library(server, egress) as zot:
        result = zot.pull("Sciences (miscellaneous)", state, folder=tmp_path / "files")
    assert result.collection == SCIENCES and result.failed == ()
    assert {i.status for i in result.items} == {"new"}
    by_key = {c.key: c for c in result.candidates}
    biscrolling = by_key[f"zotero:users/475425/items/{keys[BISCROLLING]}"]
    assert biscrolling.source == "zotero" and biscrolling.doi == "10.1126/science.1195912"
    assert biscrolling.year == 2011 and biscrolling.title.startswith("Biscrolling Nanotube Sheets")
    assert biscrolling.authors[:3] == ("Márcio D. Lima", "Shaoli Fang", "Xavier Lepró")
    assert Path(biscrolling.path).read_bytes() == pdf["s2orc_acl2020.pdf"].read_bytes()
    assert Path(biscrolling.path).is_relative_to(tmp_path / "files")
    saved = load_state(state, "users/475425")
    assert set(saved) == set(keys.values())
    assert saved[keys[BISCROLLING]].sha256 == hashlib.sha256(pdf["s2orc_acl2020.pdf"].read_bytes()).hexdigest()
    ledger_matches_server(egress, server)


def test_second_pull_returns_nothing_new_and_downloads_nothing(seeded, egress, tmp_path) -> None:
    server, keys, _ = seeded
    state = tmp_path / "state.json"
    with library(server, egress) as zot:
        zot.pull(SCIENCES, state, folder=tmp_path / "files")
        server.requests.clear()
        again = zot.pull(SCIENCES, state, folder=tmp_path / "files")
        server.touch(keys[SENSITIZATION])  # a metadata edit: new version, same file (same md5)
        touched = zot.pull(SCIENCES, state, folder=tmp_path / "files")
    assert again.candidates == [] and {i.status for i in again.items} == {"unchanged"}
    assert touched.candidates == [] and {i.status for i in touched.items} == {"unchanged"}
    assert not [r for r in server.requests if "/file" in r.path or r.path.startswith("/_storage")]
    remembered = load_state(state, "users/475425")[keys[SENSITIZATION]]
    assert remembered.version == server.items[keys[SENSITIZATION]]["version"]


def test_changed_attachment_is_returned_again(seeded, egress, tmp_path, shared_pdfs) -> None:
    server, keys, pdf = seeded
    state = tmp_path / "state.json"
    new_bytes = pdf["reverb_openie_emnlp2011.pdf"].read_bytes()
    with library(server, egress) as zot:
        first = zot.pull(SCIENCES, state, folder=tmp_path / "files")
        server.replace_file(keys[BISCROLLING], new_bytes)
        changed = zot.pull(SCIENCES, state, folder=tmp_path / "files")
    assert [(i.attachment_key, i.status) for i in changed.items if i.status != "unchanged"] == [
        (keys[BISCROLLING], "changed")]
    [candidate] = changed.candidates
    old = next(c for c in first.candidates if c.key == candidate.key)
    assert candidate.key == old.key  # same key: the store replaces the earlier version
    assert Path(candidate.path).read_bytes() == new_bytes
    assert load_state(state, "users/475425")[keys[BISCROLLING]].sha256 == hashlib.sha256(new_bytes).hexdigest()


def test_uncommitted_pull_is_offered_again(seeded, egress, tmp_path) -> None:
    server, keys, _ = seeded
    state = tmp_path / "state.json"
    with library(server, egress) as zot:
        first = zot.pull(SCIENCES, state, folder=tmp_path / "files", commit=False)
        zot.commit(first, state, keys=[keys[BISCROLLING]])  # only one of them was ingested
        again = zot.pull(SCIENCES, state, folder=tmp_path / "files")
    assert [i.attachment_key for i in again.items if i.status == "new"] == [keys[SENSITIZATION]]


def test_linked_files_are_used_where_they_lie(server, egress, tmp_path, shared_pdfs) -> None:
    linked = shared_pdfs[0]
    key = server.add_attachment(BISCROLLING, linked, link_mode="linked_file")
    with library(server, egress) as zot:
        result = zot.pull(SCIENCES, tmp_path / "state.json", folder=tmp_path / "files")
    [candidate] = result.candidates
    assert candidate.key.endswith(key) and candidate.path == str(linked)
    assert not (tmp_path / "files").exists()


def test_local_api_locates_files_in_zotero_storage(fixtures, egress, tmp_path, shared_pdfs) -> None:
    with LoopbackZotero(fixtures, local=True, api_key=None, library_id="0", data_dir=tmp_path / "Zotero") as srv:
        key = srv.add_attachment(BISCROLLING, shared_pdfs[3])
        zot = ZoteroLibrary(ZoteroSettings(local=True, endpoint=srv.url), egress)
        result = zot.pull(None, tmp_path / "state.json", folder=tmp_path / "files")
        zot.close()
    [candidate] = result.candidates
    assert candidate.path == str((tmp_path / "Zotero" / "storage" / key / shared_pdfs[3].name).resolve())
    assert candidate.title.startswith("Biscrolling") and not (tmp_path / "files").exists()
    assert all(r.path.startswith("/api/") for r in srv.requests)


def test_a_broken_attachment_is_reported_and_the_rest_pulled(seeded, egress, tmp_path) -> None:
    server, keys, _ = seeded
    server.fail(404, rf"/items/{keys[SENSITIZATION]}/file$", times=-1)
    with library(server, egress) as zot:
        result = zot.pull(SCIENCES, tmp_path / "state.json", folder=tmp_path / "files")
    assert [c.key.rsplit("/", 1)[-1] for c in result.candidates] == [keys[BISCROLLING]]
    [failed] = result.failed
    assert failed.item.startswith(keys[SENSITIZATION]) and "404" in failed.reason
    assert keys[SENSITIZATION] not in load_state(tmp_path / "state.json", "users/475425")


def test_unknown_collection_names_the_ones_there(server, egress, tmp_path) -> None:
    with library(server, egress) as zot, pytest.raises(ZoteroError) as err:
        zot.pull("Nope", tmp_path / "state.json", folder=tmp_path)
    assert "no Zotero collection named 'Nope'" in str(err.value) and "Sherlock Holmes" in str(err.value)


def test_missing_settings_say_which_to_set(egress) -> None:
    with pytest.raises(ConfigError, match="FORAGE_ZOTERO__LIBRARY_ID"):
        ZoteroLibrary(ZoteroSettings(api_key="k"), egress)
    with pytest.raises(ConfigError, match="FORAGE_ZOTERO__API_KEY"):
        ZoteroLibrary(ZoteroSettings(library_id="1"), egress)


def test_offline_sends_nothing(server, tmp_path, shared_pdfs) -> None:
    egress = Egress(NetSettings(offline=True), EgressLedger())
    with library(server, egress) as zot:
        result = zot.push("run-7", None, accepted(shared_pdfs))
        with pytest.raises(ZoteroError, match="offline"):
            zot.pull(SCIENCES, tmp_path / "state.json", folder=tmp_path)
    assert result.error is not None and "offline" in result.error
    assert {i.status for i in result.items} == {"failed"}
    assert server.requests == []
    assert {r.error for r in egress.ledger} == {"refused: offline"}


def test_wrong_key_is_a_clear_error(server, egress, tmp_path) -> None:
    with library(server, egress, api_key="wrong") as zot, pytest.raises(ZoteroError, match="not authorised"):
        zot.pull(None, tmp_path / "state.json", folder=tmp_path)


# ----------------------------------------------------------------------------------------------- CSV

def test_csv_export_good_missing_and_non_pdf_attachments(tmp_path, shared_pdfs) -> None:
    import csv

    html = tmp_path / "snapshot.pdf"
    html.write_text("<html><body>a saved web page</body></html>")
    notes = tmp_path / "notes.txt"
    notes.write_text("notes")
    good = shared_pdfs[0]
    rows = [
        {"Key": "AAAA1111", "Item Type": "journalArticle", "Publication Year": "2017", "Author":
         "Bratseth, Jon; Haugaard, Kristian", "Title": "Vespa", "DOI": "10.7717/peerj-cs.107",
         "File Attachments": f"{notes}; {good}"},
        {"Key": "BBBB2222", "Item Type": "book", "Publication Year": "1999", "Author": "Solo, Han", "Title": "Gone",
         "DOI": "", "File Attachments": str(tmp_path / "missing.pdf")},
        {"Key": "CCCC3333", "Item Type": "webpage", "Publication Year": "", "Author": "", "Title": "Page",
         "DOI": "", "File Attachments": str(html)},
        {"Key": "DDDD4444", "Item Type": "book", "Publication Year": "2001", "Author": "", "Title": "No files",
         "DOI": "", "File Attachments": ""},
    ]
    export = tmp_path / "export.csv"
    with export.open("w", encoding="utf-8-sig", newline="") as handle:  # Zotero writes a BOM
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    result = read_zotero_csv(export)
    [candidate] = result.candidates
    assert (candidate.key, candidate.path, candidate.title, candidate.year, candidate.doi) == (
        "zotero-csv:AAAA1111", str(good), "Vespa", 2017, "10.7717/peerj-cs.107")
    assert candidate.authors == ("Jon Bratseth", "Kristian Haugaard") and candidate.source == "zotero"
    reasons = {s.item.split()[0]: s.reason for s in result.skipped}
    assert "file not found" in reasons["BBBB2222"]
    assert "not a PDF: snapshot.pdf starts with '<html>" in reasons["CCCC3333"]
    assert reasons["DDDD4444"] == "no file attachment"


def test_a_file_that_is_not_a_zotero_export_is_refused(tmp_path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not a Zotero CSV export"):
        read_zotero_csv(other)
    with pytest.raises(ConfigError, match="file not found"):
        read_zotero_csv(tmp_path / "none.csv")


def test_loopback_pages_like_the_api(server, egress) -> None:
    """pyzotero follows the loopback's Link: rel="next" pages to the whole recorded library."""
    with library(server, egress) as zot:
        items = zot.zot.everything(zot.zot.items(limit=7))
        versions = zot.zot.item_versions()
    assert [i["key"] for i in items] == list(server.items) and len(items) == 20
    assert versions == {k: i["version"] for k, i in server.items.items()}
    assert [r.query.get("start") for r in server.requests[:3]] == [None, "7", "14"]


def test_nothing_to_push_sends_nothing_and_local_push_is_refused(server, egress, fixtures, tmp_path,
                                                                 shared_pdfs) -> None:
    with library(server, egress) as zot:
        empty = zot.push("run-7", None, [])
    assert empty.items == () and empty.error is None and server.requests == []
    with LoopbackZotero(fixtures, local=True, api_key=None, library_id="0", data_dir=tmp_path) as srv:
        zot = ZoteroLibrary(ZoteroSettings(local=True, endpoint=srv.url), egress)
        result = zot.push("run-7", None, accepted(shared_pdfs)[:1])
        zot.close()
    assert "read-only" in result.error and result.items[0].status == "failed" and srv.requests == []
