"""The two fields added to the store contract: a chunk's LLM ``context`` (contextual retrieval: found
by BM25, never part of the text) and a document's ``references`` (its reference list). Both stores
(Weaviate where WEAVIATE_URL is set); an older LanceDB store without the columns gains them."""

from __future__ import annotations

from pathlib import Path

from infra.store.base import ChunkFilter, Store
from tests.factories import hash_vec, ids, put, store_doc

REFS = ("[1] A. Author and B. Writer. 2019. A cited paper. In Proc. of ACL, pages 1–10.",
        "Smith J, Doe R (2020) Another cited work. Nature 5:12–20")


def test_context_and_references_round_trip(store: Store) -> None:
    doc, chunks = store_doc("c" * 64, ["the plain chunk text", "a second chunk"])
    doc = doc.model_copy(update={"references": REFS})
    chunks[0] = chunks[0].model_copy(update={"context": "This passage describes the zebrafish cohort."})
    put(store, doc, chunks)
    got = store.get_document(doc.doc_id)
    assert got is not None and got.references == REFS
    assert store.list_documents()[0].references == REFS
    assert store.get_chunk(chunks[0].chunk_id) == chunks[0]
    assert store.get_chunk(chunks[1].chunk_id).context == ""  # type: ignore[union-attr]
    assert store.chunks(ChunkFilter()) == chunks


def test_a_documents_doi_and_arxiv_id_are_fields_of_its_own(store: Store) -> None:
    """Written and read back as typed fields (each store), and a record that names them only in its origin (as an
    older Forage wrote it) gets them from there; a record with fields of its own keeps them."""
    from infra.store.base import DocumentRecord

    doc, chunks = store_doc("9" * 64, ["a paper with identifiers"])
    doc = doc.model_copy(update={"origin": "p.pdf, doi:10.1186/1752-2897-4-1, arXiv:2302.07302",
                                 "doi": "10.1186/1752-2897-4-1", "arxiv_id": "2302.07302"})
    put(store, doc, chunks)
    got = store.get_document(doc.doc_id)
    assert got is not None and (got.doi, got.arxiv_id) == ("10.1186/1752-2897-4-1", "2302.07302")
    older = DocumentRecord.model_validate({**doc.model_dump(), "doi": None, "arxiv_id": None,
                                           "origin": "q.pdf, doi:10.1000/ABC"})
    assert (older.doi, older.arxiv_id) == ("10.1000/abc", "")
    plain = DocumentRecord.model_validate({**doc.model_dump(), "doi": "", "arxiv_id": "", "origin": "r.pdf"})
    assert (plain.doi, plain.arxiv_id) == ("", "")


def test_bm25_finds_a_chunk_by_its_context_but_the_text_stays_the_original(store: Store) -> None:
    doc, chunks = store_doc("d" * 64, ["households were surveyed twice", "unrelated words here"])
    chunks[0] = chunks[0].model_copy(update={"context": "Describes the zebrafish regeneration cohort."})
    put(store, doc, chunks)
    assert ids(store.bm25("zebrafish", 5)) == [chunks[0].chunk_id]
    hit = store.bm25("regeneration", 5)[0]
    assert hit.chunk.text == "households were surveyed twice"
    assert "zebrafish" not in hit.chunk.text and hit.chunk.context.startswith("Describes")


def test_batch_write_keeps_context_and_references(store: Store) -> None:
    items = []
    for doc_id, text in (("e" * 64, "first document body"), ("f" * 64, "second document body")):
        doc, chunks = store_doc(doc_id, [text])
        doc = doc.model_copy(update={"references": REFS[:1]})
        chunks = [c.model_copy(update={"context": f"Context of {doc_id[:1]}."}) for c in chunks]
        items.append((doc, chunks, [hash_vec(c.text) for c in chunks]))
    store.upsert_documents(items)
    for doc, chunks, _ in items:
        assert store.get_document(doc.doc_id).references == REFS[:1]  # type: ignore[union-attr]
        assert store.get_chunk(chunks[0].chunk_id).context == chunks[0].context  # type: ignore[union-attr]


