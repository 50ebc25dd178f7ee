"""The report as Markdown: title, overview, scope, one section per requirement, the comparison of the cited papers,
the figures and the sources consulted (Harvard style); and the short titles taken from the query."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from actors.steps.plan.questions import asked_part, list_items, without_premise
from actors.steps.plan.requirements import content_words, without_form
from actors.steps.text import MIN_LETTER_SHARE, escape_md
from actors.steps.write.citations import SOURCES_HEADING
from actors.steps.write.quotes import Section, Source
from actors.steps.write.weight import retraction_warnings, weight_note
from messages.search import weight_of
from messages.write import Comparison, ContributionRecord, Figure, SourceRef, WriteRequest

COMPARISON_HEADING = "Comparison of the Cited Papers"
FIGURES_HEADING = "Figures"
FIGURES_DIR = "figures"
MAX_GAPS_LISTED = 8
MAX_AUTHORS = 6
TITLE_WORDS = 8  # words of the query in a title derived from it


def harvard(source: SourceRef) -> str:
    """'[n] Authors (Year) *Title*. Venue. origin.' with 'Anonymous' and 'n.d.' when unknown (no venue when
    not known)."""
    names = [" ".join(a.split()) for a in source.authors if a.strip()]
    if not names:
        authors = "Anonymous"
    elif len(names) > MAX_AUTHORS:
        authors = ", ".join(names[:MAX_AUTHORS]) + " et al."
    elif len(names) == 1:
        authors = names[0]
    else:
        authors = ", ".join(names[:-1]) + " and " + names[-1]
    year = str(source.year) if source.year else "n.d."
    title = escape_md(source.title).rstrip(".") or "Untitled"
    origin = escape_md(source.origin).rstrip(".")
    venue = escape_md(" ".join(source.venue.split())).rstrip(".")
    return (f"[{source.n}] {escape_md(authors)} ({year}) *{title}*." + (f" {venue}." if venue else "")
            + (f" {origin}." if origin else "") + weight_note(source))


def source_ref(src: Source) -> SourceRef:
    """The numbered source as the report's message records it."""
    return SourceRef(n=src.n, doc_id=src.doc_id, title=src.title,  # type: ignore[arg-type]
                     authors=src.authors, year=src.year, origin=src.origin, venue=src.venue,
                     venue_kind=src.venue_kind, chunk_ids=tuple(src.chunk_ids), doi=src.doi,
                     arxiv_id=src.arxiv_id, **weight_of(src))


def shown(coverage: float) -> float:
    """A coverage as the report prints it, two decimals cut rather than rounded: 0.849, short of the goal 0.85, reads
    0.84 beside its "partly", not 0.85."""
    return math.floor(coverage * 100 + 1e-9) / 100


def coverage_word(coverage: float, goal: float) -> str:
    """How the Scope and the overview name a coverage: answered once it reaches the run's goal (``run.min_coverage``,
    where the loop settles a requirement as answered), partly above 0."""
    return "answered" if coverage >= goal else "partly" if coverage > 0 else "not covered"


def on_topic(title: str, texts: Iterable[str]) -> bool:
    """Whether a model-written title is plausible and shares a content word with one of ``texts``."""
    chars = "".join(title.split())
    if not chars or sum(c.isalpha() for c in chars) / len(chars) < MIN_LETTER_SHARE:
        return False
    wanted = set().union(*(content_words(t) for t in texts))
    return bool(content_words(title) & wanted)


def query_title(query: str) -> str:
    """A short title taken from the query: the first ``TITLE_WORDS`` words of what it asks (its first item when it is
    a list, :func:`list_items`; without the researcher's context and lead-in before the question, :func:`asked_part`,
    the premises before it, :func:`without_premise`, and a request for the answer's form,
    :func:`~actors.steps.plan.requirements.without_form`),
    without a trailing '?' (or other closing punctuation), "…" when words were left out."""
    items = list_items(query)
    words = query_topic(without_form(items[0] if items else without_premise(asked_part(query)))).split()
    if words and words[0].isalpha() and words[0].islower():  # "what do writers need …" after a lead-in
        words[0] = words[0].capitalize()
    title = " ".join(words[:TITLE_WORDS]).rstrip("?!.,;: …")
    return (title + "…" if len(words) > TITLE_WORDS else title) or "Research"


