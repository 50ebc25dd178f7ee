"""`forage library add zotero|csv` and `forage library list` end to end (typer's CliRunner): a loopback
Zotero collection pulled with the real pyzotero client and ingested into a temporary LanceDB store
with the in-process MiniLM embedder; a second run finds everything unchanged."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.cli import app
from infra.net import EgressLedger
from infra.settings import Settings
from infra.store import build_store
from tests.loopback_zotero import LoopbackZotero

# slow (whole suite only): the library CLI over real PDFs with MiniLM, ~35 s
pytestmark = pytest.mark.slow

runner = CliRunner()
SCIENCES = "Sciences (miscellaneous)"
SMALL = ("dvt_prophylaxis_trauma_bmc2010.pdf", "phrase_generation_acl2014.pdf")


@pytest.fixture
def server(shared_data: Path, shared_pdfs: list[Path]):
    pdf = {p.name: p for p in shared_pdfs}
    with LoopbackZotero(shared_data / "api-fixtures" / "zotero") as srv:
        srv.add_attachment("33TK9NH9", pdf[SMALL[0]])  # recorded items of the collection
        srv.add_attachment("3EWF3P9V", pdf[SMALL[1]])
        yield srv


def env(server: LoopbackZotero, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"FORAGE_ZOTERO__LIBRARY_ID": server.library_id, "FORAGE_ZOTERO__API_KEY": server.api_key or "",
            "FORAGE_ZOTERO__ENDPOINT": server.url, "FORAGE_RUN__RUNS_DIR": str(tmp_path / "runs"),
            "FORAGE_SEARCH__PAPERS_DIR": str(tmp_path / "papers"), "FORAGE_EMBED__BACKEND": "minilm",
            "FORAGE_NET__OFFLINE": "false", **extra}


def invoke(args: list[str], environment: dict[str, str]):
    result = runner.invoke(app, args, env=environment)
    return result, " ".join(result.output.split())


def flat(output: str) -> str:
    """The output without spaces, line breaks and table rules (rich wraps long cells)."""
    return re.sub(r"[\s│┃|]+", "", output)


def store_at(path: Path):
    return build_store(Settings.load(embed={"backend": "minilm"}, store={"path": str(path)}))


def test_add_zotero_ingests_a_collection_then_finds_it_unchanged(server, tmp_path) -> None:
    store = tmp_path / "store"
    args = ["library", "add", "zotero", "--collection", SCIENCES, "--store", str(store)]
    first, text = invoke(args, env(server, tmp_path))
    assert first.exit_code == 0, first.output
    assert "2 new · 0 changed · 0 unchanged · 0 failed" in text
    assert "Biscrolling Nanotube Sheets" in text and "Does sensitization to foods" in text
    documents = store_at(store).list_documents()
    assert len(documents) == 2 and all(d.key.startswith("zotero:users/475425/items/") for d in documents)
    assert {d.year for d in documents} == {2011} and all(d.n_chunks > 0 for d in documents)
    ledgers = list((tmp_path / "runs").glob("library-*/egress.jsonl"))
    assert len(ledgers) == 1
    recorded = [(r.method, r.path) for r in EgressLedger.read(ledgers[0])]
    assert recorded == [(r.method, r.path) for r in server.requests]  # every request is in the ledger

    server.requests.clear()
    again, text = invoke(args, env(server, tmp_path))
    assert again.exit_code == 0, again.output
    assert "0 new · 0 changed · 2 unchanged · 0 failed" in text
    assert not [r for r in server.requests if "/file" in r.path or r.path.startswith("/_storage")]
    assert len(store_at(store).list_documents()) == 2

    listed, text = invoke(["library", "list", "--store", str(store)], env(server, tmp_path))
    assert listed.exit_code == 0 and "2 documents in" in text and "Biscrolling" in text


def test_changed_attachment_replaces_the_stored_document(server, tmp_path, shared_pdfs) -> None:
    store = tmp_path / "store"
    args = ["library", "add", "zotero", "--collection", SCIENCES, "--store", str(store)]
    assert invoke(args, env(server, tmp_path))[0].exit_code == 0
    [key] = [k for k, i in server.items.items() if i["data"].get("parentItem") == "3EWF3P9V"]
    novelty = next(p for p in shared_pdfs if p.name.startswith("novelty_paraphrase"))
    server.replace_file(key, novelty.read_bytes())
    result, text = invoke(args, env(server, tmp_path))
    assert result.exit_code == 0, result.output
    assert "0 new · 1 changed · 1 unchanged · 0 failed" in text and "replaces" in flat(result.output)
    assert len(store_at(store).list_documents()) == 2


def test_offline_sends_nothing_and_says_so(server, tmp_path) -> None:
    result, text = invoke(["library", "add", "zotero", "--store", str(tmp_path / "store")],
                          env(server, tmp_path, FORAGE_NET__OFFLINE="true"))
    assert result.exit_code == 2 and "offline" in text
    assert server.requests == []


def test_missing_library_id_names_the_setting(server, tmp_path) -> None:
    environment = env(server, tmp_path)
    environment["FORAGE_ZOTERO__LIBRARY_ID"] = ""
    result, text = invoke(["library", "add", "zotero"], environment)
    assert result.exit_code == 2 and "FORAGE_ZOTERO__LIBRARY_ID" in text
    assert server.requests == []


def test_add_csv_ingests_readable_pdfs_and_reports_the_rest(tmp_path, shared_pdfs) -> None:
    pdf = {p.name: p for p in shared_pdfs}
    export = tmp_path / "export.csv"
    rows = [{"Key": "AAAA1111", "Title": "Thromboprophylaxis in trauma", "Author": "Doe, Jane",
             "Publication Year": "2010", "DOI": "", "File Attachments": str(pdf[SMALL[0]])},
            {"Key": "BBBB2222", "Title": "Gone", "Author": "", "Publication Year": "", "DOI": "",
             "File Attachments": str(tmp_path / "gone.pdf")}]
    with export.open("w", encoding="utf-8-sig", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    store = tmp_path / "store"
    environment = {"FORAGE_EMBED__BACKEND": "minilm", "FORAGE_NET__OFFLINE": "true"}  # a CSV needs no network
    first, text = invoke(["library", "add", "csv", str(export), "--store", str(store)], environment)
    assert first.exit_code == 1, first.output  # one row failed
    assert "1 new · 0 changed · 0 unchanged · 1 failed" in text and "filenotfound" in flat(first.output)
    [doc] = store_at(store).list_documents()
    assert (doc.key, doc.title, doc.year, doc.authors) == ("zotero-csv:AAAA1111", "Thromboprophylaxis in trauma",
                                                           2010, ("Jane Doe",))
    again, text = invoke(["library", "add", "csv", str(export), "--store", str(store)], environment)
    assert "0 new · 0 changed · 1 unchanged · 1 failed" in text


def test_add_csv_refuses_a_file_that_is_not_an_export(tmp_path) -> None:
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    result, text = invoke(["library", "add", "csv", str(other)], {"FORAGE_EMBED__BACKEND": "minilm"})
    assert result.exit_code == 2 and "not a Zotero CSV export" in text
