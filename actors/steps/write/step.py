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
``failed_steps``. :func:`~actors.steps.write.citations.check_citations` re-checks a finished report.

A small model writes garbage, so every model-written text goes through :func:`tidy` first: repetition
loops are collapsed, text cut off at the schema's length limit is trimmed back to whole words, and
what is left must look like prose (:func:`plausible`). An implausible Mechanism sentence becomes
``NO_MECHANISM``, an implausible Evidence sentence is dropped (``removed_sentences``), an implausible
overview is written deterministically, and a title that shares no content word with the query or
the requirements is replaced by one taken from the query.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from actors.steps.events import Emit, null_emit
from actors.steps.prompts import OVERVIEW_SYSTEM, SECTION_SYSTEM
from actors.steps.schemas import (
    MAX_EVIDENCE_SENTENCES,
    OVERVIEW_CHARS,
    SENTENCE_CHARS,
    TITLE_CHARS,
    OverviewDraft,
    SectionDraft,
)
from actors.steps.text import CUT_SLACK, block, escape_md, plain_text, tidy, trim_cut, without_markup
from actors.steps.write.citations import check_citations, citation_numbers, excerpt
from actors.steps.write.compare import ComparisonStep
from actors.steps.write.quotes import (EXCERPTS_PER_ITEM, RELATED, Chunks, Quoter, Section, Sentence, Source,
                                       cited_chunks, distinct_documents, number_sources)
from actors.steps.write.render import (coverage_word, on_topic, query_title, query_topic, render_report, shown,
                                       source_ref)
from actors.steps.write.weight import left_out_note, prefer_unretracted
from infra.embed.base import Embedder
from infra.errors import LLM_FAILURES
from infra.llm.base import LLM, ChatMessage
from infra.settings import Settings
from infra.store.base import Store
from messages.forage import Evidence, RequirementCoverage
from messages.search import weight_of
from messages.status import Stage
from messages.write import Comparison, Figure, Report, SectionSources, SourceRef, WriteRequest

MAX_ITEMS_SHOWN = 8  # evidence items the LLM sees per section; the rest are listed deterministically
EXCERPT_CHARS = 700

NO_EVIDENCE = "The literature found in this run did not cover this requirement."
# no evidence kept, though the coverage is above 0: the Scope's "partly" (or "answered") is the signals' estimate from
# the passages shown, which this section says rather than "did not cover" beside it
NO_EVIDENCE_ESTIMATE = ("No passage found in this run was kept as evidence for this requirement. Its coverage "
                        "({coverage:.2f}) is the chance, estimated from the passages shown to the judge, that the "
                        "literature answers it; none of them was confirmed as an answer or related enough to quote.")
PARTIAL = ("Only related documents were found for this requirement; none of their passages answered it "
           "directly.")
UNCONFIRMED = ("No answer to this requirement was confirmed: the model called {n} passage(s) answers, but their "
               "similarity to the requirement and the words they share with it fell short of the check, so they count "
               "as related, not as answers. Read the quotes below as candidates.")
# the requirement is answered by its coverage (the probability, from the passages shown, that the literature answers
# it) though no single passage was confirmed: said so, rather than that there is no answer, beside "answered"
LIKELY_UNCONFIRMED = ("The passages found make it likely that the literature answers this requirement (coverage "
                      "{coverage:.2f}), but no single passage was confirmed as the answer{why}. Read the quotes below "
                      "as candidates.")
UNCONFIRMED_WHY = (": the model called {n} passage(s) answers, but their similarity to the requirement and the words "
                   "they share with it fell short of the check")
NO_MECHANISM = ("no synthesis is available for this requirement because the language model failed; the "
                "evidence found is listed below")

# LLM_FAILURES (what a model call may end in after its retries): the Writer falls back and records it, so a server
# that fails while the report is written (HTTP 500 on every retry, a timeout, garbage) costs prose, never the run


