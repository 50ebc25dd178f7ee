"""How a Forage library is laid out in Weaviate: the collections' properties, the objects of chunks and documents and
back, the stemmed BM25 text, the filters (infra/store/weaviate.py)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import snowballstemmer  # type: ignore[import-untyped]
from weaviate.classes.config import Configure, DataType, Property, Tokenization, VectorDistances
from weaviate.classes.query import Filter
from weaviate.collections.classes.data import DataObject
from weaviate.collections.classes.filters import _Filters
from weaviate.util import generate_uuid5

from infra.errors import StoreError
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord
from infra.store.base import search_text as context_text

MAX_RESULTS = 10_000  # Weaviate's default QUERY_MAXIMUM_RESULTS
_STEM = snowballstemmer.stemmer("english")
_CHUNK_FIELDS = list(ChunkRecord.model_fields)
# properties added after the first release: an older collection gains them when first used
ADDED_PROPERTIES: dict[str, list[Property]] = {
    "chunks": [Property(name="context", data_type=DataType.TEXT, index_searchable=False, index_filterable=False)],
    "documents": [Property(name="references", data_type=DataType.TEXT_ARRAY, index_searchable=False,
                           index_filterable=False),
                  *(Property(name=n, data_type=DataType.TEXT, index_searchable=False, index_filterable=False)
                    for n in ("venue", "venue_kind", "oa_status", "doi", "arxiv_id")),
                  *(Property(name=n, data_type=DataType.BOOL, index_searchable=False, index_filterable=False)
                    for n in ("is_retracted", "preprint_only")),
                  Property(name="cited_by_count", data_type=DataType.INT, index_searchable=False,
                           index_filterable=False)],
}
_DOC_FIELDS = list(DocumentRecord.model_fields)


def chunk_properties() -> list[Property]:
    """The chunks collection's properties (ids, positions, text, the stemmed search text)."""
    field = Tokenization.FIELD
    props = [Property(name=n, data_type=DataType.TEXT, tokenization=field, index_searchable=False)
             for n in ("chunk_id", "doc_id", "section_path", "section_kind")]
    props += [Property(name=n, data_type=DataType.INT) for n in ("ordinal", "char_start", "char_end", "token_count")]
    return props + [Property(name="pages", data_type=DataType.INT_ARRAY, index_filterable=False),
                    Property(name="text", data_type=DataType.TEXT, index_searchable=False, index_filterable=False),
                    Property(name="search_text", data_type=DataType.TEXT, tokenization=Tokenization.WHITESPACE,
                             index_filterable=False),
                    *ADDED_PROPERTIES["chunks"]]


def document_properties() -> list[Property]:
    """The document registry's properties."""
    props = [Property(name=n, data_type=DataType.TEXT, tokenization=Tokenization.FIELD, index_searchable=False)
             for n in ("doc_id", "key")]
    props += [Property(name=n, data_type=DataType.TEXT, index_searchable=False, index_filterable=False)
              for n in ("title", "abstract", "markdown", "parser", "origin")]
    props += [Property(name=n, data_type=DataType.TEXT_ARRAY, index_searchable=False, index_filterable=False)
              for n in ("authors", "sections", "flags")]
    props += [Property(name=n, data_type=DataType.INT) for n in ("year", "n_chunks")]
    return props + ADDED_PROPERTIES["documents"]


def hnsw_config(options: dict[str, int]) -> Any:
    """The chunks collection's HNSW index: cosine, with the settings' ``max_connections``, ``ef_construction``
    and ``ef`` where given (``store.weaviate_hnsw_*``; the server's defaults otherwise)."""
    unknown = set(options) - {"max_connections", "ef_construction", "ef"}
    if unknown:
        raise StoreError(f"unknown HNSW setting(s): {', '.join(sorted(unknown))}", retryable=False)
    return Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE,
                                      max_connections=options.get("max_connections"),
                                      ef_construction=options.get("ef_construction"), ef=options.get("ef"))


def stem_text(text: str) -> str:
    """Lower-cased, Snowball-stemmed words joined by spaces: what BM25 indexes and queries."""
    return " ".join(_STEM.stemWords(re.findall(r"\w+", text.lower())))


def search_text(title: str, chunk: ChunkRecord) -> str:
    """The stemmed context line and chunk text (see :func:`infra.store.base.search_text`)."""
    return stem_text(context_text(title, chunk))


def chunk_uuid(chunk_id: str) -> str:
    return str(generate_uuid5(chunk_id))


def doc_uuid(doc_id: str) -> str:
    return str(generate_uuid5("doc:" + doc_id))


