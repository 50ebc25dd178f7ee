"""Batch upserts (``upsert_documents``), BM25 over the title and chunk text, scalar indexes.

The helper :func:`infra.store.base.upsert_documents` runs on every store (a store without its own
batch write falls back to one upsert per document); the rest is LanceDB-specific.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.errors import StoreError
from infra.store.base import ChunkFilter, Store
from tests.factories import hash_vec, ids, put, store_doc


def _item(doc_id: str, texts: list[str], **kw: object) -> tuple:
    doc, chunks = store_doc(doc_id, texts, **kw)  # type: ignore[arg-type]
    return doc, chunks, [hash_vec(c.text) for c in chunks]


def test_batch_upsert_stores_like_single_upserts(store: Store) -> None:
    items = [_item(c * 64, [f"text {c} one", f"text {c} two"], title=f"Title {c}") for c in "abc"]
    store.upsert_documents(items)
    assert [d.doc_id for d in store.list_documents()] == [c * 64 for c in "abc"]
    assert all(store.get_document(c * 64).n_chunks == 2 for c in "abc")
    assert store.count_chunks() == 6
    assert store.get_chunk(f"{'b' * 16}:1").text == "text b two"


def test_batch_upsert_replaces_versions_by_key(store: Store) -> None:
    store.upsert_documents([_item("d" * 64, ["old one", "old two", "old three"], key="file:/p.pdf"),
                             _item("e" * 64, ["stays"])])
    store.upsert_documents([_item("f" * 64, ["new one"], key="file:/p.pdf"),
                             _item("g" * 64, ["another new"])])
    assert store.get_document("d" * 64) is None and store.count_chunks("d" * 64) == 0
    assert store.document_by_key("file:/p.pdf").doc_id == "f" * 64
    assert store.count_chunks() == 3  # stays + new one + another new
    store.upsert_documents([])  # nothing to write is fine
    assert store.count_chunks() == 3


def test_lance_batch_upsert_is_all_or_nothing(tmp_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(tmp_path / "store")
    good = _item("h" * 64, ["good text"])
    bad_doc, bad_chunks, bad_vectors = _item("i" * 64, ["bad text"])
    with pytest.raises(StoreError, match="zero or not finite"):
        store.upsert_documents([good, (bad_doc, bad_chunks, [[0.0] * 384])])
    with pytest.raises(StoreError, match="same key"):
        store.upsert_documents([good, _item("j" * 64, ["same key"], key=good[0].key)])
    with pytest.raises(StoreError, match="same doc_id"):
        store.upsert_documents([good, good])
    assert store.list_documents() == [] and store.count_chunks() == 0


def test_lance_bm25_reads_the_title_but_chunk_text_is_unchanged(tmp_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(tmp_path / "store")
    put(store, *store_doc("k" * 64, ["the body never names the topic"], title="Zebrafish regeneration"))
    put(store, *store_doc("l" * 64, ["another unrelated paragraph"], title="Protein folding",
                         paths=["Methods > Zebrafish husbandry"]))
    assert set(ids(store.bm25("zebrafish", 5))) == {f"{'k' * 16}:0", f"{'l' * 16}:0"}
    assert ids(store.bm25("regeneration", 5)) == [f"{'k' * 16}:0"]
    assert ids(store.bm25("husbandry", 5)) == [f"{'l' * 16}:0"]  # the section path counts too
    assert store.get_chunk(f"{'k' * 16}:0").text == "the body never names the topic"
    assert [c.text for c in store.chunks(ChunkFilter())] == ["the body never names the topic",
                                                              "another unrelated paragraph"]


def test_lance_store_written_before_search_text_still_works(tmp_path: Path) -> None:
    """A chunks table without ``search_text`` (an older store) keeps BM25 on ``text`` and takes writes."""
    import lancedb
    from lancedb.index import FTS

    from infra.store.lance_index import SEARCH_TEXT
    from infra.store.lance_schema import chunk_schema
    from infra.store.lancedb import LanceStore

    path = tmp_path / "old"
    lancedb.connect(str(path)).create_table("chunks", schema=chunk_schema(384).remove(
        chunk_schema(384).get_field_index(SEARCH_TEXT))).create_index("text", config=FTS())
    store = LanceStore(path)
    put(store, *store_doc("m" * 64, ["older stores index chunk text"], title="Legacy"))
    store.upsert_documents([_item("n" * 64, ["batch written into an older store"])])
    assert set(ids(store.bm25("older", 5))) == {f"{'m' * 16}:0", f"{'n' * 16}:0"}
    assert store.bm25("legacy", 5) == []  # the title is not indexed there


def test_lance_has_scalar_indexes_on_lookup_columns(tmp_path: Path) -> None:
    import lancedb

    from infra.store.lancedb import LanceStore

    put(LanceStore(tmp_path / "store"), *store_doc("o" * 64, ["indexed"]))
    db = lancedb.connect(str(tmp_path / "store"))
    for table, columns in {"chunks": {"chunk_id", "doc_id"}, "documents": {"doc_id", "key"}}.items():
        found = {c for ix in db.open_table(table).list_indices() if ix.index_type.upper() == "BTREE"
                 for c in ix.columns}
        assert columns <= found, (table, found)
    # the default filter (references left out) reads a bitmap index, not the column: bench/search_scale.py
    assert any(ix.index_type.upper() == "BITMAP" and ix.columns == ["section_kind"]
               for ix in db.open_table("chunks").list_indices())