@dataclass
class _Draft:
    """One checked section draft."""

    mechanism: Sentence
    evidence: list[Sentence]
    removed_citations: int
    removed_sentences: int
    uncited: int  # plausible evidence sentences dropped for want of a valid citation
    distinct: int  # distinct documents cited

    def score(self) -> tuple[bool, int, int]:
        return bool(self.evidence), self.distinct, -(self.removed_citations + self.removed_sentences)


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
        """The report for ``request``: a section per requirement, the overview, the comparison and figures, the
        chunks its citations rest on; its citations checked once more (a failure is recorded, never raised)."""
        failed: list[str] = []
        removed = {"citations": 0, "sentences": 0}
        calls_before = self.llm_calls
        sources: dict[str, Source] = {}
        chunks = Chunks(self.store)
        quoter = Quoter(chunks)

        sections: list[Section] = []
        for cov in request.coverages:
            section = Section(cov)
            sections.append(section)
            req = cov.requirement
            if cov.status == "failed":
                section.notes.append(f"Foraging this requirement failed ({escape_md(cov.error or 'unknown error')}), "
                                     "so this report has no findings for it.")
                continue
            if not cov.evidence:
                section.notes.append(NO_EVIDENCE_ESTIMATE.format(coverage=shown(cov.coverage)) if cov.coverage > 0
                                     else NO_EVIDENCE)
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
                section.notes.append(self._unconfirmed_note(cov))
            before = dict(removed)
            await self._draft(request, section, chunks, quoter, removed, failed)
            self.emit(Stage.WRITE, "section", f"wrote the section for {req.id}", iteration=request.iterations,
                      requirement_id=req.id, sentences=len(section.sentences),
                      removed_citations=removed["citations"] - before["citations"],
                      removed_sentences=removed["sentences"] - before["sentences"], regenerated=section.regenerated)

        numbered = number_sources(sections, sources)
        title, overview = await self._overview(request, sections, failed)
        refs = tuple(source_ref(s) for s in numbered)
        comparison = await self._compare(sections, refs, failed)
        figures = self._figures(request, refs, comparison, failed) if self.settings.write.charts else ()
        markdown = self._render(request, title, overview, sections, numbered, comparison, figures)
        cited = cited_chunks(sections, numbered, chunks, failed)
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

    def _unconfirmed_note(self, cov: RequirementCoverage) -> str:
        """What a section without a confirmed answer says: that an answer is likely where the coverage reached the
        run's goal (the Scope calls it answered), else that none was confirmed or only related documents were found."""
        if cov.coverage >= self.settings.run.min_coverage:
            why = UNCONFIRMED_WHY.format(n=cov.unconfirmed) if cov.unconfirmed else ""
            return LIKELY_UNCONFIRMED.format(coverage=shown(cov.coverage), why=why)
        return UNCONFIRMED.format(n=cov.unconfirmed) if cov.unconfirmed else PARTIAL

    # -- sources -------------------------------------------------------------------------------------
    def _source(self, ev: Evidence) -> Source:
        doc = self.store.get_document(ev.doc_id)
        if doc is None:
            return Source(ev.doc_id, ev.title)
        return Source(ev.doc_id, doc.title or ev.title, tuple(doc.authors), doc.year, doc.origin, doc.venue,
                       doc.venue_kind, doi=doc.doi, arxiv_id=doc.arxiv_id, **weight_of(doc))

    # -- one requirement section ---------------------------------------------------------------------
    async def _draft(self, request: WriteRequest, section: Section, chunks: Chunks, quoter: Quoter,
                     removed: dict[str, int], failed: list[str]) -> None:
        """The section of one requirement: one LLM call over its evidence items, checked and written once more
        with feedback where it needed repairs; quoted from the evidence with the embedded model or when the call
        fails."""
        req = section.coverage.requirement
        shown = section.items[:MAX_ITEMS_SHOWN]
        k = len(shown)
        parts = []
        for label, (ev, src) in enumerate(shown, start=1):
            excerpts = []
            for cid in ev.chunk_ids[:EXCERPTS_PER_ITEM]:
                chunk = chunks(cid)
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
            quoter.quote(section, " (the embedded model writes no synthesis)")
            return
        self.llm_calls += 1
        try:
            draft = await self.llm.structured(messages, SectionDraft)
        except LLM_FAILURES as exc:
            reason = f"section {req.id}: {type(exc).__name__}: {excerpt(str(exc), 200)}; written from the evidence"
            failed.append(reason)
            self.emit(Stage.WRITE, "step_failed", reason, requirement_id=req.id)
            quoter.quote(section, " (the language model's synthesis failed)")
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
            if result.evidence and result.distinct < min(2, distinct_documents(shown)):
                failed.append(f"section {req.id}: the section rests on one source although its evidence has "
                              f"{distinct_documents(shown)}")
        removed["citations"] += result.removed_citations
        removed["sentences"] += result.removed_sentences
        evidence = result.evidence
        if not evidence:
            failed.append(f"section {req.id}: no Evidence sentence with a valid citation; evidence quoted instead")
            evidence = quoter.extracted(req.text, shown, 0)
        section.sentences = [result.mechanism, *quoter.as_related(section, [*evidence,
                                                                            *quoter.listed(section.items[k:], k)])]
        if any(x.kind == "Related" for x in section.sentences):
            section.notes.append(RELATED)

    def _apply(self, draft: SectionDraft, shown: Sequence[tuple[Evidence, Source]]) -> _Draft:
        """A section draft checked against its evidence items: labels outside 1..k removed, sentences that are
        implausible or left without a citation dropped."""
        k = len(shown)
        removed = {"citations": 0, "sentences": 0}
        mech_text, mech_labels = self._checked(draft.mechanism, draft.mechanism_sources, k, removed)
        mechanism = Sentence("Mechanism", mech_text or NO_MECHANISM, mech_labels if mech_text else [])
        evidence: list[Sentence] = []
        uncited = 0
        for item in draft.evidence:
            text, labels = self._checked(item.sentence, item.sources, k, removed)
            if not text or not labels:
                removed["sentences"] += 1
                uncited += bool(text)
                continue
            evidence.append(Sentence("Evidence", text, labels))
        docs = {shown[label - 1][1].doc_id for x in (mechanism, *evidence) for label in x.labels}
        return _Draft(mechanism, evidence, removed["citations"], removed["sentences"], uncited, len(docs))

    @staticmethod
    def _feedback(result: _Draft, shown: Sequence[tuple[Evidence, Source]]) -> list[str]:
        """What is wrong with a checked draft, as instructions for its one regeneration ([] when nothing)."""
        k = len(shown)
        out = []
        if result.removed_citations:
            out.append(f"{result.removed_citations} of your source numbers were not among the items 1 to {k}; "
                       f"use only numbers 1 to {k}.")
        if result.uncited or not result.evidence:
            out.append("Every evidence sentence needs at least one item number in 'sources'.")
        available = distinct_documents(shown)
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

    # -- overview ------------------------------------------------------------------------------------
    async def _overview(self, request: WriteRequest, sections: Sequence[Section],
                        failed: list[str]) -> tuple[str, str]:
        """(topic title, overview paragraph), from one LLM call or deterministically."""
        lines = []
        for s in sections:
            req, cov = s.coverage.requirement, s.coverage
            state = "failed" if cov.status == "failed" else coverage_word(cov.coverage, self.settings.run.min_coverage)
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
            failed.append(f"overview: {type(exc).__name__}: {excerpt(str(exc), 200)}; written deterministically")
            return query_title(request.query.text), self._overview_fallback(request, sections)
        overview = escape_md(tidy(draft.overview, OVERVIEW_CHARS, drop_unfinished=True))
        if not overview:
            failed.append("overview: the LLM's overview was empty or not plausible prose; written deterministically")
            overview = self._overview_fallback(request, sections)
        title = plain_text(draft.title).strip(" #.")
        if len(draft.title.rstrip()) >= TITLE_CHARS * CUT_SLACK:
            title = trim_cut(title)
        if not on_topic(title, [request.query.text, *(s.coverage.requirement.text for s in sections)]):
            failed.append(f"overview: the LLM's title {excerpt(title, 60)!r} shares no word with the query or the "
                          "requirements; the title is taken from the query")
            title = query_title(request.query.text)
        return title, overview

    def _overview_fallback(self, request: WriteRequest, sections: Sequence[Section]) -> str:
        covs = [s.coverage for s in sections]
        goal = self.settings.run.min_coverage
        answered = sum(1 for c in covs if c.status == "ok" and c.coverage >= goal)
        partial = sum(1 for c in covs if c.status == "ok" and 0 < c.coverage < goal)
        failed = sum(1 for c in covs if c.status == "failed")
        uncovered = len(covs) - answered - partial - failed
        docs = {ev.doc_id for c in covs for ev in c.evidence}
        def count(n: int, noun: str) -> str:
            return f"{n} {noun}{'' if n == 1 else 's'}"

        text = (f"This report addresses the research query: “{escape_md(query_topic(request.query.text, 300))}”. "
                f"Of its {count(len(covs), 'requirement')}, {answered} {'was' if answered == 1 else 'were'} answered "
                f"by the literature found, {partial} only partly (related documents, or answers the retrieval signals "
                f"did not confirm) and "
                f"{uncovered} not at all")
        text += f"; foraging failed for {failed}." if failed else "."
        text += (f" The findings rest on {count(len(docs), 'document')}, gathered over "
                 f"{count(request.iterations, 'iteration')}.")
        return text

    # -- comparison and charts ------------------------------------------------------------------------
    async def _compare(self, sections: Sequence[Section], refs: Sequence[SourceRef],
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
                failed.append(f"chart {name}: {type(exc).__name__}: {excerpt(str(exc), 200)}")
        return tuple(out)

    # -- rendering -----------------------------------------------------------------------------------
    def _render(self, request: WriteRequest, title: str, overview: str, sections: Sequence[Section],
                numbered: Sequence[Source], comparison: Comparison | None = None,
                figures: Sequence[Figure] = ()) -> str:
        if request.doc_ids is None:
            consulted = f"{len(self.store.list_documents())} in the whole store (every run's and library's papers)"
        else:
            consulted = f"{len(request.doc_ids)} read by this run (its own sources; the rest of the store was not used)"
        return render_report(request, title, overview, sections, numbered, consulted=consulted,
                             judge=self.settings.judge_summary(), goal=self.settings.run.min_coverage,
                             comparison=comparison, figures=figures)
