"""What of the Weaviate store can be checked without a server: object and UUID mapping, filters,
settings, the embedding record, and a clear quick failure when no server listens.
The whole contract runs against a live server in tests/contract/test_store_contract.py (WEAVIATE_URL)."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from weaviate.collections.classes.filters import _Filters, _FilterValue

from infra.errors import StoreError
from infra.settings import Settings
from infra.store import build_store, embedding_name
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord
from infra.store.meta import LibraryMeta
from infra.store.weaviate import WeaviateStore
from infra.store.weaviate_schema import (build_doc_filter, build_filter, chunk_object, chunk_uuid, doc_object, doc_uuid,
                                         hnsw_config, matches, stem_text, to_chunk, to_doc)

CHUNK = ChunkRecord(chunk_id="abcdef0123456789:3", doc_id="d" * 64, ordinal=3, text="Households were surveyed.",
                    section_path="Methods > Data", char_start=10, char_end=35, token_count=4, pages=(2, 3))
DOC = DocumentRecord(doc_id="d" * 64, key="doi:10.1/x", title="Rural Surveys", authors=("A. B",), year=None,
                     markdown="# Rural Surveys", parser="pymupdf", n_chunks=1)


def _leaves(flt: _Filters | None) -> list[_FilterValue]:
    if flt is None:
        return []
    if isinstance(flt, _FilterValue):
        return [flt]
    return [leaf for part in flt.filters for leaf in _leaves(part)]  # type: ignore[attr-defined]


def test_uuids_are_deterministic_and_distinct() -> None:
    assert chunk_uuid(CHUNK.chunk_id) == chunk_uuid(CHUNK.chunk_id)
    assert uuid.UUID(chunk_uuid(CHUNK.chunk_id)).version == 5
    assert chunk_uuid("a:0") != chunk_uuid("a:1")
    assert doc_uuid(DOC.doc_id) != chunk_uuid(DOC.doc_id)  # registry and chunk ids never collide


def test_chunk_object_round_trips() -> None:
    obj = chunk_object(CHUNK, "Rural Surveys", [0.5, 0.5])
    assert obj.uuid == chunk_uuid(CHUNK.chunk_id) and obj.vector == [0.5, 0.5]
    props = dict(obj.properties or {})
    assert props["pages"] == [2, 3]
    # BM25 text: title and path as the context line, stemmed like LanceDB's index
    assert props["search_text"] == "rural survey method data household were survey"
    props.pop("search_text")
    assert to_chunk(props) == CHUNK
    # Weaviate leaves out empty arrays and empty strings
    bare = CHUNK.model_copy(update={"pages": (), "text": ""})
    stored = {k: v for k, v in dict(chunk_object(bare, "", [1.0]).properties or {}).items() if v not in ([], "")}
    assert to_chunk(stored) == bare


def test_doc_object_round_trips_without_nulls() -> None:
    obj = doc_object(DOC)
    props = dict(obj.properties or {})
    assert "year" not in props and props["authors"] == ["A. B"] and obj.uuid == doc_uuid(DOC.doc_id)
    assert to_doc(props) == DOC
    assert to_doc({k: v for k, v in props.items() if v not in ([], "")}) == DOC


def test_stemming_matches_query_and_text() -> None:
    assert stem_text("Households") == stem_text("household") == "household"
    assert stem_text("+-*/~^ \"unbalanced") == "unbalanc"
    assert stem_text("   ") == ""


def test_filter_building() -> None:
    assert build_filter(ChunkFilter(exclude_kinds=())) is None
    default = _leaves(build_filter(ChunkFilter()))
    assert [(f.target, f.operator.value, f.value) for f in default] == [("section_kind", "NotEqual", "references")]
    flt = ChunkFilter(doc_ids=("a", "b"), section_path="Methods > O'Brien*", exclude_chunk_ids=("a:1", "a:2"),
                      exclude_kinds=("references", "caption"))
    got = [(f.target, f.operator.value, f.value) for f in _leaves(build_filter(flt))]
    assert got == [("doc_id", "ContainsAny", ["a", "b"]), ("section_path", "Like", "Methods > O'Brien*"),
                   ("chunk_id", "NotEqual", "a:1"), ("chunk_id", "NotEqual", "a:2"),
                   ("section_kind", "NotEqual", "references"), ("section_kind", "NotEqual", "caption")]
    exact = _leaves(build_filter(ChunkFilter(section_path="Why?", exclude_kinds=())))
    assert [(f.operator.value, f.value) for f in exact] == [("Equal", "Why?")]


def test_wildcards_in_a_prefix_are_checked_exactly() -> None:
    flt = ChunkFilter(section_path="Why? 2*3*", exclude_kinds=())
    assert [f.value for f in _leaves(build_filter(flt))] == ["Why? 2?3*"]  # a superset in Weaviate ...
    assert matches(flt, CHUNK.model_copy(update={"section_path": "Why? 2*3 Because"}))
    assert not matches(flt, CHUNK.model_copy(update={"section_path": "Why! 2x3 Because"}))  # ... narrowed here


def test_document_filter_building() -> None:
    """Years and sources are asked of the registry collection; chunk filters never see them."""
    assert build_doc_filter(ChunkFilter(section_path="Methods*")) is None
    flt = ChunkFilter(doc_ids=("a",), year_min=2019, year_max=2021, sources=("arxiv", "file:/lab/O'Brien*/"))
    got = [(f.target, f.operator.value, f.value) for f in _leaves(build_doc_filter(flt))]
    assert got == [("doc_id", "ContainsAny", ["a"]), ("year", "GreaterThanEqual", 2019),
                   ("year", "LessThanEqual", 2021), ("key", "Like", "arxiv:*"), ("key", "Like", "file:/lab/O'Brien?/*")]
    # the like pattern is a superset; the exact prefix is checked on the documents read back
    assert flt.admits(DOC.model_copy(update={"doc_id": "a", "key": "file:/lab/O'Brien*/p.pdf", "year": 2020}))
    assert not flt.admits(DOC.model_copy(update={"doc_id": "a", "key": "file:/lab/O'BrienX/p.pdf", "year": 2020}))
    assert not flt.admits(DOC.model_copy(update={"doc_id": "a", "key": "arxiv:1", "year": None}))
    with pytest.raises(ValueError, match="resolve"):
        build_filter(flt)  # chunks carry no year or key
    narrowed = flt.narrowed(["b", "a", "a"])
    assert narrowed.doc_ids == ("a", "b") and not narrowed.by_document and build_filter(narrowed) is not None


def test_settings_build_a_weaviate_store(tmp_path: Path) -> None:
    settings = Settings.load(store={"backend": "weaviate", "weaviate_host": "10.0.0.5", "weaviate_http_port": 8081,
                                    "weaviate_grpc_port": 50052, "weaviate_library": "Lab", "weaviate_api_key": "k",
                                    "hybrid_fusion": "rrf"})
    store = build_store(settings)
    assert isinstance(store, WeaviateStore)
    assert (store.host, store.http_port, store.grpc_port, store.library, store.dim) == ("10.0.0.5", 8081, 50052,
                                                                                      "Lab", 384)
    assert store.embed_model == "minilm:all-minilm-l6-v2" and store.fusion == "rrf"
    assert store.chunks_name == "LabChunks" and store.docs_name == "LabDocuments"
    import pickle

    clone = pickle.loads(pickle.dumps(store))
    assert (clone.host, clone.library, clone.embed_model, clone.fusion) == ("10.0.0.5", "Lab",
                                                                            store.embed_model, "rrf")
    with pytest.raises(ValueError, match="weaviate_library"):
        Settings.load(store={"weaviate_library": "lower case"})


def test_hnsw_settings_reach_the_chunks_index() -> None:
    """The HNSW parameters are the settings' where given and the server's defaults (left unset) elsewhere."""
    tuned = build_store(Settings.load(store={"backend": "weaviate", "weaviate_hnsw_max_connections": 32,
                                             "weaviate_hnsw_ef_construction": 256}))
    assert tuned.hnsw == {"max_connections": 32, "ef_construction": 256}
    config = hnsw_config(tuned.hnsw)._to_dict()
    assert (config["maxConnections"], config["efConstruction"], config["distance"]) == (32, 256, "cosine")
    assert "ef" not in config
    plain = hnsw_config(build_store(Settings.load(store={"backend": "weaviate"})).hnsw)._to_dict()
    assert not {"maxConnections", "efConstruction", "ef"} & set(plain)
    with pytest.raises(StoreError, match="unknown HNSW setting"):
        hnsw_config({"m": 16})
    with pytest.raises(ValueError, match="weaviate_hnsw_max_connections"):
        Settings.load(store={"weaviate_hnsw_max_connections": 1})


def test_from_url() -> None:
    store = WeaviateStore.from_url("https://weaviate.lab:8443", grpc_port=50443, library="X")
    assert (store.host, store.http_port, store.grpc_port, store.secure) == ("weaviate.lab", 8443, 50443, True)
    assert WeaviateStore.from_url("127.0.0.1").http_port == 8080
    with pytest.raises(StoreError, match="capital"):
        WeaviateStore(library="bad-name")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_closed_port_fails_fast_with_a_store_error_and_stays_on_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """No server: a clear StoreError within seconds, and no name lookup or connection to any other
    host (no version check, no telemetry) on the way."""
    seen: list[Any] = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        seen.append(("connect", address))
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(("lookup", host))
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    store = WeaviateStore("127.0.0.1", http_port=_closed_port(), grpc_port=_closed_port(), timeout_s=5)
    done = threading.Event()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            store.count_chunks()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)
        finally:
            done.set()

    start = time.monotonic()
    threading.Thread(target=call, daemon=True).start()
    assert done.wait(30), "a closed port must not hang the store"
    elapsed = time.monotonic() - start
    store.close()
    assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
    assert "Weaviate" in str(errors[0]) and "127.0.0.1" in str(errors[0]) and errors[0].retryable
    hosts = {a[0] if isinstance(a, tuple) else a for _, a in seen}
    assert hosts <= {"127.0.0.1", "localhost"}, seen
    print(f"\nclosed port answered with StoreError after {elapsed:.2f}s")


def test_embedding_name_follows_settings() -> None:
    settings = Settings.load()
    assert embedding_name(settings) == "minilm:all-minilm-l6-v2"
    assert embedding_name(settings.updated(embed={"backend": "ollama", "model": "Nomic-Embed-Text:latest"})) == \
        "ollama:nomic-embed-text"


def test_lance_library_refuses_another_embedding_model(tmp_path: Path) -> None:
    from infra.store.lancedb import LanceStore

    path = tmp_path / "lib"
    doc = DOC.model_copy(update={"n_chunks": 0})
    LanceStore(path, dim=2, embed_model="ollama:model-a").upsert_document(
        doc, [CHUNK.model_copy(update={"doc_id": doc.doc_id})], [[1.0, 0.0]])
    assert LanceStore(path, dim=2).library_meta() == LibraryMeta(embed_model="ollama:model-a", dim=2)
    assert LanceStore(path, dim=2, embed_model="ollama:model-a").count_chunks() == 1
    with pytest.raises(StoreError, match="embedded with ollama:model-a, not ollama:model-b") as err:
        LanceStore(path, dim=2, embed_model="ollama:model-b").count_chunks()
    assert err.value.retryable is False
    with pytest.raises(StoreError, match="2-dimensional"):
        LanceStore(path, dim=3, embed_model="ollama:model-a").count_chunks()


def test_lance_library_without_a_record_adopts_the_model(tmp_path: Path) -> None:
    from infra.store.lance_tables import LIBRARY_META
    from infra.store.lancedb import LanceStore

    path = tmp_path / "old"
    LanceStore(path, dim=2).upsert_document(DOC, [CHUNK], [[0.0, 1.0]])
    (path / LIBRARY_META).unlink()  # a store written before the record existed
    assert LanceStore(path, dim=2, embed_model="ollama:m").count_chunks() == 1
    assert LanceStore(path, dim=2).library_meta() == LibraryMeta(embed_model="ollama:m", dim=2)
