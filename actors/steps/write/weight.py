"""What a reader weighs a source by, in the report: retractions, citation counts, open access, preprints.

OpenAlex marks retracted works (``is_retracted``); the search copies that, the citation count, the open-access
status and whether only a preprint exists onto the Candidate and the stored document
(:data:`messages.search.WEIGHT_FIELDS`). The Writer uses them here:

* :func:`prefer_unretracted` — a section whose evidence comes from both retracted and non-retracted papers
  keeps only the non-retracted ones (the retracted paper's evidence is named in a note, never cited);
* :func:`retraction_warnings` — a section that cites a retracted paper all the same (nothing else answered)
  says so under its sentences, with the paper's number;
* :func:`weight_note` — the tail of a "Sources Consulted" entry: "RETRACTED", "cited by N", the open-access
  status, "preprint only".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from actors.steps.text import escape_md


class _Weighed(Protocol):
    is_retracted: bool
    cited_by_count: int | None
    oa_status: str
    preprint_only: bool


T = TypeVar("T")

RETRACTED = "**RETRACTED**"
_OA_WORDS = {"diamond": "open access (diamond)", "gold": "open access (gold)", "hybrid": "open access (hybrid)",
             "bronze": "free to read (bronze)", "green": "open access (green: a repository copy)",
             "closed": "not open access"}


def weight_note(source: _Weighed) -> str:
    """' **RETRACTED** (OpenAlex). Cited by 138. Open access (gold). Preprint only.' — empty when nothing is known."""
    parts = []
    if source.is_retracted:
        parts.append(f"{RETRACTED} (OpenAlex marks this work retracted): do not rely on it")
    if source.cited_by_count is not None:
        parts.append(f"Cited by {source.cited_by_count:,}")
    if source.oa_status:
        words = _OA_WORDS.get(source.oa_status, source.oa_status)
        parts.append(words[0].upper() + words[1:])
    if source.preprint_only:
        parts.append("Preprint only (not peer reviewed)")
    return "".join(f" {p}." for p in parts)


def prefer_unretracted(items: Sequence[tuple[Any, T]], source_of: Any = lambda item: item[1]
                       ) -> tuple[list[tuple[Any, T]], list[T]]:
    """(the items to write from, the retracted sources left out): when some item's source is not retracted,
    the retracted ones are left out; when all are retracted they all stay (and the section warns)."""
    kept = [item for item in items if not source_of(item).is_retracted]
    if not kept or len(kept) == len(items):
        return list(items), []
    dropped: list[T] = []
    for item in items:
        src = source_of(item)
        if src.is_retracted and all(src is not d for d in dropped):
            dropped.append(src)
    return kept, dropped


def left_out_note(dropped: Sequence[Any]) -> str | None:
    """The section's note on retracted papers whose evidence was left out (None when none was)."""
    if not dropped:
        return None
    titles = "; ".join(f"*{escape_md(getattr(s, 'title', '') or 'Untitled').rstrip('.')}*" for s in dropped)
    return (f"Left out as retracted (OpenAlex), although it also bore on this requirement: {titles}. "
            "The findings above rest on the papers that were not retracted.")


def retraction_warnings(cited: Sequence[tuple[int, Any]]) -> list[str]:
    """One warning paragraph per retracted source a section cites (``cited``: (its number, the source)),
    each followed by a blank line, ready to append to the section's Markdown."""
    out: list[str] = []
    seen: set[int] = set()
    for n, src in cited:
        if not src.is_retracted or n in seen:
            continue
        seen.add(n)
        title = escape_md(getattr(src, "title", "") or "Untitled").rstrip(".")
        out += [f"Warning: [{n}] *{title}* has been retracted (OpenAlex marks it is_retracted); what it reports "
                "above should not be relied on.", ""]
    return out
