"""A report section's model and the writing that needs no language model: the sources, sentences and sections a
report is built from; a section quoted from its evidence (:class:`Quoter`: one sentence of a cited passage per
paper, a finding rather than the background around it, never back matter); the sources numbered in order of first
citation; and the chunks the citations rest on (evidence.jsonl)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from actors.steps.plan.requirements import content_words, own_question
from actors.steps.schemas import MOTIVE_CHARS, SENTENCE_CHARS
from actors.steps.text import caption, declaration, escape_md, finding_weight, plain_text, prose_sentences, tidy
from actors.steps.write.citations import citation_numbers
from infra.store.base import ChunkRecord, Store
from messages.forage import Evidence, RequirementCoverage
from messages.search import OaStatus, VenueKind
from messages.write import CitedChunk

EXCERPTS_PER_ITEM = 2
QUOTE_CHARS = 200

EXTRACTIVE = ("Quoted from the evidence: each finding below is the sentence of a cited passage closest to this "
              "requirement{why}.")
RELATED = ("“Related” marks what rests only on papers on the topic that no confirmed passage shows answering this "
           "requirement.")
EXTRACTED_PER_ITEM = 1  # sentences quoted per evidence document

_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


@dataclass
class Source:
    """A paper that gave evidence: what its reference shows, the chunks cited from it, its number once cited."""

    doc_id: str
    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    origin: str = ""
    venue: str = ""
    venue_kind: VenueKind = ""
    chunk_ids: list[str] = field(default_factory=list)
    doi: str = ""
    arxiv_id: str = ""
    n: int | None = None
    is_retracted: bool = False  # what a reader weighs it by (messages.search.WEIGHT_FIELDS; write/weight.py)
    cited_by_count: int | None = None
    oa_status: OaStatus = ""
    preprint_only: bool = False


@dataclass
class Sentence:
    """One sentence of a section, with the local labels (1..k: the section's evidence items) it cites."""

    kind: Literal["Mechanism", "Evidence", "Related"]  # Related: quoted from a paper that does not answer
    text: str  # escaped Markdown, no final punctuation
    labels: list[int]  # valid local labels
    # the chunks it rests on: the one a quote was taken from, the one a listed motive judged; () for a model's
    # sentence, which rests on the passages its items were shown with (:func:`rests_on`)
    chunks: tuple[str, ...] = ()


@dataclass
class Section:
    """One requirement's section: its evidence items (label i+1 is items[i]), its sentences and plain notes."""

    coverage: RequirementCoverage
    items: list[tuple[Evidence, Source]] = field(default_factory=list)  # label i+1 -> items[i]
    sentences: list[Sentence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # plain paragraphs (no citation)
    regenerated: bool = False


def distinct_documents(items: Sequence[tuple[Evidence, Source]]) -> int:
    """How many different papers ``items`` come from."""
    return len({src.doc_id for _, src in items})


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


def rests_on(sentence: Sentence, ev: Evidence) -> tuple[str, ...]:
    """The chunks of evidence item ``ev`` a sentence citing it rests on: the chunk it was quoted from or whose verdict
    it lists, else (a model's sentence) the passages the item was shown with (its first ``EXCERPTS_PER_ITEM``)."""
    own = tuple(c for c in sentence.chunks if c in ev.chunk_ids)
    return own or ev.chunk_ids[:EXCERPTS_PER_ITEM]


# besides the declarations (:func:`~actors.steps.text.declaration`), sections whose sentences are not the paper's
# findings as it states them: a quote never comes from them
_BACK_MATTER = re.compile(r"\b(?:references|bibliography|supplementary|appendix)\b", re.IGNORECASE)
# a sentence that states nothing: a disclosure, a reference entry, pseudo-code, a heading run into a line
_NO_FINDING = re.compile(
    r"\b(?:declare[sd]?\s+(?:that\s+)?(?:they\s+have\s+)?no|no\s+(?:competing|conflicts?)|competing\s+interests?"
    r"|conflicts?\s+of\s+interests?|funded\s+by|grant\s+(?:no|number)|thank(?:s|ed)?\b|correspond(?:ence|ing)\s+"
    r"author|licensed\s+under|creative\s+commons|copyright|all\s+rights\s+reserved|doi\s*:|arxiv:\d"
    r"|end\s+(?:for|if|while|procedure|function)|\breturn\s+\w+\s*$|:=|←|\bprocedure\b|\balgorithm\s+\d+\b)"
    r"|\(\d{4}[a-z]?\)\.|,\s*\d+\s*\(\d+\)\s*[:,]\s*\d+|https?://|www\.",  # a URL, a footnote's number glued on too
    re.IGNORECASE)
# a figure's legend, not a finding: a sentence whose subject is a mark of the plot ("The black dotted lines show the
# thresholds …", "Black dots represent 69 records …", "The green and red bars show descriptors …"): 16 such sentences
# in 7 of the 42 shared papers, every one a legend
_LEGEND = re.compile(
    r"^\W*(?:the\s+)?(?:(?:thin|thick|light|dark|solid|dashed|dotted|shaded|open|filled|hollow|grey|gray|black|red"
    r"|blue|green|yellow|orange|purple|white|pink|brown|horizontal|vertical|diagonal)\s+(?:and\s+)?){1,4}"
    r"(?:lines?|curves?|bars?|dots?|circles?|squares?|triangles?|diamonds?|symbols?|markers?|arrows?|boxes)\s+"
    r"(?:shows?|indicates?|represents?|marks?|denotes?|corresponds?|are|is|gives?)\b", re.IGNORECASE)
MIN_FINDING_WORDS = 6
MIN_FINDING_LETTERS = 0.6  # a sentence of code or formulas is mostly symbols and digits
# a sentence of prose has lower-case words; fewer than this share of them and it is a byline ("Katharine M. Mullen
# Ivo H. M. van Stokkum Vrije Universiteit Amsterdam"), a title or a reference entry (docs/evaluation-runs.md)
MIN_LOWER_SHARE = 0.3


def back_matter(section_path: str) -> bool:
    """Whether a chunk sits in a paper's back matter (competing interests, acknowledgements, funding, references,
    appendix …) by its section's own heading: its sentences are about the paper, not its findings."""
    return declaration(section_path) or bool(_BACK_MATTER.search(section_path.rsplit(">", 1)[-1]))


def states_something(sentence: str) -> bool:
    """Whether a sentence can be quoted as a finding: at least ``MIN_FINDING_WORDS`` words, mostly letters, prose
    (``MIN_LOWER_SHARE`` of its words lower-case), not a question (a paper's title or a rhetorical question asks, it
    does not state: "… Which lessons for public action?"), without characters the PDF's text layer could not map
    ("�MCP�": not what the paper prints), and not a disclosure, a reference entry, a licence line or pseudo-code
    (:data:`_NO_FINDING`) nor a figure's legend or caption (:data:`_LEGEND`, :func:`~actors.steps.text.caption`)."""
    chars = "".join(sentence.split())
    if len(sentence.split()) < MIN_FINDING_WORDS or not chars or sentence.rstrip(" _*”\"'").endswith("?") \
            or "\ufffd" in sentence:
        return False
    if sum(c.isalpha() for c in chars) / len(chars) < MIN_FINDING_LETTERS:
        return False
    words = [w for w in sentence.split() if w[:1].isalpha()]
    if words and sum(w[0].islower() for w in words) < MIN_LOWER_SHARE * len(words):
        return False  # a byline, a title or a reference entry: names and capitalised words, no prose
    return not _NO_FINDING.search(sentence) and not _LEGEND.match(sentence) and not caption(sentence)




class Chunks:
    """The store's chunks a report reads, each fetched once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, ChunkRecord | None] = {}

    def __call__(self, chunk_id: str) -> ChunkRecord | None:
        if chunk_id not in self._cache:
            self._cache[chunk_id] = self.store.get_chunk(chunk_id)
        return self._cache[chunk_id]


class Quoter:
    """Sections written from their evidence alone: the sentences of the cited passages quoted (what the embedded
    model gets instead of a synthesis, and what a section falls back to when the model fails)."""

    def __init__(self, chunks: Chunks) -> None:
        self.chunks = chunks

    def quote(self, section: Section, why: str) -> None:
        """The section written from its evidence alone (:meth:`extracted`), saying so and ``why``, and what a Related
        quote is when it has one. A requirement its papers answer is quoted from them alone: a quote cannot say how a
        paper only on the topic bears on what was asked, and beside the findings it reads as one of them."""
        if any(ev.tag == "answers" for ev, _ in section.items):
            section.items = [(ev, src) for ev, src in section.items if ev.tag == "answers"]
        section.notes.append(EXTRACTIVE.format(why=why))
        section.sentences = self.as_related(section, self.extracted(section.coverage.requirement.text,
                                                                    section.items, 0))
        if any(x.kind == "Related" for x in section.sentences):
            section.notes[-1] += " " + RELATED

    @staticmethod
    def as_related(section: Section, sentences: list[Sentence]) -> list[Sentence]:
        """An Evidence sentence citing only papers that do not answer the requirement is Related (a paper on the
        topic is not a finding for it), whether a model wrote it or it is quoted."""
        answers = {i for i, (ev, _) in enumerate(section.items, start=1) if ev.tag == "answers"}
        return [Sentence("Related", x.text, x.labels, x.chunks)
                if x.kind == "Evidence" and x.labels and not answers & set(x.labels) else x for x in sentences]

    def extracted(self, requirement: str, items: Sequence[tuple[Evidence, Source]], offset: int) -> list[Sentence]:
        """Evidence sentences quoted from the passages (labels offset+1, ...): per item, the sentence of its
        first passages that shares the most of the requirement's focus (its words the paper's title does not
        state) and reads most as a finding (:func:`~actors.steps.text.finding_weight`: a measured value or a
        result beats the aim or background around it), then the most of its words, then the earliest; in item
        order, a sentence already quoted skipped; an item without a usable sentence is listed as found. The focus
        of a requirement anchored to the query's subject comes from its own question (:func:`own_question`). An
        answering item is quoted from its first passage (the confirmed answer that earned the coverage) while that
        passage has a usable sentence. Which of them are Related is the caller's (:meth:`as_related`)."""
        wanted = content_words(requirement)
        asked = content_words(own_question(requirement)) or wanted
        quoted: set[str] = set()
        out: list[Sentence] = []
        for i, (ev, src) in enumerate(items, start=offset + 1):
            # what the requirement asks about this paper: its words the paper's title does not already state (a
            # sentence restating the topic is background; all of them when the title holds every one)
            focus = (asked - content_words(ev.title)) or asked
            found: list[tuple[int, int, int, int, str, str]] = []
            for rank, cid in enumerate(ev.chunk_ids[:EXCERPTS_PER_ITEM]):
                chunk = self.chunks(cid)
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
                out += self.listed([(ev, src)], i - 1)
                continue
            for text, cid in best:
                quoted.add(text)
                clipped = text if len(text) <= SENTENCE_CHARS else text[:SENTENCE_CHARS].rsplit(" ", 1)[0] + " …"
                out.append(Sentence("Evidence", f"“{escape_md(clipped.rstrip('.;:, '))}”", [i], (cid,)))
        return out

    @staticmethod
    def listed(items: Sequence[tuple[Evidence, Source]], offset: int) -> list[Sentence]:
        """Deterministic Evidence sentences, one per evidence item (labels offset+1, offset+2, ...)."""
        out = []
        for i, (ev, src) in enumerate(items, start=offset + 1):
            # the motive is model text too (from the Forager): it gets the same plausibility checks
            what = tidy(ev.motive, MOTIVE_CHARS) or (
                f"{src.title} has passages that answer this requirement" if ev.tag == "answers"
                else f"{src.title} has passages related to this requirement")
            text, _ = clean_sentence(what)
            out.append(Sentence("Evidence", text or escape_md(src.title), [i], ev.chunk_ids[:1]))
        return out


def number_sources(sections: Sequence[Section], sources: dict[str, Source]) -> list[Source]:
    """Global numbers in order of first citation; uncited sources with evidence after them."""
    order: list[Source] = []
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


def cited_chunks(sections: Sequence[Section], numbered: Sequence[Source], chunks: Chunks,
                 failed: list[str]) -> tuple[CitedChunk, ...]:
    """evidence.jsonl: exactly the chunks the report's citations rest on (:func:`rests_on`), each once, by source
    number; a chunk of a cited paper that no sentence rests on is not listed."""
    cited: dict[str, list[str]] = {}
    for s in sections:
        for x in s.sentences:
            for label in x.labels:
                ev, src = s.items[label - 1]
                got = cited.setdefault(src.doc_id, [])
                got.extend(c for c in rests_on(x, ev) if c not in got)
    out: list[CitedChunk] = []
    for src in numbered:
        for cid in cited.get(src.doc_id, ()):
            chunk = chunks(cid)
            if chunk is None:
                failed.append(f"source [{src.n}]: chunk {cid} is no longer in the store")
                continue
            out.append(CitedChunk(n=src.n, doc_id=src.doc_id, chunk_id=cid,  # type: ignore[arg-type]
                                  section_path=chunk.section_path,
                                  sha256=hashlib.sha256(chunk.text.encode("utf-8")).hexdigest(),
                                  quote=first_sentence(chunk.text)))
    return tuple(out)
