"""The store contract on a self-hosted Weaviate (weaviate-client v4), for a lab's shared library.

Layout: a **collection per library**, two per library — ``<Library>Chunks`` (one object per
:class:`ChunkRecord`, with its self-provided vector; vectorizer none, HNSW, cosine) and
``<Library>Documents`` (the registry, one object per :class:`DocumentRecord`, no vectors). Why
collections and not tenants: a lab has a handful of libraries, not thousands; each library has
its own embedding model and vector size (a collection's vector index has one size, tenants share
it), its own BM25 statistics, and is dropped or backed up on its own. The library's
:class:`~infra.store.meta.LibraryMeta` (embedding model, dimension) is the chunk collection's
description, written when the collection is created, checked on every open.

Object UUIDs are ``generate_uuid5(chunk_id)`` (``"doc:" + doc_id`` for registry objects), so an
upsert overwrites in place: re-ingesting is idempotent, and two Ingestors writing the same
document at once converge on one copy without locks.

Write order as in LanceDB: the chunks (``insert_many`` in batches; any failed object fails the
write, and chunks written for a document that was not registered before are removed again), then
the document's stale chunks, then the registry object, then the versions it replaced (same key,
other doc_id). Readers never see a registered document without its chunks. Weaviate has no
multi-object transactions: a failed re-upsert of an already registered doc_id (same bytes) may
leave some of its chunks rewritten.

BM25 runs on ``search_text``: the context line (title, section path) and the chunk text, stemmed
here with the Snowball English stemmer (Weaviate's tokenizer does not stem; LanceDB's does), with
Weaviate's English stop words. Filters on the document (year range, source: the key's prefix)
are answered by the registry collection first and reach the chunks as a doc-id list (chunks carry
no year or key, so an older library needs no new properties). Hybrid search
(``weaviate_hybrid``): ``"forage"`` fuses Weaviate's BM25 and vector results with
:func:`infra.store.fusion.fuse`, so scores and order are the same as on LanceDB and a migrated
library ranks alike; ``"weaviate"`` runs Weaviate's own hybrid query (one round trip; its own
score normalisation). ``skip_init_checks=True``: the client makes no
version or health call when it connects; the first request says whether the server is there.

The collections' properties, the objects and the filters live in :mod:`infra.store.weaviate_schema`, the searches in
:class:`~infra.store.weaviate_search.WeaviateSearch` (part of :class:`WeaviateStore`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import weaviate
from weaviate.classes.config import Configure
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter, Sort
from weaviate.collections import Collection
from weaviate.collections.classes.data import DataObject
from weaviate.collections.classes.filters import _Filters

from infra.errors import StoreError
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord, Store, Upsert, documents_named
from infra.store.fusion import Fusion
from infra.store.meta import LibraryMeta, check_meta
from infra.store.weaviate_schema import (ADDED_PROPERTIES, MAX_RESULTS, build_doc_filter, build_filter, chunk_object,
                                         chunk_properties, chunk_uuid, default_vector, doc_object, document_properties,
                                         hnsw_config, matches, to_chunk, to_doc)
from infra.store.weaviate_search import WeaviateSearch

if TYPE_CHECKING:
    from weaviate import WeaviateClient

T = TypeVar("T")

class WeaviateStore(WeaviateSearch, Store):
    """The :class:`~infra.store.base.Store` contract on one library in a Weaviate server.

    Connects lazily on first use; :meth:`close` (or ``with``) releases the connection.
    """

    name = "weaviate"

    def __init__(self, host: str = "127.0.0.1", *, library: str = "Forage", dim: int = 384,
                 http_port: int = 8080, grpc_port: int = 50051, secure: bool = False,
                 api_key: str | None = None, embed_model: str | None = None, timeout_s: float = 30.0,
                 fusion: Fusion = "relative_score", hybrid: Literal["forage", "weaviate"] = "forage",
                 hybrid_candidates: int = 4, batch_size: int = 500,
                 hnsw: dict[str, int] | None = None) -> None:
        if dim <= 0:
            raise StoreError(f"vector dimension must be positive, got {dim}", retryable=False)
        if not re.fullmatch(r"[A-Z][A-Za-z0-9_]*", library):
            raise StoreError(f"library name {library!r} must start with a capital letter and hold only "
                             "letters, digits and '_' (a Weaviate collection name)", retryable=False)
        self.host, self.http_port, self.grpc_port, self.secure = host, http_port, grpc_port, secure
        self.library, self.dim, self.embed_model = library, dim, embed_model
        self.timeout_s, self.fusion, self.hybrid_mode = timeout_s, fusion, hybrid
        self.hybrid_candidates, self.batch_size = max(1, hybrid_candidates), max(1, batch_size)
        self._api_key = api_key
        self.hnsw = {k: v for k, v in (hnsw or {}).items() if v is not None}  # Configure.VectorIndex.hnsw(...)
        self._client: WeaviateClient | None = None
        self._ready: dict[str, bool] = {}

    @classmethod
    def from_url(cls, url: str, *, grpc_port: int = 50051, **options: Any) -> WeaviateStore:
        """A store for ``http(s)://host[:port]`` (the REST address; gRPC on ``grpc_port``)."""
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if not parts.hostname:
            raise StoreError(f"cannot read a Weaviate address from {url!r}; use http://host:8080", retryable=False)
        secure = parts.scheme == "https"
        return cls(parts.hostname, http_port=parts.port or (443 if secure else 8080), grpc_port=grpc_port,
                   secure=secure, **options)

    def __reduce__(self) -> tuple[Any, ...]:
        options = {"library": self.library, "dim": self.dim, "http_port": self.http_port,
                   "grpc_port": self.grpc_port, "secure": self.secure, "api_key": self._api_key,
                   "embed_model": self.embed_model, "timeout_s": self.timeout_s, "fusion": self.fusion,
                   "hybrid": self.hybrid_mode, "hybrid_candidates": self.hybrid_candidates,
                   "batch_size": self.batch_size}
        return (_reopen, (self.host, options))

    def __repr__(self) -> str:
        return f"WeaviateStore({self.where!r}, dim={self.dim})"

    def __enter__(self) -> WeaviateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def where(self) -> str:
        return f"{'https' if self.secure else 'http'}://{self.host}:{self.http_port}/{self.library}"

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __del__(self) -> None:  # an actor's store is never closed explicitly: release its channels
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ------------------------------------------------------------------ connection and collections

    def _connect(self) -> WeaviateClient:
        if self._client is None:
            try:
                self._client = weaviate.connect_to_custom(
                    http_host=self.host, http_port=self.http_port, http_secure=self.secure,
                    grpc_host=self.host, grpc_port=self.grpc_port, grpc_secure=self.secure,
                    auth_credentials=Auth.api_key(self._api_key) if self._api_key else None,
                    additional_config=AdditionalConfig(timeout=Timeout(
                        init=min(self.timeout_s, 10.0), query=self.timeout_s, insert=self.timeout_s * 4)),
                    skip_init_checks=True)
            except Exception as exc:  # noqa: BLE001
                raise StoreError(f"cannot connect to Weaviate at {self.where}: {exc}") from exc
        return self._client

    @property
    def chunks_name(self) -> str:
        return f"{self.library}Chunks"

    @property
    def docs_name(self) -> str:
        return f"{self.library}Documents"

    def _collection(self, name: str, *, create: bool) -> Collection[Any, Any] | None:
        """The collection ``name``; None when it does not exist and ``create`` is False."""
        client = self._connect()
        if not self._ready.get(name):
            if not client.collections.exists(name):
                if not create:
                    return None
                self._create(client, name)
            if name == self.chunks_name:
                self._check_meta(client.collections.use(name))
            self._add_missing_properties(name, client.collections.use(name))
            self._ready[name] = True
        return client.collections.use(name)

    def _create(self, client: WeaviateClient, name: str) -> None:
        if name == self.chunks_name:
            props = chunk_properties()
            vectors = Configure.Vectors.self_provided(vector_index_config=hnsw_config(self.hnsw))
            description = LibraryMeta(embed_model=self.embed_model, dim=self.dim).dumps()
        else:
            props = document_properties()
            vectors = Configure.Vectors.self_provided()
            description = "Forage document registry"
        try:
            client.collections.create(name, description=description, properties=props, vector_config=vectors,
                                      inverted_index_config=Configure.inverted_index(
                                          stopwords_preset=None, index_null_state=True))
        except Exception as exc:  # noqa: BLE001 - another process may have created it meanwhile
            if not client.collections.exists(name):
                raise StoreError(f"cannot create the collection {name} in {self.where}: {exc}") from exc

    def _add_missing_properties(self, name: str, collection: Collection[Any, Any]) -> None:
        """Properties of :data:`ADDED_PROPERTIES` a collection created by an older Forage lacks."""
        added = ADDED_PROPERTIES["chunks" if name == self.chunks_name else "documents"]
        try:
            have = {prop.name for prop in collection.config.get().properties}
            for prop in added:
                if prop.name not in have:
                    collection.config.add_property(prop)
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot add the properties {[p.name for p in added]} to {name} in "
                             f"{self.where}: {exc}") from exc

    def _check_meta(self, collection: Collection[Any, Any]) -> None:
        recorded = LibraryMeta.loads(collection.config.get().description)
        if recorded is None:
            raise StoreError(f"the collection {collection.name} in {self.where} is not a Forage library "
                             "(no embedding record); use another library name", retryable=False)
        check_meta(recorded, self.embed_model, self.dim, self.where)

    def library_meta(self) -> LibraryMeta | None:
        """What the library records about its vectors (None before the first write)."""
        def read() -> LibraryMeta | None:  # not checked against this store's model: migration reads it first
            client = self._connect()
            if not client.collections.exists(self.chunks_name):
                return None
            return LibraryMeta.loads(client.collections.use(self.chunks_name).config.get().description)

        return self._run("library meta", read)

    def _run(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - connection refused, timeouts, server errors
            raise StoreError(f"Weaviate {what} failed at {self.where}: {exc}") from exc

    def _chunks(self) -> Collection[Any, Any] | None:
        return self._run("open", lambda: self._collection(self.chunks_name, create=False))

    def _docs(self) -> Collection[Any, Any] | None:
        return self._run("open", lambda: self._collection(self.docs_name, create=False))

    # ------------------------------------------------------------------ writes

    def upsert_documents(self, items: Sequence[Upsert]) -> None:
        """Store documents with their chunks (see the module docstring for the order). Bad input
        raises before anything is written; a failed chunk batch registers none of the documents."""
        docs, arrays, _ = self.checked_batch(items)  # window vectors checked, not kept (keeps_windows is False)
        objects = [chunk_object(c, doc.title, v) for (doc, chunks, *_), array in zip(items, arrays, strict=True)
                   for c, v in zip(chunks, array.tolist(), strict=True)]
        if docs:
            self._run("upsert", lambda: self._write(docs, objects))

    def _write(self, docs: list[DocumentRecord], objects: list[DataObject[dict[str, Any], None]]) -> None:
        chunk_col = self._collection(self.chunks_name, create=True)
        doc_col = self._collection(self.docs_name, create=True)
        assert chunk_col is not None and doc_col is not None
        doc_ids = [d.doc_id for d in docs]
        earlier = self._fetch_docs(doc_col, Filter.any_of([Filter.by_property("key").contains_any([d.key for d in docs]),
                                                           Filter.by_property("doc_id").contains_any(doc_ids)]))
        known = {d.doc_id for d in earlier}
        try:
            for start in range(0, len(objects), self.batch_size):
                result = chunk_col.data.insert_many(objects[start:start + self.batch_size])
                if result.errors:
                    first = next(iter(result.errors.values()))
                    raise StoreError(f"{len(result.errors)} of {len(objects)} chunk objects failed: {first.message}")
        except Exception as exc:
            new = [d for d in doc_ids if d not in known]
            if new:
                chunk_col.data.delete_many(where=Filter.by_property("doc_id").contains_any(new))
            raise StoreError(f"writing the chunks of {len(docs)} document(s) to {self.where} failed; "
                             f"nothing was registered: {exc}") from exc
        fresh = {str(o.uuid) for o in objects}
        for doc_id in known & set(doc_ids):  # chunks of the same document no longer produced
            stale = [u for u in self._chunk_uuids(chunk_col, doc_id) if u not in fresh]
            if stale:
                chunk_col.data.delete_many(where=Filter.by_id().contains_any(stale))
        result = doc_col.data.insert_many([doc_object(d) for d in docs])
        if result.errors:  # some registry objects may have been written: unregister the new ones first
            new = [d for d in doc_ids if d not in known]
            if new:
                doc_col.data.delete_many(where=Filter.by_property("doc_id").contains_any(new))
                chunk_col.data.delete_many(where=Filter.by_property("doc_id").contains_any(new))
            raise StoreError(f"registering {len(docs)} document(s) in {self.where} failed; their chunks were "
                             f"removed: {next(iter(result.errors.values())).message}")
        replaced = sorted(known - set(doc_ids))
        if replaced:
            self._delete(replaced)

    def _chunk_uuids(self, chunk_col: Collection[Any, Any], doc_id: str) -> list[str]:
        res = chunk_col.query.fetch_objects(filters=Filter.by_property("doc_id").equal(doc_id),
                                            limit=MAX_RESULTS, return_properties=[])
        return [str(o.uuid) for o in res.objects]

    def _delete(self, doc_ids: Sequence[str]) -> None:
        """Unregister, then delete the chunks (caller wraps errors)."""
        for name in (self.docs_name, self.chunks_name):
            collection = self._collection(name, create=False)
            if collection is not None:
                collection.data.delete_many(where=Filter.by_property("doc_id").contains_any(list(doc_ids)))

    def delete_document(self, doc_id: str) -> None:
        self._run("delete", lambda: self._delete([doc_id]))

    # ------------------------------------------------------------------ the registry

    @staticmethod
    def _fetch_docs(collection: Collection[Any, Any], where: _Filters | None) -> list[DocumentRecord]:
        res = collection.query.fetch_objects(filters=where, limit=MAX_RESULTS)
        return [to_doc(dict(o.properties)) for o in res.objects]

    def _one_doc(self, where: _Filters) -> DocumentRecord | None:
        collection = self._docs()
        found = [] if collection is None else self._run("read", lambda: self._fetch_docs(collection, where))
        return found[0] if found else None

    def get_document(self, doc_id: str) -> DocumentRecord | None:
        return self._one_doc(Filter.by_property("doc_id").equal(doc_id))

    def document_by_key(self, key: str) -> DocumentRecord | None:
        return self._one_doc(Filter.by_property("key").equal(key))

    def get_documents(self, doc_ids: Sequence[str]) -> list[DocumentRecord]:
        wanted = list(dict.fromkeys(doc_ids))
        collection = self._docs()
        if collection is None or not wanted:
            return []
        found: dict[str, DocumentRecord] = {}

        def read(ids: list[str]) -> list[DocumentRecord]:
            return self._fetch_docs(collection, Filter.by_property("doc_id").contains_any(ids))

        for start in range(0, len(wanted), MAX_RESULTS):
            part = wanted[start:start + MAX_RESULTS]
            found.update((d.doc_id, d) for d in self._run("read", lambda: read(part)))
        return [found[d] for d in wanted if d in found]

    def document_ids(self, flt: ChunkFilter) -> list[str]:
        """Ids of the registered documents meeting the filter's document conditions (doc_ids,
        years, sources), sorted. Filtered in Weaviate; when that reaches the result limit, every
        registry object is read with a cursor and checked here instead."""
        collection = self._docs()
        if collection is None or flt.doc_ids == () or flt.sources == ():
            return []
        where, props = build_doc_filter(flt), ["doc_id", "key", "year"]

        def read() -> list[str]:
            objects = collection.query.fetch_objects(filters=where, limit=MAX_RESULTS, return_properties=props).objects
            found: Iterable[Any] = (objects if len(objects) < MAX_RESULTS
                                    else collection.iterator(return_properties=props))
            return sorted({d.doc_id for d in (to_doc(dict(o.properties)) for o in found) if flt.admits(d)})

        return self._run("read", read)

    def _resolve(self, flt: ChunkFilter) -> ChunkFilter:
        """``flt`` on chunk properties only: its years and sources become the ids of the documents
        that meet them (one registry query), intersected with its doc_ids."""
        return flt.narrowed(self.document_ids(flt)) if flt.by_document else flt

    def list_documents(self) -> list[DocumentRecord]:
        """Every registered document, ordered by (key, doc_id) (read with a cursor: no size limit)."""
        collection = self._docs()
        if collection is None:
            return []
        docs = self._run("list documents", lambda: [to_doc(dict(o.properties)) for o in collection.iterator()])
        return sorted(docs, key=lambda d: (d.key, d.doc_id))

    # ------------------------------------------------------------------ chunks

    def get_chunk(self, chunk_id: str) -> ChunkRecord | None:
        collection = self._chunks()
        if collection is None:
            return None
        obj = self._run("read", lambda: collection.query.fetch_object_by_id(chunk_uuid(chunk_id)))
        return None if obj is None else to_chunk(dict(obj.properties))

    def count_chunks(self, doc_id: str | None = None) -> int:
        collection = self._chunks()
        if collection is None:
            return 0
        where = None if doc_id is None else Filter.by_property("doc_id").equal(doc_id)
        return int(self._run("count", lambda: collection.aggregate.over_all(filters=where, total_count=True)
                             ).total_count or 0)

    def sections(self, doc_id: str) -> list[str]:
        chunks = self.chunks(ChunkFilter(doc_ids=(doc_id,), exclude_kinds=()), limit=MAX_RESULTS)
        return list(dict.fromkeys(c.section_path for c in chunks))

    def chunks(self, flt: ChunkFilter, limit: int = 50) -> list[ChunkRecord]:
        """Chunks matching the filter in document order (doc_id, ordinal), at most ``limit``."""
        collection = self._chunks()
        if collection is None or limit <= 0:
            return []
        flt = self._resolve(flt)
        if flt.doc_ids == ():
            return []
        order = Sort.by_property("doc_id").by_property("ordinal")
        res = self._run("list chunks", lambda: collection.query.fetch_objects(
            filters=build_filter(flt), limit=min(limit, MAX_RESULTS), sort=order))
        return [c for c in (to_chunk(dict(o.properties)) for o in res.objects) if matches(flt, c)]

    def export_documents(self, doc_ids: Sequence[str] | None = None) -> Iterator[
            tuple[DocumentRecord, list[ChunkRecord], list[list[float]]]]:
        """Every document with its chunks and their vectors, in (key, doc_id) order (for migration);
        ``doc_ids``: only those documents (for a metadata fix), in that order."""
        collection = self._chunks()
        for doc in documents_named(self, doc_ids):
            if collection is None:
                yield doc, [], []
                continue
            where = Filter.by_property("doc_id").equal(doc.doc_id)
            res = self._run("export", lambda: collection.query.fetch_objects(
                filters=where, limit=MAX_RESULTS, sort=Sort.by_property("ordinal"), include_vector=True))
            pairs = [(to_chunk(dict(o.properties)), list(default_vector(o.vector))) for o in res.objects]
            yield doc, [p[0] for p in pairs], [p[1] for p in pairs]



def _reopen(host: str, options: dict[str, Any]) -> WeaviateStore:
    return WeaviateStore(host, **options)
