"""Citation checks of a written report (pure): which source numbers a text cites, and whether a report's citations
are sound (:func:`check_citations`, also what ``forage verify`` re-runs on a finished report)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from markdown_it import MarkdownIt

from actors.steps.text import CITE
from messages.write import SectionSources, SourceRef

SOURCES_HEADING = "Sources Consulted"

_SEGMENT = re.compile(r"\b(Evidence|Related|Mechanism):")


def citation_numbers(text: str) -> list[int]:
    """Every source number cited in ``text`` ([3], [1, 2], [1–3]), in order, with repeats."""
    numbers: list[int] = []
    for match in CITE.finditer(text):
        for part in re.split(r"\s*[,;]\s*", match.group(1)):
            bounds = re.split(r"\s*[–-]\s*", part)
            if len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
                lo, hi = int(bounds[0]), int(bounds[1])
                numbers.extend(range(lo, hi + 1) if 0 < hi - lo < 50 else (lo, hi))
            else:
                numbers.extend(int(b) for b in bounds if b.isdigit())
    return numbers


def excerpt(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters with "…" (what a problem or failure message quotes)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_citations(markdown: str, sources: Sequence[SourceRef],
                    sections: Sequence[SectionSources] | None = None) -> list[str]:
    """Problems with a report's citations; an empty list means none were found.

    Checks, using the Markdown structure (markdown-it): every [n] before the '## Sources Consulted'
    heading is a known source and has an entry in that section; every 'Evidence:' (or 'Related:') sentence carries at
    least one citation; every entry in Sources Consulted is a known source and is listed once; no two
    sources share a number. With ``sections`` (what each requirement's section may cite), a citation
    under a requirement's heading must name a source with evidence for that requirement.
    """
    known = {s.n for s in sources}
    allowed = {s.heading.strip(): set(s.sources) for s in sections or ()}
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    body: list[tuple[str, bool, str]] = []  # (inline text, is it a paragraph, the h2 heading it is under)
    listed: list[tuple[int, str]] = []
    in_sources = has_sources = False
    heading: str | None = None
    current = ""
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            heading = tok.tag
            continue
        if tok.type != "inline":
            continue
        if heading is not None:
            if heading == "h2":
                current = tok.content.strip()
                in_sources = current == SOURCES_HEADING
                has_sources = has_sources or in_sources
            if not in_sources:
                body.append((tok.content, False, current))
            heading = None
            continue
        is_paragraph = i > 0 and tokens[i - 1].type == "paragraph_open"
        if in_sources:
            entry = re.match(r"\s*\[(\d+)\]", tok.content)
            if entry:
                listed.append((int(entry.group(1)), tok.content))
        else:
            body.append((tok.content, is_paragraph, current))

    problems: list[str] = []
    for n, count in Counter(s.n for s in sources).items():
        if count > 1:
            problems.append(f"{count} sources share the number [{n}]")
    cited: list[int] = []
    for text, is_paragraph, under in body:
        for n in citation_numbers(text):
            cited.append(n)
            if n not in known:
                problems.append(f"dangling citation [{n}]: {excerpt(text)}")
            elif is_paragraph and under in allowed and n not in allowed[under]:
                problems.append(f"citation [{n}] names a source without evidence for the section "
                                f"'{excerpt(under, 50)}': {excerpt(text)}")
        if is_paragraph:
            starts = [m for m in _SEGMENT.finditer(text)]
            for k, m in enumerate(starts):
                if m.group(1) == "Mechanism":
                    continue
                end = starts[k + 1].start() if k + 1 < len(starts) else len(text)
                segment = text[m.start():end]
                if not citation_numbers(segment):
                    problems.append(f"Evidence sentence without a citation: {excerpt(segment)}")
    listed_numbers = {n for n, _ in listed}
    if (cited or known) and not has_sources:
        problems.append(f"no '## {SOURCES_HEADING}' section")
    for n in dict.fromkeys(cited):
        if n in known and n not in listed_numbers:
            problems.append(f"citation [{n}] has no entry in {SOURCES_HEADING}")
    for n, count in Counter(n for n, _ in listed).items():
        if count > 1:
            problems.append(f"{SOURCES_HEADING} lists [{n}] {count} times")
    for n, text in listed:
        if n not in known:
            problems.append(f"{SOURCES_HEADING} lists [{n}], which is not a known source: {excerpt(text)}")
    return problems