def query_topic(query: str, limit: int = 90) -> str:
    """The query on one line (a list's lines joined: "I need: - an R package … - evidence …"), shortened at a word
    boundary."""
    line = " ".join(query.split())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else line[:limit]) + "…"


def render_report(request: WriteRequest, title: str, overview: str, sections: Sequence[Section],
                  numbered: Sequence[Source], *, consulted: str, judge: str, goal: float,
                  comparison: Comparison | None = None, figures: Sequence[Figure] = ()) -> str:
    """The report's Markdown. ``consulted``: which documents the run read (the Scope's "Documents consulted");
    ``judge``: the Scope's line on the judge (``Settings.judge_summary``); ``goal``: the coverage a requirement is
    answered at (``run.min_coverage``)."""
    out = [f"# {escape_md(title)} — Report", "", "## Overview", "", overview, "", "## Scope", ""]
    with_evidence = len(numbered)
    added = sum(1 for s in sections if s.coverage.requirement.added_after is not None)
    out += [f"- Research query: {escape_md(query_topic(request.query.text, 300))}",
            f"- Requirements: {len(sections)}" + (f" ({added} added by re-planning during the run)" if added
                                                  else ""),
            f"- Iterations: {request.iterations}",
            f"- Documents consulted: {consulted}; {with_evidence} gave evidence",
            f"- Judge: {escape_md(judge)}", "",
            "| Requirement | Coverage | Evidence documents |", "| --- | --- | --- |"]
    for s in sections:
        cov = s.coverage
        state = ("failed" if cov.status == "failed"
                 else f"{shown(cov.coverage):.2f} ({coverage_word(cov.coverage, goal)})")
        req = cov.requirement
        mark = f" (added after iteration {req.added_after})" if req.added_after is not None else ""
        out.append(f"| {req.id}: {escape_md(req.text)}{mark} | {state} | {len(cov.evidence)} |")
    out.append("")
    for s in sections:
        out += [f"## {escape_md(s.coverage.requirement.text)}", ""]
        for note in s.notes:
            out += [note, ""]
        for sentence in s.sentences:
            cites = "".join(f"[{s.items[label - 1][1].n}]" for label in sentence.labels)
            out += [f"{sentence.kind}: {sentence.text}" + (f" {cites}." if cites else "."), ""]
        out += retraction_warnings([(s.items[label - 1][1].n, s.items[label - 1][1])
                                    for sentence in s.sentences for label in sentence.labels])
    if comparison is not None and comparison.records:
        out += render_comparison(comparison)
        compared = {r.n for r in comparison.records}
        out += retraction_warnings([(src.n, src) for src in numbered if src.n in compared])
    if figures:
        out += [f"## {FIGURES_HEADING}", ""]
        for fig in figures:
            out += [f"![{escape_md(fig.caption)}]({FIGURES_DIR}/{fig.name}.png)", "",
                    f"Figure: {escape_md(fig.caption)} ([SVG]({FIGURES_DIR}/{fig.name}.svg), "
                    f"[PNG]({FIGURES_DIR}/{fig.name}.png)).", ""]
    out += [f"## {SOURCES_HEADING}", ""]
    if not numbered:
        out += ["No sources gave evidence in this run.", ""]
    for src in numbered:
        out += [harvard(source_ref(src)), ""]
    return "\n".join(out).rstrip() + "\n"


