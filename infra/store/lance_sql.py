"""LanceDB's SQL where-clauses for a :class:`~infra.store.base.ChunkFilter`: on the ``chunks`` table
(:func:`filter_sql`) and on the ``documents`` registry (:func:`document_sql`), with every string quoted once
(:func:`sql_str`)."""

from __future__ import annotations

from collections.abc import Iterable

from infra.store.base import ChunkFilter


def sql_str(value: str) -> str:
    """A SQL string literal for LanceDB filters: single quotes doubled, everything else verbatim
    (backslashes are not escape characters in Lance's SQL dialect)."""
    return "'" + value.replace("'", "''") + "'"


def sql_list(values: Iterable[str]) -> str:
    """A SQL list of string literals: ``('a', 'b')``."""
    return "(" + ", ".join(sql_str(v) for v in values) + ")"


def filter_sql(flt: ChunkFilter) -> str | None:
    """The SQL where-clause on the ``chunks`` table for a :class:`ChunkFilter` (None when it
    filters nothing). Registry conditions (years, sources) must be resolved to doc ids first
    (:meth:`ChunkFilter.narrowed`): chunks carry no year or key.

    ``flt.doc_ids == ()`` matches nothing; callers short-circuit that case before querying.
    """
    if flt.by_document:
        raise ValueError("resolve the filter's years and sources to doc ids before building chunk SQL")
    parts: list[str] = []
    if flt.doc_ids is not None:
        parts.append(f"doc_id IN {sql_list(flt.doc_ids)}" if flt.doc_ids else "FALSE")
    if flt.section_path is not None:
        if flt.section_path.endswith("*"):
            parts.append(f"starts_with(section_path, {sql_str(flt.section_path[:-1])})")
        else:
            parts.append(f"section_path = {sql_str(flt.section_path)}")
    if flt.exclude_chunk_ids:
        parts.append(f"chunk_id NOT IN {sql_list(flt.exclude_chunk_ids)}")
    if flt.exclude_kinds:
        parts.append(f"section_kind NOT IN {sql_list(flt.exclude_kinds)}")
    return " AND ".join(f"({p})" for p in parts) if parts else None


def document_sql(flt: ChunkFilter) -> str | None:
    """The SQL where-clause on the ``documents`` table for the document conditions of a
    :class:`ChunkFilter` (doc_ids, years, sources); None when it has none. A document without a
    year fails any year bound (SQL comparisons with NULL are not true)."""
    parts: list[str] = []
    if flt.doc_ids is not None:
        parts.append(f"doc_id IN {sql_list(flt.doc_ids)}" if flt.doc_ids else "FALSE")
    if flt.year_min is not None:
        parts.append(f"year >= {int(flt.year_min)}")
    if flt.year_max is not None:
        parts.append(f"year <= {int(flt.year_max)}")
    prefixes = flt.key_prefixes()
    if prefixes is not None:
        parts.append(" OR ".join(f"starts_with(key, {sql_str(p)})" for p in prefixes) if prefixes else "FALSE")
    return " AND ".join(f"({p})" for p in parts) if parts else None