def chunk_object(chunk: ChunkRecord, title: str, vector: Sequence[float]) -> DataObject[dict[str, Any], None]:
    """The Weaviate object of a chunk: its fields, the stemmed search text, its vector."""
    props: dict[str, Any] = chunk.model_dump()
    props["pages"] = list(chunk.pages)
    props["search_text"] = search_text(title, chunk)
    return DataObject(properties=props, uuid=chunk_uuid(chunk.chunk_id), vector=list(vector))


def doc_object(doc: DocumentRecord) -> DataObject[dict[str, Any], None]:
    props = {k: (list(v) if isinstance(v, tuple) else v) for k, v in doc.model_dump().items() if v is not None}
    return DataObject(properties=props, uuid=doc_uuid(doc.doc_id))


def to_chunk(props: dict[str, Any]) -> ChunkRecord:
    data = {name: props.get(name) for name in _CHUNK_FIELDS}
    data["pages"] = tuple(props.get("pages") or ())
    data["text"] = props.get("text") or ""
    data["section_path"] = props.get("section_path") or ""
    data["context"] = props.get("context") or ""
    return ChunkRecord.model_validate(data)


def to_doc(props: dict[str, Any]) -> DocumentRecord:
    data: dict[str, Any] = {name: props.get(name) for name in _DOC_FIELDS}
    for name in ("authors", "sections", "flags", "references"):
        data[name] = tuple(props.get(name) or ())
    for name in ("abstract", "markdown", "parser", "origin", "title", "venue", "venue_kind", "oa_status"):
        data[name] = props.get(name) or ""
    data["is_retracted"], data["preprint_only"] = bool(props.get("is_retracted")), bool(props.get("preprint_only"))
    data["n_chunks"] = props.get("n_chunks") or 0
    return DocumentRecord.model_validate(data)


def _like_prefix(prefix: str) -> str:
    """A ``like`` pattern for a literal prefix: Weaviate's wildcards ``*``/``?`` cannot be escaped,
    so they become ``?`` (any one character) and :func:`matches` checks the exact prefix after."""
    return prefix.replace("*", "?") + "*"


def build_filter(flt: ChunkFilter) -> _Filters | None:
    """The Weaviate filter on chunks for a :class:`ChunkFilter` (None when it filters nothing).
    ``doc_ids == ()`` matches nothing: callers return early before asking. Years and sources are
    resolved to doc ids first (:meth:`WeaviateStore.document_ids`): chunks carry no year or key."""
    if flt.by_document:
        raise ValueError("resolve the filter's years and sources to doc ids before building a chunk filter")
    parts: list[_Filters] = []
    if flt.doc_ids:
        parts.append(Filter.by_property("doc_id").contains_any(list(flt.doc_ids)))
    if flt.section_path is not None:
        prop = Filter.by_property("section_path")
        path = flt.section_path
        parts.append(prop.like(_like_prefix(path[:-1])) if path.endswith("*") else prop.equal(path))
    parts += [Filter.by_property("chunk_id").not_equal(c) for c in flt.exclude_chunk_ids]
    parts += [Filter.by_property("section_kind").not_equal(k) for k in flt.exclude_kinds]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Filter.all_of(parts)


def build_doc_filter(flt: ChunkFilter) -> _Filters | None:
    """The Weaviate filter on the registry for the document conditions of a :class:`ChunkFilter`
    (doc_ids, years, sources; None when it has none). A key prefix becomes a ``like`` pattern (a
    superset when it holds ``*`` or ``?``: :meth:`ChunkFilter.admits` checks the exact prefix after).
    ``doc_ids == ()`` and ``sources == ()`` match nothing: callers return early before asking."""
    parts: list[_Filters] = []
    if flt.doc_ids:
        parts.append(Filter.by_property("doc_id").contains_any(list(flt.doc_ids)))
    if flt.year_min is not None:
        parts.append(Filter.by_property("year").greater_or_equal(flt.year_min))
    if flt.year_max is not None:
        parts.append(Filter.by_property("year").less_or_equal(flt.year_max))
    keys = [Filter.by_property("key").like(_like_prefix(p)) for p in flt.key_prefixes() or ()]
    if keys:
        parts.append(keys[0] if len(keys) == 1 else Filter.any_of(keys))
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else Filter.all_of(parts)


def matches(flt: ChunkFilter, chunk: ChunkRecord) -> bool:
    """The exact prefix check behind a ``like`` filter (wildcard characters in a prefix)."""
    path = flt.section_path
    return path is None or not path.endswith("*") or chunk.section_path.startswith(path[:-1])


def default_vector(vector: Any) -> Sequence[float]:
    """The chunk's vector from a v4 result (a dict of named vectors)."""
    if isinstance(vector, dict):
        vector = vector.get("default", next(iter(vector.values()), []))
    return [float(x) for x in vector]