def render_comparison(comparison: Comparison) -> list[str]:
    """The comparison as Markdown lines: records, compliance, overlaps, differences, the gap matrix."""
    def cell(text: str) -> str:
        return escape_md(text) or "—"

    records = comparison.records
    out = [f"## {COMPARISON_HEADING}", "",
           "| Paper | Problem | Method | Key contribution | Claimed novelty |", "| --- | --- | --- | --- | --- |"]
    for r in records:
        out.append(f"| [{r.n}] {cell(r.title)} | {cell(r.problem)} | {cell(r.method)} | {cell(r.contribution)} | "
                   f"{cell(r.novelty)} |")
    out += ["", f"Contribution records with all four fields stated: {comparison.compliant} of {len(records)}.", ""]
    if comparison.overlaps:
        out += ["| Papers | Shared element | What they share |", "| --- | --- | --- |"]
        out += [f"| {' '.join(f'[{n}]' for n in o.papers)} | {o.element} | {cell(o.shared)} |"
                for o in comparison.overlaps]
        out.append("")
    if comparison.differences:
        out += ["| Paper | What it does that the others here do not |", "| --- | --- |"]
        out += [f"| [{d.n}] | {cell(d.distinct)} |" for d in comparison.differences]
        out.append("")
    m = comparison.matrix
    if m is not None:
        def paper(n: int) -> str:  # † a paper placed by a label its own text does not support (label_check_lines)
            return f"[{n}]†" if n in m.unsupported else f"[{n}]"

        used_rows = [i for i, row in enumerate(m.cells) if any(row)]
        used_cols = [j for j in range(len(m.methods)) if any(m.cells[i][j] for i in range(len(m.problems)))]
        if used_rows:
            out += ["Problem × method matrix (computed from the records' labels; rows and columns with no paper are "
                    "left out):", "",
                    "| Problem / method | " + " | ".join(cell(m.methods[j]) for j in used_cols) + " |",
                    "| --- |" + " --- |" * len(used_cols)]
            for i in used_rows:
                out.append(f"| {cell(m.problems[i])} | "
                           + " | ".join(" ".join(paper(n) for n in m.cells[i][j]) or "—" for j in used_cols) + " |")
            out.append("")
        gaps = [f"{escape_md(m.problems[i])} × {escape_md(m.methods[j])}" for i in used_rows
                for j in used_cols if not m.cells[i][j]]
        shown = "; ".join(gaps[:MAX_GAPS_LISTED]) + (f"; and {len(gaps) - MAX_GAPS_LISTED} more"
                                                    if len(gaps) > MAX_GAPS_LISTED else "")
        out += [f"Empty cells: {len(m.empty)} of {len(m.problems) * len(m.methods)} (see the heatmap)."
                + (f" Gaps among the problems and methods the papers do use: {shown}." if gaps else ""), ""]
        if m.unlabelled:
            out += [f"Papers without a valid pair of labels: {' '.join(f'[{n}]' for n in m.unlabelled)}.", ""]
    if comparison.label_check_top:
        out += label_check_lines(records, comparison.label_check_top)
    return out


def label_check_lines(records: Sequence[ContributionRecord], top: int) -> list[str]:
    """The labels' second opinion: for each checked record whose labels are not those closest to its paper's title and
    abstract, the model's label and the closest one; † where the model's is not among the ``top`` closest."""
    said = []
    for r in records:
        if len(r.text_labels) != 2:
            continue
        for axis, label, closest in (("problem", r.problem_label, r.text_labels[0]),
                                     ("method", r.method_label, r.text_labels[1])):
            if label is not None and label != closest:
                mark = "†" if label in r.unsupported_labels else ""
                said.append(f"[{r.n}] {axis}: {escape_md(closest)} (model: {escape_md(label)}{mark})")
    if not said:
        return ["Label check: each compared paper's labels are the ones closest to its title and abstract (embedding "
                "similarity).", ""]
    marked = any(r.unsupported_labels for r in records)
    return ["Label check, a second opinion from embedding similarity (not a verdict): the label closest to the "
            f"paper's title and abstract where it is not the model's: {'; '.join(said)}."
            + (f" † the model's label is not among the {top} labels of its taxonomy closest to that text."
               if marked else ""), ""]
