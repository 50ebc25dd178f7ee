"""Comparison artifacts for the cited papers (Novelty-Aware seed).

1. A contribution record per cited paper (problem, method, key contribution, claimed novelty), one
   schema-constrained LLM call each; the same call maps the paper to one problem label and one method
   label from the configured taxonomy (``settings.write.problem_labels`` / ``method_labels``; the schema
   allows only those). Compliance = all four text fields non-empty after tidying; counted.
2. An overlap pass over the whole set: which papers share a problem, dataset or method family.
3. A differentiation pass over the whole set: what each paper does that the others do not.
4. The problem × method gap matrix, computed (:func:`gap_matrix`), never generated.
5. With an embedder, each record's labels are checked against its paper's own title and abstract
   (:class:`LabelCheck`): a label that is not among the labels of its taxonomy closest to that text is
   recorded as unsupported, and the matrix marks the papers it placed.

Model text goes through the Writer's :func:`~actors.steps.text.tidy`; paper numbers the model
invents are dropped. A failed call degrades to an empty record or pass, noted in ``failed_steps``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import Field, create_model

from actors.steps.plan.requirements import content_words, normalize
from actors.steps.prompts import DIFFERENCE_SYSTEM, OVERLAP_SYSTEM, RECORD_SYSTEM
from actors.steps.schemas import RECORD_CHARS, ContributionDraft, DifferenceDraft, OverlapDraft
from actors.steps.text import block, plain_text, tidy
from infra.embed.base import Embedder, cosine
from infra.errors import LLM_FAILURES
from infra.llm.base import LLM
from infra.settings import Settings
from infra.store.base import Store
from messages.write import Comparison, ContributionRecord, Differentiation, GapMatrix, Overlap, SourceRef

ABSTRACT_CHARS = 1500


REPEAT_SHARE = 0.5  # a text of 6+ words with fewer distinct words than this share is a loop ("Method, Experiment, …")
GROUNDED_SHARE = 0.5  # of a record field's content words, the share its own paper's text must hold


def grounded(text: str, paper_words: set[str]) -> bool:
    """Whether a record field is about its own paper: at least ``GROUNDED_SHARE`` of its content words occur in
    the paper's stored text (a weak model also writes one paper's method into another's record)."""
    mine = content_words(text)
    return not mine or len(mine & paper_words) >= GROUNDED_SHARE * len(mine)


def record_text(raw: str, echoes: Sequence[str], paper_words: set[str] | None = None) -> str:
    """A record field as presentable text, or '' when it is not: implausible or looping (see the Writer's
    :func:`~actors.steps.text.tidy`), a word list repeating itself, an echo of the paper's title or a
    taxonomy label (a weak model copies its input), or not about its own paper (``paper_words``: the content
    words of the paper's stored text; see :func:`grounded`)."""
    text = tidy(raw, RECORD_CHARS)
    words = [w.casefold().strip(".,;:!?") for w in text.split()]
    if len(words) >= 6 and len(set(words)) < REPEAT_SHARE * len(words):
        return ""
    mine = content_words(text)
    if any(mine <= content_words(e) for e in echoes if e):
        return ""
    if paper_words is not None and not grounded(text, paper_words):
        return ""
    return text


def catch_all(label: str) -> bool:
    """A taxonomy's catch-all label ("other problem", "other method"): it names nothing a text could support."""
    words = label.split()
    return bool(words) and words[0].casefold() == "other"


