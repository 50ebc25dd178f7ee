"""Writing the cited Markdown report from every requirement's evidence (thesis report structure).

::

    # <topic> — Report
    ## Overview
    ## Scope                      requirements, documents, iterations, coverage table
    ## <requirement text>         one per requirement: "Mechanism: …" and "Evidence: … [n]" sentences
    ## Sources Consulted          "[n] Authors (Year) *Title*. origin." (Harvard style)

Each requirement section is one structured LLM call that sees that requirement's evidence under
local labels [1..k]. Afterwards every citation is checked: a label that is not one of the
requirement's evidence items is removed (``removed_citations``), an Evidence sentence left
without a valid citation is dropped (``removed_sentences``). A section whose draft needed such
repairs, or that rests on one document while its evidence has two or more, is written once more
with that feedback (``write.regenerate_sections``; ``regenerated_sections``) and the better draft
kept. Labels become global source numbers in order of first citation; sources with evidence that no
sentence cites are numbered after them. The report records which numbers each section may cite
(``Report.sections``), so ``forage verify`` can re-check a finished report.

Then the cited papers are compared (:mod:`actors.steps.write.compare`, ``## Comparison of the Cited
Papers``) and charts drawn (:mod:`actors.steps.write.charts`, ``## Figures``, files in ``figures/``).
If the LLM fails for a section (invalid output, a timeout or a server that keeps failing, after the
retries), the section is written deterministically from the evidence and the failure recorded in
``failed_steps``. :func:`check_citations` re-checks a finished report.

A small model writes garbage, so every model-written text goes through :func:`tidy` first: repetition
loops are collapsed, text cut off at the schema's length limit is trimmed back to whole words, and
what is left must look like prose (:func:`plausible`). An implausible Mechanism sentence becomes
``NO_MECHANISM``, an implausible Evidence sentence is dropped (``removed_sentences``), an implausible
overview is written deterministically, and a title that shares no content word with the query or
the requirements is replaced by one taken from the query.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from markdown_it import MarkdownIt

from actors.steps.write.compare import ComparisonStep
from actors.steps.write.weight import left_out_note, prefer_unretracted, retraction_warnings, weight_note
from actors.steps.events import Emit, null_emit
from actors.steps.forage.step import block
from actors.steps.plan.requirements import content_words, own_question
from actors.steps.prompts import OVERVIEW_SYSTEM, SECTION_SYSTEM
from actors.steps.schemas import (
    MAX_EVIDENCE_SENTENCES,
    MOTIVE_CHARS,
    OVERVIEW_CHARS,
    SENTENCE_CHARS,
    TITLE_CHARS,
    OverviewDraft,
    SectionDraft,
)
from actors.steps.text import (CITE, CUT_SLACK, MIN_LETTER_SHARE, escape_md, finding_weight, plain_text,
                               prose_sentences, tidy, trim_cut, without_markup)
from infra.embed.base import Embedder
from infra.errors import LLM_FAILURES
from infra.llm.base import LLM, ChatMessage
from infra.settings import Settings
from infra.store.base import ChunkRecord, Store
from messages.forage import Evidence, RequirementCoverage
from messages.search import OaStatus, VenueKind, weight_of
from messages.status import Stage
from messages.write import (CitedChunk, Comparison, ContributionRecord, Figure, Report, SectionSources, SourceRef,
                            WriteRequest)

SOURCES_HEADING = "Sources Consulted"
COMPARISON_HEADING = "Comparison of the Cited Papers"
FIGURES_HEADING = "Figures"
FIGURES_DIR = "figures"
MAX_GAPS_LISTED = 8
MAX_ITEMS_SHOWN = 8  # evidence items the LLM sees per section; the rest are listed deterministically
EXCERPTS_PER_ITEM = 2
EXCERPT_CHARS = 700
QUOTE_CHARS = 200
MAX_AUTHORS = 6

NO_EVIDENCE = "The literature found in this run did not cover this requirement."
PARTIAL = ("Only related documents were found for this requirement; none of their passages answered it "
           "directly.")
UNCONFIRMED = ("No answer to this requirement was confirmed: the model called {n} passage(s) answers, but their "
               "similarity to the requirement and the words they share with it fell short of the check, so they count "
               "as related, not as answers. Read the quotes below as candidates.")
NO_MECHANISM = ("no synthesis is available for this requirement because the language model failed; the "
                "evidence found is listed below")
EXTRACTIVE = ("Quoted from the evidence: each finding below is the sentence of a cited passage closest to this "
              "requirement{why}.")
RELATED = "“Related” marks what rests only on papers on the topic that do not answer this requirement."
EXTRACTED_PER_ITEM = 1  # sentences quoted per evidence document

_SEGMENT = re.compile(r"\b(Evidence|Related|Mechanism):")
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")

# LLM_FAILURES (what a model call may end in after its retries): the Writer falls back and records it, so a server
# that fails while the report is written (HTTP 500 on every retry, a timeout, garbage) costs prose, never the run

TITLE_WORDS = 8  # words of the query in a title derived from it


# -- citation checking (pure) ---------------------------------------------------------------------------
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


def _excerpt(text: str, limit: int = 80) -> str:
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
                problems.append(f"dangling citation [{n}]: {_excerpt(text)}")
            elif is_paragraph and under in allowed and n not in allowed[under]:
                problems.append(f"citation [{n}] names a source without evidence for the section "
                                f"'{_excerpt(under, 50)}': {_excerpt(text)}")
        if is_paragraph:
            starts = [m for m in _SEGMENT.finditer(text)]
            for k, m in enumerate(starts):
                if m.group(1) == "Mechanism":
                    continue
                end = starts[k + 1].start() if k + 1 < len(starts) else len(text)
                segment = text[m.start():end]
                if not citation_numbers(segment):
                    problems.append(f"Evidence sentence without a citation: {_excerpt(segment)}")
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
            problems.append(f"{SOURCES_HEADING} lists [{n}], which is not a known source: {_excerpt(text)}")
    return problems


# -- text helpers ----------------------------------------------------------------------------------------
def clean_sentence(text: str) -> tuple[str, list[int]]:
    """An LLM sentence as escaped Markdown without citation markers, labels or final punctuation;
    and the numbers it cited inline."""
    return escape_md(plain_text(text).rstrip(".;:, ")), citation_numbers(text)


def first_sentence(text: str, limit: int = QUOTE_CHARS) -> str:
    """A short quote that occurs verbatim in ``text``: its first sentence (headings skipped), ≤ ``limit``."""
    start = 0
    for line in text.splitlines(keepends=True):
        if line.strip() and not line.lstrip().startswith("#"):
            break
        start += len(line)
    body = text[start:] if text[start:].strip() else text
    body = body[len(body) - len(body.lstrip()):]
    end = _SENTENCE_END.search(body, 20)
    quote = body[: end.end()] if end else body
    if len(quote) > limit:
        cut = quote[:limit]
        quote = cut.rsplit(" ", 1)[0] if " " in cut[limit // 2:] else cut
    return quote.rstrip()


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


# -- the step --------------------------------------------------------------------------------------------
@dataclass
class _Source:
    doc_id: str
    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    origin: str = ""
    venue: str = ""
    venue_kind: VenueKind = ""
    chunk_ids: list[str] = field(default_factory=list)
    n: int | None = None
    is_retracted: bool = False  # what a reader weighs it by (messages.search.WEIGHT_FIELDS; write/weight.py)
    cited_by_count: int | None = None
    oa_status: OaStatus = ""
    preprint_only: bool = False


@dataclass
class _Sentence:
    kind: Literal["Mechanism", "Evidence", "Related"]  # Related: quoted from a paper that does not answer
    text: str  # escaped Markdown, no final punctuation
    labels: list[int]  # valid local labels
    # the chunks it rests on: the one a quote was taken from, the one a listed motive judged; () for a model's
    # sentence, which rests on the passages its items were shown with (:func:`_rests_on`)
    chunks: tuple[str, ...] = ()


@dataclass
class _Section:
    coverage: RequirementCoverage
    items: list[tuple[Evidence, _Source]] = field(default_factory=list)  # label i+1 -> items[i]
    sentences: list[_Sentence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # plain paragraphs (no citation)
    regenerated: bool = False


@dataclass
class _Draft:
    """One checked section draft."""

    mechanism: _Sentence
    evidence: list[_Sentence]
    removed_citations: int
    removed_sentences: int
    uncited: int  # plausible evidence sentences dropped for want of a valid citation
    distinct: int  # distinct documents cited

    def score(self) -> tuple[bool, int, int]:
        return bool(self.evidence), self.distinct, -(self.removed_citations + self.removed_sentences)


def _distinct(items: Sequence[tuple[Evidence, _Source]]) -> int:
    return len({src.doc_id for _, src in items})


class WriteStep:
    """Writes the report for a run from the Foragers' cumulative coverage."""

    def __init__(self, settings: Settings, store: Store, llm: LLM, emit: Emit = null_emit,
                 embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.store = store
        self.llm = llm
        self.emit = emit
        self.embedder = embedder  # checks the comparison's labels against each paper's text (None: unchecked)
        self.llm_calls = 0

    async def write(self, request: WriteRequest) -> Report:
        failed: list[str] = []
        removed = {"citations": 0, "sentences": 0}
        calls_before = self.llm_calls
        sources: dict[str, _Source] = {}
        chunks: dict[str, ChunkRecord | None] = {}

        sections: list[_Section] = []
        for cov in request.coverages:
            section = _Section(cov)
            sections.append(section)
            req = cov.requirement
            if cov.status == "failed":
                section.notes.append(f"Foraging this requirement failed ({escape_md(cov.error or 'unknown error')}), "
                                     "so this report has no findings for it.")
                continue
            if not cov.evidence:
                section.notes.append(NO_EVIDENCE)
                continue
            for ev in cov.evidence:
                src = sources.get(ev.doc_id) or self._source(ev)
                sources[ev.doc_id] = src
                src.chunk_ids.extend(c for c in ev.chunk_ids if c not in src.chunk_ids)
                section.items.append((ev, src))
            section.items, retracted = prefer_unretracted(section.items)
            if note := left_out_note(retracted):
                section.notes.append(note)
            if not any(ev.tag == "answers" for ev, _ in section.items):
                section.notes.append(UNCONFIRMED.format(n=cov.unconfirmed) if cov.unconfirmed else PARTIAL)
            before = dict(removed)
            await self._draft(request, section, chunks, removed, failed)
            self.emit(Stage.WRITE, "section", f"wrote the section for {req.id}", iteration=request.iterations,
                      requirement_id=req.id, sentences=len(section.sentences),
                      removed_citations=removed["citations"] - before["citations"],
                      removed_sentences=removed["sentences"] - before["sentences"], regenerated=section.regenerated)

        numbered = self._number(sections, sources)
        title, overview = await self._overview(request, sections, failed)
        refs = tuple(_ref(s) for s in numbered)
        comparison = await self._compare(sections, refs, failed)
        figures = self._figures(request, refs, comparison, failed) if self.settings.write.charts else ()
        markdown = self._render(request, title, overview, sections, numbered, comparison, figures)
        cited = self._cited_chunks(sections, numbered, chunks, failed)
        allowed = tuple(SectionSources(requirement_id=s.coverage.requirement.id,
                                       heading=escape_md(s.coverage.requirement.text),
                                       sources=tuple(sorted({src.n for _, src in s.items if src.n is not None})))
                        for s in sections)
        # cannot fail by construction; if it ever does, the run record says so
        failed.extend(f"citation check: {p}" for p in check_citations(markdown, refs, allowed))
        report = Report(run_id=request.run_id, markdown=markdown, sources=refs, cited_chunks=cited,
                        removed_citations=removed["citations"], removed_sentences=removed["sentences"],
                        regenerated_sections=sum(s.regenerated for s in sections), sections=allowed,
                        comparison=comparison, figures=figures,
                        llm_calls=self.llm_calls - calls_before, failed_steps=tuple(failed))
        self.emit(Stage.WRITE, "written", f"report with {len(refs)} sources", iteration=request.iterations,
                  sources=len(refs), cited_chunks=len(cited), removed_citations=report.removed_citations,
                  removed_sentences=report.removed_sentences, regenerated_sections=report.regenerated_sections,
                  llm_calls=report.llm_calls, failed_steps=len(failed))
        return report

    # -- sources -------------------------------------------------------------------------------------
    def _source(self, ev: Evidence) -> _Source:
        doc = self.store.get_document(ev.doc_id)
        if doc is None:
            return _Source(ev.doc_id, ev.title)
        return _Source(ev.doc_id, doc.title or ev.title, tuple(doc.authors), doc.year, doc.origin, doc.venue,
                       doc.venue_kind, **weight_of(doc))

    def _chunk(self, chunk_id: str, cache: dict[str, ChunkRecord | None]) -> ChunkRecord | None:
        if chunk_id not in cache:
            cache[chunk_id] = self.store.get_chunk(chunk_id)
        return cache[chunk_id]

    # -- one requirement section ---------------------------------------------------------------------
    async def _draft(self, request: WriteRequest, section: _Section, chunks: dict[str, ChunkRecord | None],
                     removed: dict[str, int], failed: list[str]) -> None:
        req = section.coverage.requirement
        shown = section.items[:MAX_ITEMS_SHOWN]
        k = len(shown)
        parts = []
        for label, (ev, src) in enumerate(shown, start=1):
            excerpts = []
            for cid in ev.chunk_ids[:EXCERPTS_PER_ITEM]:
                chunk = self._chunk(cid, chunks)
                if chunk is not None:  # its prose: figure text and markup are nothing to write a sentence from
                    text = " ".join(without_markup(chunk.text).split())
                    excerpts.append(text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + " …")
            parts.append(
                f"[{label}] {src.title}\n"
                f"{'Answers the requirement' if ev.tag == 'answers' else 'Related to the requirement'}: "
                f"{ev.motive or '(no motive)'}\n"
                f"Document summary: {ev.summary or '(none)'}\n"
                f"{block('EXCERPTS', chr(10).join(excerpts) or '(no excerpt)')}")
        messages: list[ChatMessage] = [
            {"role": "system", "content": SECTION_SYSTEM.format(n=MAX_EVIDENCE_SENTENCES)},
            {"role": "user", "content": (f"Requirement: {req.text}\n\nEvidence items (numbers 1 to {k}):\n\n"
                                         + "\n\n".join(parts))}]
        if self.settings.extractive():
            self._quote(section, chunks, " (the embedded model writes no synthesis)")
            return
        self.llm_calls += 1
        try:
            draft = await self.llm.structured(messages, SectionDraft)
        except LLM_FAILURES as exc:
            reason = f"section {req.id}: {type(exc).__name__}: {_excerpt(str(exc), 200)}; written from the evidence"
            failed.append(reason)
            self.emit(Stage.WRITE, "step_failed", reason, requirement_id=req.id)
            self._quote(section, chunks, " (the language model's synthesis failed)")
            return

        result = self._apply(draft, shown)
        feedback = self._feedback(result, shown) if self.settings.write.regenerate_sections else []
        if feedback:
            # one regeneration: the model sees its own answer and what was wrong with it
            self.llm_calls += 1
            section.regenerated = True
            retry: list[ChatMessage] = [
                *messages, {"role": "assistant", "content": draft.model_dump_json()},
                {"role": "user", "content": "Write the section again. " + " ".join(feedback)}]
            try:
                second = self._apply(await self.llm.structured(retry, SectionDraft), shown)
            except LLM_FAILURES as exc:
                failed.append(f"section {req.id}: the regeneration failed ({type(exc).__name__}); the first draft "
                              "was kept with its faults removed")
            else:
                if second.score() >= result.score():
                    result = second
            if result.evidence and result.distinct < min(2, _distinct(shown)):
                failed.append(f"section {req.id}: the section rests on one source although its evidence has "
                              f"{_distinct(shown)}")
        removed["citations"] += result.removed_citations
        removed["sentences"] += result.removed_sentences
        evidence = result.evidence
        if not evidence:
            failed.append(f"section {req.id}: no Evidence sentence with a valid citation; evidence quoted instead")
            evidence = self._extracted(req.text, shown, 0, chunks)
        section.sentences = [result.mechanism, *self._as_related(section, [*evidence,
                                                                           *self._listed(section.items[k:], k)])]
        if any(x.kind == "Related" for x in section.sentences):
            section.notes.append(RELATED)

    @staticmethod
    def _as_related(section: _Section, sentences: list[_Sentence]) -> list[_Sentence]:
        """An Evidence sentence citing only papers that do not answer the requirement is Related (a paper on the
        topic is not a finding for it), whether a model wrote it or it is quoted."""
        answers = {i for i, (ev, _) in enumerate(section.items, start=1) if ev.tag == "answers"}
        return [_Sentence("Related", x.text, x.labels, x.chunks)
                if x.kind == "Evidence" and x.labels and not answers & set(x.labels) else x for x in sentences]

    def _quote(self, section: _Section, chunks: dict[str, ChunkRecord | None], why: str) -> None:
        """The section written from its evidence alone (:meth:`_extracted`), saying so and ``why``, and what a Related
        quote is when it has one. A requirement its papers answer is quoted from them alone: a quote cannot say how a
        paper only on the topic bears on what was asked, and beside the findings it reads as one of them."""
        if any(ev.tag == "answers" for ev, _ in section.items):
            section.items = [(ev, src) for ev, src in section.items if ev.tag == "answers"]
        section.notes.append(EXTRACTIVE.format(why=why))
        section.sentences = self._as_related(section, self._extracted(section.coverage.requirement.text,
                                                                      section.items, 0, chunks))
        if any(x.kind == "Related" for x in section.sentences):
            section.notes[-1] += " " + RELATED

    def _extracted(self, requirement: str, items: Sequence[tuple[Evidence, _Source]], offset: int,
                   chunks: dict[str, ChunkRecord | None]) -> list[_Sentence]:
        """Evidence sentences quoted from the passages (labels offset+1, ...): per item, the sentence of its
        first passages that shares the most of the requirement's focus (its words the paper's title does not
        state) and reads most as a finding (:func:`~actors.steps.text.finding_weight`: a measured value or a
        result beats the aim or background around it), then the most of its words, then the earliest; in item
        order, a sentence already quoted skipped; an item without a usable sentence is listed as found. The focus
        of a requirement anchored to the query's subject comes from its own question (:func:`own_question`). An
        answering item is quoted from its first passage (the confirmed answer that earned the coverage) while that
        passage has a usable sentence. Which of them are Related is the caller's (:meth:`_as_related`)."""
        wanted = content_words(requirement)
        asked = content_words(own_question(requirement)) or wanted
        quoted: set[str] = set()
        out: list[_Sentence] = []
        for i, (ev, src) in enumerate(items, start=offset + 1):
            # what the requirement asks about this paper: its words the paper's title does not already state (a
            # sentence restating the topic is background; all of them when the title holds every one)
            focus = (asked - content_words(ev.title)) or asked
            found: list[tuple[int, int, int, int, str, str]] = []
            for rank, cid in enumerate(ev.chunk_ids[:EXCERPTS_PER_ITEM]):
                chunk = self._chunk(cid, chunks)
                if chunk is None or back_matter(chunk.section_path):
                    continue
                # an answer's quote comes from the passage that earned it (its first: the confirmed answer)
                earned = 0 if ev.tag != "answers" or rank == 0 else 1
                for sentence in prose_sentences(chunk.text):
                    if sentence not in quoted and states_something(sentence):
                        words = content_words(sentence)
                        score = 2 * len(words & focus) + finding_weight(sentence)
                        found.append((earned, -score, -len(words & wanted), len(found), sentence, cid))
            best = [(text, cid) for *_, text, cid in sorted(found)[:EXTRACTED_PER_ITEM]]
            if not best:
                out += self._listed([(ev, src)], i - 1)
                continue
            for text, cid in best:
                quoted.add(text)
                clipped = text if len(text) <= SENTENCE_CHARS else text[:SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
                out.append(_Sentence("Evidence", f"“{escape_md(clipped.rstrip('.;:, '))}”", [i], (cid,)))
        return out

    def _apply(self, draft: SectionDraft, shown: Sequence[tuple[Evidence, _Source]]) -> _Draft:
        """A section draft checked against its evidence items: labels outside 1..k removed, sentences that are
        implausible or left without a citation dropped."""
        k = len(shown)
        removed = {"citations": 0, "sentences": 0}
        mech_text, mech_labels = self._checked(draft.mechanism, draft.mechanism_sources, k, removed)
        mechanism = _Sentence("Mechanism", mech_text or NO_MECHANISM, mech_labels if mech_text else [])
        evidence: list[_Sentence] = []
        uncited = 0
        for item in draft.evidence:
            text, labels = self._checked(item.sentence, item.sources, k, removed)
            if not text or not labels:
                removed["sentences"] += 1
                uncited += bool(text)
                continue
            evidence.append(_Sentence("Evidence", text, labels))
        docs = {shown[label - 1][1].doc_id for x in (mechanism, *evidence) for label in x.labels}
        return _Draft(mechanism, evidence, removed["citations"], removed["sentences"], uncited, len(docs))

    @staticmethod
    def _feedback(result: _Draft, shown: Sequence[tuple[Evidence, _Source]]) -> list[str]:
        """What is wrong with a checked draft, as instructions for its one regeneration ([] when nothing)."""
        k = len(shown)
        out = []
        if result.removed_citations:
            out.append(f"{result.removed_citations} of your source numbers were not among the items 1 to {k}; "
                       f"use only numbers 1 to {k}.")
        if result.uncited or not result.evidence:
            out.append("Every evidence sentence needs at least one item number in 'sources'.")
        available = _distinct(shown)
        if available >= 2 and result.distinct < 2:
            out.append(f"You relied on a single source although {available} different documents give evidence; "
                       "use at least two of them, stating what each one contributes.")
        return out

    @staticmethod
    def _checked(text: str, labels: Iterable[int], k: int, removed: dict[str, int]) -> tuple[str, list[int]]:
        """Tidy one generated sentence ('' if implausible, see :func:`tidy`); keep the labels 1..k, count
        the others as removed."""
        clean = escape_md(tidy(text, SENTENCE_CHARS).rstrip(".;:, "))
        inline = citation_numbers(text)
        wanted = list(dict.fromkeys([*inline, *labels]))
        valid = [n for n in wanted if 1 <= n <= k]
        removed["citations"] += len(wanted) - len(valid)
        return clean, valid

    @staticmethod
    def _listed(items: Sequence[tuple[Evidence, _Source]], offset: int) -> list[_Sentence]:
        """Deterministic Evidence sentences, one per evidence item (labels offset+1, offset+2, ...)."""
        out = []
        for i, (ev, src) in enumerate(items, start=offset + 1):
            # the motive is model text too (from the Forager): it gets the same plausibility checks
            what = tidy(ev.motive, MOTIVE_CHARS) or (
                f"{src.title} has passages that answer this requirement" if ev.tag == "answers"
                else f"{src.title} has passages related to this requirement")
            text, _ = clean_sentence(what)
            out.append(_Sentence("Evidence", text or escape_md(src.title), [i], ev.chunk_ids[:1]))
        return out

    # -- numbering -----------------------------------------------------------------------------------
    @staticmethod
    def _number(sections: Sequence[_Section], sources: dict[str, _Source]) -> list[_Source]:
        """Global numbers in order of first citation; uncited sources with evidence after them."""
        order: list[_Source] = []
        for section in sections:
            for sentence in section.sentences:
                for label in sentence.labels:
                    src = section.items[label - 1][1]
                    if src.n is None:
                        src.n = len(order) + 1
                        order.append(src)
        for src in sources.values():
            if src.n is None:
                src.n = len(order) + 1
                order.append(src)
        return order

    # -- overview ------------------------------------------------------------------------------------
    async def _overview(self, request: WriteRequest, sections: Sequence[_Section],
                        failed: list[str]) -> tuple[str, str]:
        """(topic title, overview paragraph), from one LLM call or deterministically."""
        lines = []
        for s in sections:
            req, cov = s.coverage.requirement, s.coverage
            state = "failed" if cov.status == "failed" else _coverage_word(cov.coverage)
            mech = next((x.text for x in s.sentences if x.kind == "Mechanism" and x.text != NO_MECHANISM), "")
            lines.append(f"- {req.text} ({state})" + (f": {mech}" if mech else ""))
        if self.settings.extractive():  # a model too small to synthesise sections would only pad the overview
            return query_title(request.query.text), self._overview_fallback(request, sections)
        self.llm_calls += 1
        try:
            draft = await self.llm.structured([
                {"role": "system", "content": OVERVIEW_SYSTEM},
                {"role": "user", "content": (f"{block('QUERY', request.query.text)}\n\nRequirements and findings:\n"
                                             f"{block('FINDINGS', chr(10).join(lines))}\n\n"
                                             "Write the overview paragraph and the topic title.")}],
                OverviewDraft)
        except LLM_FAILURES as exc:
            failed.append(f"overview: {type(exc).__name__}: {_excerpt(str(exc), 200)}; written deterministically")
            return query_title(request.query.text), self._overview_fallback(request, sections)
        overview = escape_md(tidy(draft.overview, OVERVIEW_CHARS, drop_unfinished=True))
        if not overview:
            failed.append("overview: the LLM's overview was empty or not plausible prose; written deterministically")
            overview = self._overview_fallback(request, sections)
        title = plain_text(draft.title).strip(" #.")
        if len(draft.title.rstrip()) >= TITLE_CHARS * CUT_SLACK:
            title = trim_cut(title)
        if not on_topic(title, [request.query.text, *(s.coverage.requirement.text for s in sections)]):
            failed.append(f"overview: the LLM's title {_excerpt(title, 60)!r} shares no word with the query or the "
                          "requirements; the title is taken from the query")
            title = query_title(request.query.text)
        return title, overview

    @staticmethod
    def _overview_fallback(request: WriteRequest, sections: Sequence[_Section]) -> str:
        covs = [s.coverage for s in sections]
        answered = sum(1 for c in covs if c.status == "ok" and c.coverage >= 1.0)
        partial = sum(1 for c in covs if c.status == "ok" and 0 < c.coverage < 1.0)
        failed = sum(1 for c in covs if c.status == "failed")
        uncovered = len(covs) - answered - partial - failed
        docs = {ev.doc_id for c in covs for ev in c.evidence}
        def count(n: int, noun: str) -> str:
            return f"{n} {noun}{'' if n == 1 else 's'}"

        text = (f"This report addresses the research query: “{escape_md(_topic(request.query.text, 300))}”. "
                f"Of its {count(len(covs), 'requirement')}, {answered} {'was' if answered == 1 else 'were'} answered "
                f"by the literature found, {partial} only partly (related documents, or answers the retrieval signals "
                f"did not confirm) and "
                f"{uncovered} not at all")
        text += f"; foraging failed for {failed}." if failed else "."
        text += (f" The findings rest on {count(len(docs), 'document')}, gathered over "
                 f"{count(request.iterations, 'iteration')}.")
        return text

    # -- comparison and charts ------------------------------------------------------------------------
    async def _compare(self, sections: Sequence[_Section], refs: Sequence[SourceRef],
                       failed: list[str]) -> Comparison | None:
        """The comparison of the cited sources (settings.write.comparison), its LLM calls counted."""
        cited = {s.items[label - 1][1].doc_id for s in sections for x in s.sentences for label in x.labels}
        papers = [r for r in refs if r.doc_id in cited]
        if not self.settings.write.comparison or not papers:
            return None
        notes: dict[str, list[str]] = {}
        for s in sections:
            for ev, _ in s.items:
                notes.setdefault(ev.doc_id, []).extend(x for x in (ev.summary, ev.motive) if x)
        step = ComparisonStep(self.settings, self.store, self.llm, self.embedder)
        comparison = await step.compare(papers, {d: " ".join(dict.fromkeys(v)) for d, v in notes.items()})
        self.llm_calls += comparison.llm_calls
        failed.extend(f"comparison: {f}" for f in comparison.failed_steps)
        unsupported = [{"n": r.n, "labels": list(r.unsupported_labels), "closest": list(r.text_labels)}
                       for r in comparison.records if r.unsupported_labels]
        self.emit(Stage.WRITE, "comparison", f"compared {len(comparison.records)} cited papers"
                  + (f"; {len(unsupported)} placed by a label their own text does not support" if unsupported else ""),
                  records=len(comparison.records), compliant=comparison.compliant,
                  overlaps=len(comparison.overlaps), llm_calls=comparison.llm_calls,
                  labels_checked=step.label_check is not None, unsupported_labels=unsupported)
        return comparison

    def _figures(self, request: WriteRequest, refs: Sequence[SourceRef], comparison: Comparison | None,
                 failed: list[str]) -> tuple[Figure, ...]:
        """Coverage per iteration, sources by year, the gap heatmap; a chart that fails is noted, not fatal."""
        from actors.steps.write import charts

        history = list(request.coverage_history) or [{c.requirement.id: c.coverage for c in request.coverages}]
        labels = {c.requirement.id: c.requirement.text for c in request.coverages}
        jobs = [("coverage", lambda: charts.coverage_chart(history, labels))]
        if refs:
            jobs.append(("years", lambda: charts.years_chart(refs)))
        if comparison is not None and comparison.matrix is not None and comparison.records:
            matrix = comparison.matrix
            jobs.append(("gaps", lambda: charts.gap_heatmap(matrix)))
        out = []
        for name, job in jobs:
            try:
                out.append(job())
            except Exception as exc:  # noqa: BLE001 (a chart is an extra; the report goes on without it)
                failed.append(f"chart {name}: {type(exc).__name__}: {_excerpt(str(exc), 200)}")
        return tuple(out)

    # -- rendering -----------------------------------------------------------------------------------
    def _render(self, request: WriteRequest, title: str, overview: str, sections: Sequence[_Section],
                numbered: Sequence[_Source], comparison: Comparison | None = None,
                figures: Sequence[Figure] = ()) -> str:
        out = [f"# {escape_md(title)} — Report", "", "## Overview", "", overview, "", "## Scope", ""]
        with_evidence = len(numbered)
        if request.doc_ids is None:
            consulted = f"{len(self.store.list_documents())} in the whole store (every run's and library's papers)"
        else:
            consulted = f"{len(request.doc_ids)} read by this run (its own sources; the rest of the store was not used)"
        added = sum(1 for s in sections if s.coverage.requirement.added_after is not None)
        out += [f"- Research query: {escape_md(_topic(request.query.text, 300))}",
                f"- Requirements: {len(sections)}" + (f" ({added} added by re-planning during the run)" if added
                                                      else ""),
                f"- Iterations: {request.iterations}",
                f"- Documents consulted: {consulted}; {with_evidence} gave evidence",
                f"- Judge: {escape_md(self.settings.judge_summary())}", "",
                "| Requirement | Coverage | Evidence documents |", "| --- | --- | --- |"]
        for s in sections:
            cov = s.coverage
            state = "failed" if cov.status == "failed" else f"{cov.coverage:.1f} ({_coverage_word(cov.coverage)})"
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
            out += [harvard(_ref(src)), ""]
        return "\n".join(out).rstrip() + "\n"

    # -- evidence.jsonl ------------------------------------------------------------------------------
    def _cited_chunks(self, sections: Sequence[_Section], numbered: Sequence[_Source],
                      chunks: dict[str, ChunkRecord | None], failed: list[str]) -> tuple[CitedChunk, ...]:
        """evidence.jsonl: exactly the chunks the report's citations rest on (:func:`_rests_on`), each once, by source
        number; a chunk of a cited paper that no sentence rests on is not listed."""
        cited: dict[str, list[str]] = {}
        for s in sections:
            for x in s.sentences:
                for label in x.labels:
                    ev, src = s.items[label - 1]
                    got = cited.setdefault(src.doc_id, [])
                    got.extend(c for c in _rests_on(x, ev) if c not in got)
        out: list[CitedChunk] = []
        for src in numbered:
            for cid in cited.get(src.doc_id, ()):
                chunk = self._chunk(cid, chunks)
                if chunk is None:
                    failed.append(f"source [{src.n}]: chunk {cid} is no longer in the store")
                    continue
                out.append(CitedChunk(n=src.n, doc_id=src.doc_id, chunk_id=cid,  # type: ignore[arg-type]
                                      section_path=chunk.section_path,
                                      sha256=hashlib.sha256(chunk.text.encode("utf-8")).hexdigest(),
                                      quote=first_sentence(chunk.text)))
        return tuple(out)


def _rests_on(sentence: _Sentence, ev: Evidence) -> tuple[str, ...]:
    """The chunks of evidence item ``ev`` a sentence citing it rests on: the chunk it was quoted from or whose verdict
    it lists, else (a model's sentence) the passages the item was shown with (its first ``EXCERPTS_PER_ITEM``)."""
    own = tuple(c for c in sentence.chunks if c in ev.chunk_ids)
    return own or ev.chunk_ids[:EXCERPTS_PER_ITEM]


# sections whose sentences are about the paper, not its findings: a quote never comes from them
_BACK_MATTER = re.compile(
    r"\b(?:competing\s+interests?|conflicts?\s+of\s+interests?|declarations?|acknowledge?ments?|funding|financial"
    r"\s+support|author(?:s'?)?\s+contributions?|data\s+(?:and\s+code\s+)?availability|code\s+availability|ethics"
    r"|consent|references|bibliography|supplementary|appendix|abbreviations)\b", re.IGNORECASE)
# a sentence that states nothing: a disclosure, a reference entry, pseudo-code, a heading run into a line
_NO_FINDING = re.compile(
    r"\b(?:declare[sd]?\s+(?:that\s+)?(?:they\s+have\s+)?no|no\s+(?:competing|conflicts?)|competing\s+interests?"
    r"|conflicts?\s+of\s+interests?|funded\s+by|grant\s+(?:no|number)|thank(?:s|ed)?\b|correspond(?:ence|ing)\s+"
    r"author|licensed\s+under|creative\s+commons|copyright|all\s+rights\s+reserved|doi\s*:|https?://|arxiv:\d"
    r"|end\s+(?:for|if|while|procedure|function)|\breturn\s+\w+\s*$|:=|←|\bprocedure\b|\balgorithm\s+\d+\b)"
    r"|\(\d{4}[a-z]?\)\.|,\s*\d+\s*\(\d+\)\s*[:,]\s*\d+",
    re.IGNORECASE)
MIN_FINDING_WORDS = 6
MIN_FINDING_LETTERS = 0.6  # a sentence of code or formulas is mostly symbols and digits


def back_matter(section_path: str) -> bool:
    """Whether a chunk sits in a paper's back matter (competing interests, acknowledgements, funding, references,
    appendix …) by its section's own heading: its sentences are about the paper, not its findings."""
    last = section_path.rsplit(">", 1)[-1]
    return bool(_BACK_MATTER.search(last))


def states_something(sentence: str) -> bool:
    """Whether a sentence can be quoted as a finding: at least ``MIN_FINDING_WORDS`` words, mostly letters, and not
    a disclosure, a reference entry, a licence line or pseudo-code (:data:`_NO_FINDING`)."""
    chars = "".join(sentence.split())
    if len(sentence.split()) < MIN_FINDING_WORDS or not chars:
        return False
    if sum(c.isalpha() for c in chars) / len(chars) < MIN_FINDING_LETTERS:
        return False
    return not _NO_FINDING.search(sentence)


def _ref(src: _Source) -> SourceRef:
    return SourceRef(n=src.n, doc_id=src.doc_id, title=src.title, authors=src.authors, year=src.year,  # type: ignore[arg-type]
                     origin=src.origin, venue=src.venue, venue_kind=src.venue_kind, chunk_ids=tuple(src.chunk_ids),
                     **weight_of(src))


def _coverage_word(coverage: float) -> str:
    return "answered" if coverage >= 1.0 else "partly" if coverage > 0 else "not covered"


def on_topic(title: str, texts: Iterable[str]) -> bool:
    """Whether a model-written title is plausible and shares a content word with one of ``texts``."""
    chars = "".join(title.split())
    if not chars or sum(c.isalpha() for c in chars) / len(chars) < MIN_LETTER_SHARE:
        return False
    wanted = set().union(*(content_words(t) for t in texts))
    return bool(content_words(title) & wanted)


def query_title(query: str) -> str:
    """A short title taken from the query: the first ``TITLE_WORDS`` words of its first line, without a
    trailing '?' (or other closing punctuation), "…" when words were left out."""
    words = _topic(query).split()
    title = " ".join(words[:TITLE_WORDS]).rstrip("?!.,;: …")
    return (title + "…" if len(words) > TITLE_WORDS else title) or "Research"


def _topic(query: str, limit: int = 90) -> str:
    """The query's first line, shortened at a word boundary."""
    line = next((ln.strip() for ln in query.splitlines() if ln.strip()), query.strip())
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else line[:limit]) + "…"


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
