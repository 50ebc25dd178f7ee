"""Search strings: from the query and its requirements to the few strings that may leave the machine.

The researcher's query is protected. What is sent to OpenAlex and arXiv is only what the researcher
approves: a handful of keyword strings (2-5 specific concepts each, no filler, no time words) plus
filters (years, open access, authors, venue, has a PDF), proposed here and shown before anything is
sent.

:func:`propose_search_queries` asks the LLM for keywords and constraints in one structured call and
cleans what comes back; constraints stated in the query ("last 5 years", "since 2020", "open
access", "papers by Jane Doe", "published in Nature", "with full text") are also read
deterministically, because they must not depend on a small model's mood. An author or venue the
model names is kept only when its words are in the query (a model's guess never narrows the search
on its own). A query naming a specific title (in quotes) or author ("by Jane Doe") gets a direct
lookup first. When the LLM fails, keywords come from the requirements' own words, and the plan says
so.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from actors.steps.prompts import SEARCH_TERMS_SYSTEM
from infra.errors import LLMOutputError, LLMTimeout
from infra.llm.base import LLM, ChatMessage
from messages.plan import Requirement, SearchQuery

MIN_CONCEPTS, MAX_CONCEPTS = 2, 5

# filler and time words never sent as keywords
STOPWORDS = frozenset("""
a about above across after again against all almost also am among an and any are around as at be because been
before being between both but by can could did do does doing done during each either else etc even ever every
few for from further had has have having how however i if in into is it its itself just least less like made
make many may me might more most much must my near no nor not now of off often on once one only or other our out
over own per perhaps rather same several shall she should since so some such than that the their them then there
these they this those though through thus to too toward towards under until up upon us use used using very via
was we were what when where whether which while who whom whose why will with within without would yet you your
paper papers study studies research literature review reviews article articles work works publication
publications find finding search looking look known approach approaches method methods
effect effects role impact impacts relationship relationships associated association associations regarding
related relate relates various different new novel recent recently current currently latest modern today
year years decade decades month months last past since ago era period time times early late state art
""".split())
TIME_WORDS = re.compile(
    r"\b(?:(?:in|over|during|within)\s+the\s+)?(?:last|past|previous|recent)\s+(?:\d+|few|several|two|three|"
    r"four|five|six|seven|eight|nine|ten)?\s*(?:years?|decades?|months?)\b|\b(?:since|after|before|from|until|"
    r"between)\s+(?:19|20)\d\d\b|\b(?:19|20)\d\d\b",
    re.IGNORECASE)
_NUMBER_WORDS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10,
                 "few": 3, "several": 5}
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9\-+/]*[A-Za-z0-9+]|[A-Za-z]")

KeywordText = Annotated[str, StringConstraints(max_length=60)]
NameText = Annotated[str, StringConstraints(max_length=100)]
MAX_AUTHORS = 5


class KeywordSearch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    keywords: list[KeywordText] = Field(
        max_length=MAX_CONCEPTS,
        description="2-5 specific technical concepts (nouns or noun phrases); no filler, no time words.")
    requirement: str = Field(default="", max_length=8, description="Id of the requirement it serves, e.g. R2.")


class SearchTermsAnswer(BaseModel):
    """Keyword searches for a literature database, and the constraints the query states."""

    model_config = ConfigDict(extra="ignore")

    searches: list[KeywordSearch] = Field(max_length=8)
    year_from: int | None = Field(default=None, description="Earliest publication year the query asks for.")
    year_to: int | None = Field(default=None, description="Latest publication year the query asks for.")
    open_access: bool = Field(default=False, description="True only if the query asks for open-access papers.")
    authors: list[NameText] = Field(
        default_factory=list, max_length=MAX_AUTHORS,
        description="People whose papers the query asks for (full names as written in the query); else empty.")
    venue: str | None = Field(
        default=None, max_length=200,
        description="Journal or conference the papers must be published in, as written in the query; else null.")


@dataclass(frozen=True)
class Constraints:
    year_from: int | None = None
    year_to: int | None = None
    open_access: bool = False
    title: str | None = None
    author: str | None = None
    venue: str | None = None
    has_pdf: bool = False


_NAME = r"(?:[A-Z][\w&.'\-]*)(?:\s+(?:of|on|and|for|in|the|&|[A-Z][\w&.'\-]*))*"
_VENUE = (re.compile(r"\b(?:published|appearing|appeared|presented)\s+(?:in|at)\s+(?:[Tt]he\s+)?(" + _NAME + ")"),
          re.compile(r"\b(?:in|from)\s+the\s+(?:journal|conference)\s+(" + _NAME + ")"),
          re.compile(r"\b(?:journal|venue)\s*:\s*(" + _NAME + ")"))
_HAS_PDF = re.compile(
    r"\b(?:with|having|has|have|only|need|needs|want)\s+(?:a\s+|an\s+|the\s+|their\s+)?(?:full[- ]?texts?|pdfs?)\b"
    r"|\b(?:full[- ]?texts?|pdfs?)\s+(?:available|only|accessible|access)\b", re.IGNORECASE)


# "published in English": a language is not a venue
_NOT_VENUES = frozenset({"english", "chinese", "spanish", "german", "french", "portuguese", "japanese", "russian",
                         "korean", "italian", "arabic", "dutch", "english-language"})


def _venue_in(query: str) -> str | None:
    for pattern in _VENUE:
        if m := pattern.search(query):
            name = re.sub(r"(?:\s+(?:of|on|and|for|in|the|&))+$", "", m.group(1)).strip()
            if len(name) >= 2 and name.casefold() not in _NOT_VENUES:
                return name
    return None


def read_constraints(query: str, today: _dt.date | None = None) -> Constraints:
    """Constraints the query states in words: years, open access, a quoted title, an author, a venue,
    full text (a PDF)."""
    year_now = (today or _dt.date.today()).year
    q = " ".join(query.split())
    year_from = year_to = None
    if m := re.search(r"\b(?:last|past|previous)\s+(?:(\d+|\w+)\s+)?(years?|decades?)\b", q, re.IGNORECASE):
        count = m.group(1) or "1"
        n = int(count) if count.isdigit() else _NUMBER_WORDS.get(count.lower())
        if n:
            span = n * (10 if m.group(2).lower().startswith("decade") else 1)
            year_from = year_now - span
    if m := re.search(r"\b(?:between|from)\s+((?:19|20)\d\d)\s+(?:and|to|-|–)\s+((?:19|20)\d\d)\b", q, re.IGNORECASE):
        year_from, year_to = sorted((int(m.group(1)), int(m.group(2))))
    else:
        if m := re.search(r"\b(?:since|after|from)\s+((?:19|20)\d\d)\b", q, re.IGNORECASE):
            year_from = int(m.group(1)) + (1 if m.group(0).lower().startswith("after") else 0)
        if m := re.search(r"\b(?:before|until|up to)\s+((?:19|20)\d\d)\b", q, re.IGNORECASE):
            year_to = int(m.group(1)) - (1 if m.group(0).lower().startswith("before") else 0)
    open_access = bool(re.search(r"\bopen[- ]access\b", q, re.IGNORECASE))
    title = None
    if m := re.search(r"[\"“]([^\"”]{12,250})[\"”]", q):
        if len(m.group(1).split()) >= 3:
            title = m.group(1).strip()
    author = None
    if m := re.search(r"\b(?:papers?|work|articles?|publications?|studies)\s+(?:by|of|from)\s+"
                      r"((?:[A-Z][a-z'\-]+\.?\s+){1,3}[A-Z][a-z'\-]+)", q):
        author = m.group(1).strip()
    return Constraints(year_from=year_from, year_to=year_to, open_access=open_access, title=title, author=author,
                       venue=_venue_in(q), has_pdf=bool(_HAS_PDF.search(q)))


def _name_words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def _grounded(value: str | None, query: str) -> str | None:
    """``value`` (a name the model gave) cleaned, or None unless every word of it is in the query."""
    value = " ".join((value or "").replace("|", " ").split())
    words, query_words = _name_words(value), set(_name_words(query))
    return value if len(value) >= 2 and words and all(w in query_words for w in words) else None


def concepts(text: str) -> list[str]:
    """Content words of ``text`` in order, without filler, time words or duplicates."""
    text = TIME_WORDS.sub(" ", text)
    seen: set[str] = set()
    out: list[str] = []
    for word in _WORD.findall(text):
        low = word.lower()
        if low in STOPWORDS or len(low) < 3 and not word.isupper() or low in seen:
            continue
        seen.add(low)
        out.append(word if word.isupper() else low)
    return out


def clean_keywords(keywords: Sequence[str]) -> list[str]:
    """Keywords as the LLM gave them → 2-5 concepts: time words and filler dropped, duplicates merged."""
    out: list[str] = []
    seen: set[str] = set()
    for phrase in keywords:
        words = concepts(phrase)
        if not words:
            continue
        kept = " ".join(words[:3])
        if kept.lower() in seen:
            continue
        seen.add(kept.lower())
        out.append(kept)
    return out[:MAX_CONCEPTS]


def _closest(text: str, requirements: Sequence[Requirement]) -> str:
    """The requirement sharing the most concepts with a search the model did not label."""
    words = {w.lower() for w in concepts(text)}
    return max(requirements, key=lambda r: len(words & {w.lower() for w in concepts(r.text)})).id


def _fallback_terms(requirement: Requirement) -> str:
    return " ".join(concepts(requirement.text)[:4])


def _messages(query: str, requirements: Sequence[Requirement], n: int) -> list[ChatMessage]:
    listed = "\n".join(f"{r.id}: {r.text}" for r in requirements)
    return [{"role": "system", "content": SEARCH_TERMS_SYSTEM.format(n=n)},
            {"role": "user", "content": f"Query: {query}\n\nRequirements:\n{listed}"}]


async def propose_search_queries(query: str, requirements: Sequence[Requirement], llm: LLM, *,
                                 max_strings: int = 6,
                                 today: _dt.date | None = None) -> tuple[tuple[SearchQuery, ...], tuple[str, ...]]:
    """Search strings to show the researcher for approval, and what degraded (empty when nothing did).

    Never raises for a bad model: keywords then come from the requirements' own words.
    """
    stated = read_constraints(query, today)
    degraded: list[str] = []
    found: list[tuple[str, tuple[str, ...]]] = []  # (keywords, requirement ids)
    answer: SearchTermsAnswer | None = None
    try:
        answer = await llm.structured(_messages(query, requirements, max_strings), SearchTermsAnswer)
    except (LLMOutputError, LLMTimeout) as exc:
        degraded.append(f"search terms: the model failed ({type(exc).__name__}); keywords taken from the "
                        "requirements")
    ids = {r.id for r in requirements}
    if answer is not None:
        for search in answer.searches:
            words = clean_keywords(search.keywords)
            text = " ".join(words)
            if len(concepts(text)) < MIN_CONCEPTS:
                continue
            rid = search.requirement.strip().upper()
            found.append((text, (rid if rid in ids else _closest(text, requirements),)))
    covered = {rid for _, rids in found for rid in rids}
    for r in requirements:  # every requirement gets a search, from its own words if the model gave none
        if r.id not in covered:
            text = _fallback_terms(r)
            if len(concepts(text)) >= MIN_CONCEPTS:
                found.append((text, (r.id,)))
    if answer is not None and not found:
        degraded.append("search terms: the model gave no usable keywords")

    year_from = stated.year_from if stated.year_from is not None else _plausible_year(answer and answer.year_from)
    year_to = stated.year_to if stated.year_to is not None else _plausible_year(answer and answer.year_to)
    if year_from and year_to and year_from > year_to:
        year_from, year_to = year_to, year_from
    open_access = stated.open_access  # the model's guess alone never narrows the search
    # authors and venue: the query's own words, or the model's reading of them when they are in the query
    authors: list[str] = [stated.author] if stated.author else []
    for name in (answer.authors if answer is not None else [])[:MAX_AUTHORS]:
        kept = _grounded(name, query)
        if kept and not any(set(_name_words(kept)) <= set(_name_words(a)) for a in authors):  # new, not a part
            authors.append(kept[:100])
    venue = stated.venue or _grounded(answer.venue if answer is not None else None, query)
    filters: dict[str, Any] = dict(year_from=year_from, year_to=year_to, open_access=open_access,
                                   venue=venue[:200] if venue else None, has_pdf=stated.has_pdf)

    out: list[SearchQuery] = []
    if stated.title:
        out.append(SearchQuery(text=stated.title[:300], kind="title"))
    if stated.author:
        out.append(SearchQuery(text=stated.author, kind="author", **filters))
    seen: set[str] = set()
    for text, rids in found:
        key = text.lower()
        if key in seen:
            merged = [q for q in out if q.text.lower() == key][0]
            out[out.index(merged)] = merged.model_copy(
                update={"requirement_ids": tuple(dict.fromkeys(merged.requirement_ids + rids))})
            continue
        seen.add(key)
        out.append(SearchQuery(text=text, authors=tuple(authors[:MAX_AUTHORS]), requirement_ids=rids, **filters))
    return tuple(out[:max_strings]), tuple(degraded)


def _plausible_year(value: int | None) -> int | None:
    if value is None or not isinstance(value, int):
        return None
    return value if 1900 <= value <= _dt.date.today().year + 1 else None


def parse_search_lines(text: str) -> tuple[SearchQuery, ...]:
    """Search strings as the researcher edited them: one per line, optional filters after ' | '.

    ``soil moisture sensing | 2019-2024 | oa | pdf | author: Jane Doe | venue: Water Research`` — years as
    ``FROM-TO``, ``FROM-`` or ``-TO``; ``oa`` for open access; ``pdf`` for works with a PDF; ``author: NAME``
    (repeatable: any of them) and ``venue: NAME``; ``title:`` / ``author:`` prefixes of the string itself for
    direct lookups. Lines starting with '#' are comments.
    """
    out: list[SearchQuery] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        head, filters = parts[0], parts[1:]
        kind = "keywords"
        for prefix in ("title:", "author:"):
            if head.lower().startswith(prefix):
                kind, head = prefix[:-1], head[len(prefix):].strip()
        year_from = year_to = None
        open_access = has_pdf = False
        authors: list[str] = []
        venue = None
        for f in filters:
            name, _, value = f.partition(":")
            if f.lower() in ("oa", "open access", "open-access"):
                open_access = True
            elif f.lower() in ("pdf", "has pdf", "full text", "full-text"):
                has_pdf = True
            elif name.strip().lower() in ("author", "by") and value.strip():
                authors.append(value.strip())
            elif name.strip().lower() == "venue" and value.strip():
                venue = value.strip()
            elif m := re.fullmatch(r"((?:19|20)\d\d)?\s*-\s*((?:19|20)\d\d)?", f):
                year_from = int(m.group(1)) if m.group(1) else None
                year_to = int(m.group(2)) if m.group(2) else None
            elif re.fullmatch(r"(?:19|20)\d\d", f):
                year_from = year_to = int(f)
            else:
                raise ValueError(f"unknown filter {f!r} in search line {raw!r} (use YEAR-YEAR, oa, pdf, "
                                 "author: NAME or venue: NAME)")
        out.append(SearchQuery(text=head, kind=kind, year_from=year_from, year_to=year_to,  # type: ignore[arg-type]
                               open_access=open_access, has_pdf=has_pdf, authors=tuple(authors), venue=venue))
    return tuple(out)


def search_lines(queries: Sequence[SearchQuery]) -> str:
    """The editable text form of search strings (round trip with :func:`parse_search_lines`)."""
    lines = []
    for q in queries:
        head = q.text if q.kind == "keywords" else f"{q.kind}: {q.text}"
        parts = [head]
        if q.year_from or q.year_to:
            parts.append(f"{q.year_from or ''}-{q.year_to or ''}")
        if q.open_access:
            parts.append("oa")
        if q.has_pdf:
            parts.append("pdf")
        parts += [f"author: {a}" for a in q.authors]
        if q.venue:
            parts.append(f"venue: {q.venue}")
        lines.append(" | ".join(parts))
    return "\n".join(lines)