class LabelCheck:
    """Whether a paper's own text supports the taxonomy labels a model gave it: its title and abstract are embedded
    and each taxonomy's labels ranked by similarity to them; a label is supported when it is among the ``top``
    closest of its taxonomy. Catch-all labels (:func:`catch_all`) are neither ranked nor checked. The label
    phrases are embedded once. Measured on 16 hand-labelled papers in ``bench/label_check.py``."""

    def __init__(self, embedder: Embedder, problems: Sequence[str], methods: Sequence[str], top: int) -> None:
        self.embedder = embedder
        self.taxonomies = ([p for p in problems if not catch_all(p)], [m for m in methods if not catch_all(m)])
        self.top = top
        self._vectors: dict[str, Sequence[float]] | None = None

    def ranked(self, text: str) -> tuple[list[str], list[str]]:
        """The problem labels and the method labels (catch-alls left out), closest to ``text`` first."""
        if self._vectors is None:
            labels = list(dict.fromkeys([*self.taxonomies[0], *self.taxonomies[1]]))
            self._vectors = dict(zip(labels, self.embedder.embed(labels) if labels else [], strict=True))
        vector = self.embedder.embed([text])[0]
        score = {label: cosine(vector, v) for label, v in self._vectors.items()}
        problems, methods = (sorted(t, key=lambda label: -score[label]) for t in self.taxonomies)
        return problems, methods

    def unsupported(self, text: str, problem_label: str | None,
                    method_label: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(the given labels ``text`` does not support, the closest problem and method label to ``text``)."""
        problems, methods = self.ranked(text)
        out = tuple(label for label, ranked in ((problem_label, problems), (method_label, methods))
                    if label is not None and label in ranked and label not in ranked[: self.top])
        return out, tuple(ranked[0] for ranked in (problems, methods) if ranked)


def contribution_schema(problems: Sequence[str], methods: Sequence[str]) -> type[ContributionDraft]:
    """ContributionDraft whose label fields only allow the taxonomy's labels (an enum in the JSON schema)."""
    fields: dict[str, Any] = {
        "problem_label": (Literal[tuple(problems)], Field(description="The closest problem label.")),
        "method_label": (Literal[tuple(methods)], Field(description="The closest method label.")),
    }
    schema: type[ContributionDraft] = create_model("ContributionDraft", __base__=ContributionDraft, **fields)
    return schema


def gap_matrix(records: Iterable[ContributionRecord], problems: Sequence[str], methods: Sequence[str]) -> GapMatrix:
    """The problem × method matrix of ``records``' labels: each cell the ascending source numbers of the
    papers with that pair. Independent of the records' order; a record without a known pair of labels is
    listed in ``unlabelled``."""
    row = {p: i for i, p in enumerate(problems)}
    col = {m: j for j, m in enumerate(methods)}
    cells: list[list[set[int]]] = [[set() for _ in methods] for _ in problems]
    unlabelled: set[int] = set()
    unsupported: set[int] = set()
    for r in records:
        if r.problem_label in row and r.method_label in col:
            cells[row[r.problem_label]][col[r.method_label]].add(r.n)  # type: ignore[index]
            if r.unsupported_labels:
                unsupported.add(r.n)
        else:
            unlabelled.add(r.n)
    return GapMatrix(problems=tuple(problems), methods=tuple(methods),
                     cells=tuple(tuple(tuple(sorted(c)) for c in line) for line in cells),
                     unlabelled=tuple(sorted(unlabelled)), unsupported=tuple(sorted(unsupported)))


class ComparisonStep:
    """Builds the :class:`Comparison` of a report's cited sources."""

    def __init__(self, settings: Settings, store: Store, llm: LLM, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.store = store
        self.llm = llm
        self.llm_calls = 0
        w = settings.write
        # the labels' check against each paper's own text (None: no embedder, or write.label_check_top 0)
        self.label_check = (LabelCheck(embedder, w.problem_labels, w.method_labels, w.label_check_top)
                            if embedder is not None and w.label_check_top > 0 else None)

    async def compare(self, sources: Sequence[SourceRef], notes: dict[str, str] | None = None) -> Comparison:
        """``sources``: the cited papers (at most ``write.max_compared`` are used); ``notes``: what the
        Foragers said about each document (doc_id → text), shown to the model as evidence."""
        w = self.settings.write
        chosen = list(sources)[: w.max_compared]
        failed: list[str] = []
        calls_before = self.llm_calls
        schema = contribution_schema(w.problem_labels, w.method_labels)
        records = []
        for src in chosen:
            doc = self.store.get_document(src.doc_id)
            abstract = (doc.abstract or doc.markdown) if doc else ""
            abstract = " ".join(abstract.split())[:ABSTRACT_CHARS]
            self.llm_calls += 1
            try:
                draft = await self.llm.structured([
                    {"role": "system", "content": RECORD_SYSTEM},
                    {"role": "user", "content": (
                        f"Paper [{src.n}]: {src.title} ({src.year or 'n.d.'})\n"
                        f"{block('ABSTRACT', abstract or '(none)')}\n"
                        f"{block('EVIDENCE', (notes or {}).get(src.doc_id, '') or '(none)')}\n\n"
                        f"Problem labels: {'; '.join(w.problem_labels)}\nMethod labels: {'; '.join(w.method_labels)}")}],
                    schema)
            except LLM_FAILURES as exc:
                failed.append(f"record [{src.n}]: {type(exc).__name__}; left empty")
                records.append(ContributionRecord(n=src.n, doc_id=src.doc_id, title=src.title))
                continue
            echoes = [src.title, *w.problem_labels, *w.method_labels]
            own = content_words(f"{src.title} {doc.abstract} {doc.markdown}") if doc else None
            fields: dict[str, str] = {}
            copies: list[str] = []
            kept: set[str] = set()  # normalized texts of the fields kept so far
            for name in ("problem", "method", "contribution", "novelty"):
                text = record_text(getattr(draft, name), echoes, own)
                # a weak model writes one phrase into every field ("trace-based JavaScript compiler" four times)
                key = normalize(text)
                if text and key in kept:
                    copies.append(name)
                    text = ""
                elif text:
                    kept.add(key)
                fields[name] = text
            if copies:
                failed.append(f"record [{src.n}]: {', '.join(copies)} repeated an earlier field; left empty")
            elsewhere = [name for name in fields if not fields[name] and name not in copies
                         and record_text(getattr(draft, name), echoes)]
            if elsewhere:
                failed.append(f"record [{src.n}]: {', '.join(elsewhere)} not found in the paper's own text; "
                              "left empty")
            unsupported: tuple[str, ...] = ()
            closest: tuple[str, ...] = ()
            if self.label_check is not None:
                try:
                    unsupported, closest = await asyncio.to_thread(
                        self.label_check.unsupported, f"{src.title}\n{abstract}", draft.problem_label,
                        draft.method_label)
                except Exception as exc:  # noqa: BLE001 - an embedder failure leaves the labels unchecked, noted
                    failed.append(f"record [{src.n}]: labels not checked against the paper's text "
                                  f"({type(exc).__name__}: {exc})")
            records.append(ContributionRecord(
                n=src.n, doc_id=src.doc_id, title=src.title, **fields,
                problem_label=draft.problem_label, method_label=draft.method_label,
                unsupported_labels=unsupported, text_labels=closest))
        known = {r.n for r in records}
        overlaps: list[Overlap] = []
        differences: list[Differentiation] = []
        if len(records) >= 2:
            listing = "\n\n".join(
                f"[{r.n}] {r.title}\nProblem: {r.problem or '?'}\nMethod: {r.method or '?'}\n"
                f"Contribution: {r.contribution or '?'}\nClaimed novelty: {r.novelty or '?'}" for r in records)
            user = f"Papers (numbers {', '.join(str(n) for n in sorted(known))}):\n{block('PAPERS', listing)}"
            self.llm_calls += 1
            try:
                odraft = await self.llm.structured([{"role": "system", "content": OVERLAP_SYSTEM},
                                                    {"role": "user", "content": user}], OverlapDraft)
            except LLM_FAILURES as exc:
                failed.append(f"overlap pass: {type(exc).__name__}; no overlaps listed")
            else:
                seen: set[tuple[tuple[int, ...], str]] = set()
                for item in odraft.overlaps:
                    papers = tuple(sorted({n for n in item.papers if n in known}))
                    shared = " ".join(plain_text(item.shared).split())
                    # "problem" shared by the problem overlap says nothing
                    informative = bool(content_words(shared) - content_words("problem dataset method family"))
                    if len(papers) >= 2 and informative and (papers, item.element) not in seen:
                        seen.add((papers, item.element))
                        overlaps.append(Overlap(papers=papers, element=item.element, shared=shared))
            self.llm_calls += 1
            try:
                ddraft = await self.llm.structured([{"role": "system", "content": DIFFERENCE_SYSTEM},
                                                    {"role": "user", "content": user}], DifferenceDraft)
            except LLM_FAILURES as exc:
                failed.append(f"differentiation pass: {type(exc).__name__}; no differences listed")
            else:
                said: dict[int, str] = {}
                for d in ddraft.differences:
                    text = record_text(d.distinct, [r.title for r in records if r.n == d.paper])
                    if d.paper in known and d.paper not in said and text:
                        said[d.paper] = text
                differences = [Differentiation(n=n, distinct=t) for n, t in sorted(said.items())]
        return Comparison(records=tuple(records), overlaps=tuple(overlaps), differences=tuple(differences),
                          matrix=gap_matrix(records, w.problem_labels, w.method_labels),
                          compliant=sum(r.compliant for r in records),
                          label_check_top=self.label_check.top if self.label_check is not None else 0,
                          llm_calls=self.llm_calls - calls_before,
                          failed_steps=tuple(failed))