def test_lance_store_written_before_context_and_references_gains_them(tmp_path: Path) -> None:
    """Tables created without the ``context`` / ``references`` / ``venue`` / ``venue_kind`` columns (an older
    Forage) read back their rows with the defaults and take new writes with those fields."""
    import lancedb

    from infra.store.lance_schema import DOCUMENT_SCHEMA, chunk_schema
    from infra.store.lancedb import LanceStore

    path = tmp_path / "old"
    old_chunks = chunk_schema(384)
    for name in ("context", "windows"):
        old_chunks = old_chunks.remove(old_chunks.get_field_index(name))
    old_docs = DOCUMENT_SCHEMA
    for name in ("references", "venue", "venue_kind", "doi", "arxiv_id"):
        old_docs = old_docs.remove(old_docs.get_field_index(name))
    db = lancedb.connect(str(path))
    old_doc, old_rows = store_doc("a" * 64, ["written by an older forage"])
    old_doc = old_doc.model_copy(update={"origin": "old.pdf, doi:10.1000/XYZ.1, arXiv:2101.00001"})
    chunk_row = {**old_rows[0].model_dump(exclude={"context"}), "pages": list(old_rows[0].pages),
                 "vector": hash_vec(old_rows[0].text), "search_text": "A title\nwritten by an older forage"}
    db.create_table("chunks", data=[chunk_row], schema=old_chunks)
    doc_row = {**old_doc.model_dump(exclude={"references", "venue", "venue_kind", "doi", "arxiv_id"}), "n_chunks": 1}
    for name in ("authors", "sections", "flags"):
        doc_row[name] = list(doc_row[name])
    db.create_table("documents", data=[doc_row], schema=old_docs)

    store = LanceStore(path)
    old = store.get_document(old_doc.doc_id)
    assert old is not None and old.references == () and (old.venue, old.venue_kind) == ("", "")
    # the DOI and arXiv id it named only in its origin are its typed fields now
    assert (old.doi, old.arxiv_id) == ("10.1000/xyz.1", "2101.00001")
    assert store.get_chunk(old_rows[0].chunk_id).context == ""  # type: ignore[union-attr]
    new_doc, new_chunks = store_doc("b" * 64, ["written now"])
    new_doc = new_doc.model_copy(update={"references": REFS, "venue": "PLOS ONE", "venue_kind": "journal"})
    new_chunks = [new_chunks[0].model_copy(update={"context": "A fresh context about lampreys."})]
    put(store, new_doc, new_chunks)
    assert store.get_document(new_doc.doc_id) == new_doc.model_copy(update={"n_chunks": 1})
    assert ids(store.bm25("lampreys", 5)) == [new_chunks[0].chunk_id]
    assert {f.name for f in lancedb.connect(str(path)).open_table("documents").schema} >= {
        "references", "venue", "venue_kind", "doi", "arxiv_id"}
    # the chunks gain the windows column: the old chunk is scored by its own vector, a new one by its windows too
    assert "windows" in lancedb.connect(str(path)).open_table("chunks").schema.names
    assert store.vector(hash_vec(old_rows[0].text), 2)[0].chunk.chunk_id == old_rows[0].chunk_id
    windowed, windowed_chunks = store_doc("c" * 64, ["a chunk with a window"])
    window = [0.0] * 384
    window[3] = 1.0
    store.upsert_document(windowed, windowed_chunks, [hash_vec("something else entirely")], [[window]])
    top = store.vector(window, 3)[0]
    assert top.chunk.chunk_id == windowed_chunks[0].chunk_id and abs(top.score - 1.0) < 1e-6


def test_lance_windows_are_stored_in_half_precision_and_a_float32_store_keeps_its_own(tmp_path: Path) -> None:
    """New stores keep the window vectors in float16 (half the bytes; they only re-score candidates). A store
    written with float32 windows (Forage before 2026-11-27) keeps its column type: new documents are written in
    it, and both kinds of rows are scored by their windows."""
    import lancedb
    import pyarrow as pa

    from infra.store.lance_schema import WINDOWS, chunk_schema
    from infra.store.lancedb import LanceStore

    window = [0.0] * 384
    window[3] = 1.0
    fresh = LanceStore(tmp_path / "new")
    doc, chunks = store_doc("d" * 64, ["a chunk with a window"])
    fresh.upsert_document(doc, chunks, [hash_vec("something else entirely")], [[window]])
    stored = lancedb.connect(str(tmp_path / "new")).open_table("chunks").schema.field(WINDOWS).type
    assert stored == pa.list_(pa.list_(pa.float16(), 384))
    top = fresh.vector(window, 3)[0]
    assert top.chunk.chunk_id == chunks[0].chunk_id and abs(top.score - 1.0) < 1e-3
    assert fresh.windows_of(doc.doc_id) == [[window]]
    # stored at unit length: a window of large values (an unnormalised embedder's) does not overflow half precision
    big, big_chunks = store_doc("9" * 64, ["a chunk with a loud window"])
    loud = [0.0] * 384
    loud[7], loud[8] = 3e5, 4e5
    fresh.upsert_document(big, big_chunks, [hash_vec("elsewhere")], [[loud]])
    top = fresh.vector([x / 5e5 for x in loud], 3)[0]
    assert top.chunk.chunk_id == big_chunks[0].chunk_id and abs(top.score - 1.0) < 1e-3

    old_schema = chunk_schema(384)
    old_schema = old_schema.set(old_schema.get_field_index(WINDOWS),
                                pa.field(WINDOWS, pa.list_(pa.list_(pa.float32(), 384))))
    lancedb.connect(str(tmp_path / "old")).create_table("chunks", schema=old_schema)
    old = LanceStore(tmp_path / "old")
    first, first_chunks = store_doc("e" * 64, ["the first chunk"])
    old.upsert_document(first, first_chunks, [hash_vec("far away")], [[window]])
    other = [0.0] * 384
    other[5] = 1.0
    second, second_chunks = store_doc("f" * 64, ["the second chunk"])
    old.upsert_documents([(second, second_chunks, [hash_vec("far away too")], [[other]])])
    table = lancedb.connect(str(tmp_path / "old")).open_table("chunks")
    assert table.schema.field(WINDOWS).type == pa.list_(pa.list_(pa.float32(), 384)) and table.count_rows() == 2
    assert old.vector(window, 2)[0].chunk.chunk_id == first_chunks[0].chunk_id
    assert old.vector(other, 2)[0].chunk.chunk_id == second_chunks[0].chunk_id
    assert old.windows_of(second.doc_id) == [[other]]
