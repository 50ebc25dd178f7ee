"""The section tree of a paper's Markdown: a path per heading, a kind, and exact character spans.

Structure comes from markdown-it-py block tokens (``token.map`` line ranges, converted to character
offsets of the original text), never from scanning the text with regexes. Regexes only read the
*text of one heading* (its section number) or split a reference list.

What counts as a heading
    * ATX / setext headings at the top level (not inside lists or quotes);
    * a one-line paragraph that starts with a section number and reads like a heading, e.g.
      ``1 Introduction``, ``3.2 Data``, ``IV. RESULTS``: at most 12 words, the text after the number
      starts upper-case and does not end in ``. , ; :``;
    * an ordered list of exactly one item whose one line reads like a heading: ``2. METHODS``
      (CommonMark parses that line as a list), at most 6 words, upper-case or capitalised words;
    * only when the document has fewer than 3 real headings (pymupdf4llm without layout mode): a
      one-line paragraph that is a single **bold** span of at most 12 words, starting with a capital
      or digit, not a caption (``Figure 3: ...``) and not ending in ``:``.

What is not a section (demoted to ordinary text)
    * headings before the title heading (journal names, "RESEARCH ARTICLE");
    * page furniture ("OPEN ACCESS", "REVIEW"), captions set as headings (``Figure 4: ...``),
      headings of more than 25 words, headings that are only code;
    * short headings between the title and the abstract / first numbered heading (author lines);
    * an author's affiliation set as a heading anywhere ("1 Department of …, Cornell University, Ithaca, NY, USA":
      an institution word and a comma).

Levels and paths
    The section number decides the level when there is one (``2.1`` → 2, ``IV.`` → 1, ``A.1`` → 2;
    a single letter ``A``/``B.`` counts as an appendix number after the references, or as level 2
    under Roman-numbered sections). Unnumbered Abstract / Introduction / Conclusion /
    Acknowledgements / References / Appendix are level 1. Other unnumbered headings are level 1
    when their ``#`` level is at most that of the numbered top-level headings, otherwise they nest
    under the nearest heading with a smaller ``#`` level. An unnumbered heading with no text of its
    own ("Materials and methods" directly followed by its parts, all set at the same ``#`` level)
    groups the following headings of its ``#`` level until a well-known section name (Results,
    Discussion, References, ...), a numbered heading or a higher level ends the group. Paths join
    heading texts with ``" > "``; the title is not part of any path.

Kinds
    ``title`` for the title heading and the front matter around it (authors, affiliations; path =
    the title); ``abstract`` for an "Abstract" heading and what it contains, or — when there is no
    such heading — a front-matter paragraph that starts with "Abstract", else the first
    front-matter paragraph of at least 60 words and 2 sentences; ``references`` for a References /
    Bibliography section and its sub-sections (also split into reference strings); ``body`` for the
    rest. Figure and table captions stay in the section where they appear (kind ``body``).
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from infra.store.base import SectionKind

SEP = " > "
FRONT_MATTER = "Front matter"
MAX_HEADING_WORDS = 25
MAX_PSEUDO_WORDS = 12
MAX_LIST_HEADING_WORDS = 6
MAX_NAME_CHARS = 120
MIN_ABSTRACT_WORDS = 60

_MD = MarkdownIt("commonmark").enable("table")
_NEWLINE = re.compile(r"\r\n|\r|\n")  # markdown-it-py's own line split (it normalizes these to \n)
_WS = re.compile(r"\s+")
_NUMBER = re.compile(r"^(\d{1,2}(?:\.\d{1,2})*)\.?\s+(?=\S)")
_ROMAN = re.compile(r"^([IVXL]{1,6})\.\s+(?=\S)")
_LETTER = re.compile(r"^([A-Z])((?:\.\d{1,2})*)\.?\s+(?=\S)")
_CAPTION = re.compile(r"^(fig\.?|figure|table|tab\.|algorithm|listing|scheme|chart)\s*[\dSIVX]", re.IGNORECASE)
_ABSTRACT_LABEL = re.compile(r"^\W*abstract\b\W*", re.IGNORECASE)
_REF_MARKER = re.compile(r"(?:(?<=\s)|^)\[?(\d{1,3})(?:\]|\.)\s")
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")

ABSTRACT_NAMES = frozenset({"abstract", "summary"})
REFERENCE_NAMES = frozenset({"references", "reference", "bibliography", "literature cited", "references and notes",
                             "works cited", "cited literature", "literature", "references cited"})
# a references heading misspelt ("REFFERENCES" in the silkworm paper of pdfs-extra, "Refrences", "Referances"): a one-
# word name that starts as the word does and is that close to it (difflib's ratio; "Preferences" does not start so)
_REFERENCE_WORDS = {"ref": "references", "bib": "bibliography"}
REFERENCE_LIKENESS = 0.9


def reference_name(name: str) -> bool:
    """Whether a normalised heading name (:func:`normalize_name`) names the references, spelt right or nearly."""
    if name in REFERENCE_NAMES:
        return True
    word = _REFERENCE_WORDS.get(name[:3])
    return word is not None and " " not in name and \
        difflib.SequenceMatcher(None, name, word).ratio() >= REFERENCE_LIKENESS


TOP_NAMES = ABSTRACT_NAMES | REFERENCE_NAMES | frozenset({
    "keywords", "key words", "introduction", "background", "related work", "conclusion", "conclusions",
    "acknowledgment", "acknowledgments", "acknowledgement", "acknowledgements", "appendix", "appendices",
})
CANONICAL_NAMES = TOP_NAMES | frozenset({
    "method", "methods", "materials and methods", "material and methods", "methods and materials", "methodology",
    "results", "results and discussion", "discussion", "experiments", "experimental", "evaluation", "limitations",
    "future work", "funding", "author contributions", "authors contributions", "contributions",
    "competing interests", "conflict of interest", "conflicts of interest", "data availability",
    "supporting information", "supplementary information", "supplementary material", "supplementary materials",
    "abbreviations", "ethics statement",
})
FRONT_END_NAMES = ABSTRACT_NAMES | frozenset({"introduction", "background", "keywords", "key words", "index terms",
                                              "ccs concepts"})
FURNITURE_NAMES = frozenset({"open access", "research article", "review", "article", "original article",
                             "original research", "research", "letter", "editorial", "short communication",
                             "brief report", "research paper", "regular article"})


@dataclass(frozen=True, slots=True)
class Section:
    """One section: ``markdown[char_start:char_end]`` is the heading line(s) plus everything up to the next heading."""

    path: str
    kind: SectionKind
    char_start: int
    char_end: int
    body_start: int = field(metadata={"doc": "First character after the heading line(s)."})
    level: int = 1
    heading: str = ""


@dataclass(frozen=True, slots=True)
class Outline:
    title: str | None
    sections: tuple[Section, ...]
    abstract: str = ""
    references: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        """Distinct section paths in document order."""
        return tuple(dict.fromkeys(s.path for s in self.sections))


@dataclass(slots=True)
class _Cand:
    """A heading candidate: block line range, '#' level (None for pseudo headings), plain text."""

    line0: int
    line1: int
    md_level: int | None
    text: str
    number: tuple[str, tuple[str, ...]] | None  # (style, parts): ('arabic', ('2','1')), ('roman', ('IV',)), ...
    pseudo: bool = False
    role: str = "heading"  # heading | title | demoted
    code_only: bool = False


@dataclass(slots=True)
class _Para:
    line0: int
    line1: int
    text: str


def line_starts(text: str) -> list[int]:
    """Character offset of the start of every line as markdown-it counts lines, plus ``len(text)`` at the end."""
    starts = [0]
    starts.extend(m.end() for m in _NEWLINE.finditer(text))
    starts.append(len(text))
    return starts


def inline_text(token: Token | None) -> str:
    """Visible text of an inline token: no markup, no HTML tags, whitespace collapsed."""
    if token is None or not token.children:
        return _WS.sub(" ", token.content if token is not None else "").strip()
    parts: list[str] = []
    for child in token.children:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif child.type == "image":
            parts.append(child.content)
    return _WS.sub(" ", "".join(parts)).strip()


def normalize_name(text: str) -> str:
    """Lower-case heading name without its number and punctuation: '2. Related Work:' → 'related work'."""
    text = unicodedata.normalize("NFKC", text)
    number = parse_number(text)
    if number is not None:
        text = number[2]
    text = "".join(ch if ch.isalnum() else " " for ch in text.lower())
    return " ".join(text.split())


def parse_number(text: str) -> tuple[str, tuple[str, ...], str] | None:
    """(style, parts, rest) of a section number at the start of a heading, or None."""
    for style, pattern in (("arabic", _NUMBER), ("roman", _ROMAN), ("letter", _LETTER)):
        match = pattern.match(text)
        if match:
            if style == "letter":
                parts = (match.group(1), *[p for p in match.group(2).split(".") if p])
            elif style == "arabic":
                parts = tuple(match.group(1).split("."))
            else:
                parts = (match.group(1),)
            return style, parts, text[match.end():]
    return None


def _only_strong(inline: Token) -> bool:
    """The inline content is one bold span (whitespace around it allowed)."""
    children = [c for c in inline.children or [] if not (c.type == "text" and not c.content.strip())]
    if len(children) < 3 or children[0].type != "strong_open" or children[-1].type != "strong_close":
        return False
    depth = 0
    for i, child in enumerate(children):
        depth += child.type == "strong_open"
        depth -= child.type == "strong_close"
        if depth == 0 and i != len(children) - 1:
            return False
    return True


def _headingish(rest: str, max_words: int) -> bool:
    words = rest.split()
    if not words or len(words) > max_words or not rest[:1].isupper():
        return False
    if rest.rstrip()[-1:] in ".,;:":
        return False
    long_words = [w for w in words if len(w) > 3 and w[:1].isalpha()]
    return all(w[:1].isupper() for w in long_words) if max_words <= MAX_LIST_HEADING_WORDS else True


# an institution in an affiliation line ("1 Department of Policy Analysis and Management, Cornell University, Ithaca,
# NY, USA"; "48 Fakult¨at f¨ur Mathematik und Physik, Albert-Ludwigs-Universit¨at, Freiburg, Germany")
_INSTITUTION = re.compile(r"\b(?:Universi\w*|Univ\.|Department|Dept\.|Institut[eo]?|Faculty|Fakult\S*|College|Hospital"
                          r"|Laborator(?:y|ies)|Cent(?:er|re)|School|Academy|INFN)(?!\w)", re.IGNORECASE)


def _affiliation(text: str) -> bool:
    """Whether a heading line is an author's affiliation (an institution, then its place after a comma: "71 Kyungpook
    National University, Daegu, Korea"), which a layout parser may set as a numbered heading: not a section. A
    section named after an institution has no comma-separated place ("3.7. Hospital stay"). A list of three or more
    names in capitals without an "and" is a place too ("30 CERN, Geneva, Switzerland")."""
    if "," in text and _INSTITUTION.search(text) is not None:
        return True
    rest = (parse_number(text) or ("", (), text))[2]
    words = re.findall(r"[^\W\d_][\w'’.-]*", rest)
    return rest.count(",") >= 2 and all(w[:1].isupper() for w in words)


def _collect(tokens: list[Token]) -> tuple[list[_Cand], list[_Para], bool]:
    """Heading candidates, all paragraphs (any depth), and whether bold lines may be headings."""
    real = sum(1 for t in tokens if t.type == "heading_open" and t.level == 0)
    bold_mode = real < 3
    cands: list[_Cand] = []
    paras: list[_Para] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.type == "paragraph_open" and token.map:
            inline = tokens[i + 1]
            paras.append(_Para(token.map[0], token.map[1], inline_text(inline)))
        if token.level != 0 or not token.map:
            i += 1
            continue
        if token.type == "heading_open":
            inline = tokens[i + 1]
            text = inline_text(inline)
            if text and _affiliation(text):  # "36 Niels Bohr Institute, University of Copenhagen, …"
                cands.append(_Cand(token.map[0], token.map[1], int(token.tag[1]), text, None, role="demoted"))
            elif text:
                number = parse_number(text)
                code_only = all(c.type == "code_inline" for c in inline.children or []
                                if not (c.type == "text" and not c.content.strip()))
                cands.append(_Cand(token.map[0], token.map[1], int(token.tag[1]), text,
                                   (number[0], number[1]) if number else None, code_only=code_only))
        elif token.type == "paragraph_open" and token.map[1] - token.map[0] == 1:
            inline = tokens[i + 1]
            text = inline_text(inline)
            number = parse_number(text)
            if number and number[0] != "letter" and _headingish(number[2], MAX_PSEUDO_WORDS) \
                    and not _affiliation(text):
                cands.append(_Cand(token.map[0], token.map[1], None, text, (number[0], number[1]), pseudo=True))
            elif (bold_mode and _only_strong(inline) and len(text.split()) <= MAX_PSEUDO_WORDS
                  and (text[:1].isupper() or text[:1].isdigit()) and not text.endswith(":")
                  and not _CAPTION.match(text)):
                cands.append(_Cand(token.map[0], token.map[1], None, text, None, pseudo=True))
        elif token.type == "ordered_list_open":
            close = _matching_close(tokens, i)
            items = [t for t in tokens[i:close] if t.type == "list_item_open" and t.level == 1]
            paragraphs = [j for j in range(i, close) if tokens[j].type == "paragraph_open"]
            para_map = tokens[paragraphs[0]].map if len(paragraphs) == 1 else None
            if len(items) == 1 and para_map and para_map[1] - para_map[0] == 1:
                rest = inline_text(tokens[paragraphs[0] + 1])
                if _headingish(rest, MAX_LIST_HEADING_WORDS) and items[0].info.isdigit():
                    text = f"{items[0].info}{items[0].markup} {rest}"
                    cands.append(_Cand(token.map[0], para_map[1], None, text, ("arabic", (items[0].info,)),
                                       pseudo=True))
        i += 1
    return cands, paras, bold_mode


def _matching_close(tokens: list[Token], start: int) -> int:
    depth = 0
    for j in range(start, len(tokens)):
        depth += tokens[j].nesting
        if depth == 0:
            return j
    return len(tokens) - 1


def _titles_match(a: str, b: str) -> bool:
    na, nb = normalize_name(a), normalize_name(b)
    if not na or not nb:
        return False
    if na == nb:
        return True
    short, long_ = sorted((na, nb), key=len)
    return len(short) >= 15 and short in long_ and len(short) >= 0.6 * len(long_)


def _mark_front(cands: list[_Cand], title: str | None) -> str | None:
    """Find the title heading, demote what is front-matter furniture; return the title text."""
    front_end = next((k for k, c in enumerate(cands)
                      if c.number is not None and c.number[0] != "letter"
                      or normalize_name(c.text) in FRONT_END_NAMES), len(cands))
    window = cands[:min(front_end, 12)]
    title_at: int | None = None
    if title:
        title_at = next((k for k, c in enumerate(window) if _titles_match(c.text, title)), None)
    else:
        atx = [(c.md_level, k) for k, c in enumerate(window) if c.md_level is not None and len(c.text.split()) >= 2
               and normalize_name(c.text) not in FURNITURE_NAMES]
        if atx:
            title_at = min(atx)[1]
    if title_at is not None:
        for c in cands[:title_at]:
            c.role = "demoted"
        cands[title_at].role = "title"
        title = title or cands[title_at].text
        if front_end < len(cands):
            for c in cands[title_at + 1:front_end]:
                if len(c.text.split()) <= 8:
                    c.role = "demoted"  # author lines, affiliations set as headings
    for c in cands:
        name = normalize_name(c.text)
        if c.role != "heading":
            continue
        if (c.code_only or name in FURNITURE_NAMES or (title and _titles_match(c.text, title))
                or _CAPTION.match(c.text) or len(c.text.split()) > MAX_HEADING_WORDS
                or not any(ch.isalpha() for ch in c.text)):
            c.role = "demoted"
    return title


def _depth(c: _Cand, roman_doc: bool, after_refs: bool) -> int | None:
    """Level given by the section number, or None when the heading has no (usable) number."""
    if c.number is None:
        return None
    style, parts = c.number
    if style == "arabic":
        return len(parts)
    if style == "roman":
        return 1
    if roman_doc:
        return 1 + len(parts)
    if after_refs or len(parts) > 1:
        return len(parts)
    return None


def _clean_name(text: str) -> str:
    name = _WS.sub(" ", text.replace(">", "›")).strip()
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS - 1].rstrip() + "…"


def outline(markdown: str, title: str | None = None) -> Outline:
    """Sections of ``markdown`` in document order, covering every non-blank part of it.

    ``title``: the document title known from elsewhere (PDF metadata); the heading that matches it
    becomes the title section. Without it the first top-ranked heading before the abstract is used.
    """
    tokens = _MD.parse(markdown)
    starts = line_starts(markdown)

    def at(line: int) -> int:
        return starts[min(line, len(starts) - 1)]

    cands, paras, _ = _collect(tokens)
    title = _mark_front(cands, title.strip() if title else None)
    headings = [c for c in cands if c.role != "demoted"]
    roman_doc = any(c.number and c.number[0] == "roman" for c in headings if c.role == "heading")
    level1_md = Counter(c.md_level for c in headings if c.role == "heading" and c.md_level is not None
                        and c.number and c.number[0] in ("arabic", "roman") and len(c.number[1]) == 1)
    top_md = level1_md.most_common(1)[0][0] if level1_md else None
    title_path = _clean_name(title) if title else FRONT_MATTER

    sections: list[Section] = []
    first = at(headings[0].line0) if headings else len(markdown)
    if markdown[:first].strip():
        sections.append(Section(title_path, "title", 0, first, 0, 0, ""))

    stack: list[tuple[int, int, str, str]] = []  # (level, md level for nesting, name, normalized name)
    after_refs = False
    group: tuple[int, int] | None = None  # (level, '#' level) of an empty heading grouping its same-level successors
    for k, c in enumerate(headings):
        start = at(c.line0)
        end = at(headings[k + 1].line0) if k + 1 < len(headings) else len(markdown)
        body = at(c.line1)
        if c.role == "title":
            sections.append(Section(title_path, "title", start, end, body, 0, c.text))
            continue
        name = normalize_name(c.text)
        depth = _depth(c, roman_doc, after_refs)
        md = c.md_level if c.md_level is not None else (0 if c.number else 7)
        if group and (name in CANONICAL_NAMES or c.number is not None or md < group[1]):
            group = None
        if c.number is None and (name in TOP_NAMES or reference_name(name)):
            level = 1
        elif depth is not None:
            level = depth
        elif group and md == group[1]:
            level = group[0] + 1
        elif top_md is not None and c.md_level is not None and c.md_level <= top_md:
            level = 1
        else:
            while stack and stack[-1][1] >= md:
                stack.pop()
            level = len(stack) + 1
        stack = stack[:level - 1]
        stack.append((len(stack) + 1, md, _clean_name(c.text), name))
        if c.number is None and c.md_level is not None and not markdown[body:end].strip():
            group = (len(stack), c.md_level)
        names = [s[3] for s in stack]
        if any(reference_name(n) for n in names):
            kind: SectionKind = "references"
            after_refs = True
        elif any(n in ABSTRACT_NAMES for n in names):
            kind = "abstract"
        else:
            kind = "body"
        sections.append(Section(SEP.join(s[2] for s in stack), kind, start, end, body, len(stack), c.text))

    if not any(s.kind == "abstract" for s in sections):
        sections = _front_abstract(markdown, sections, paras, at)
    return Outline(title=title, sections=tuple(sections), abstract=_abstract_text(markdown, sections),
                   references=_references(markdown, sections, paras, at))


def _front_abstract(markdown: str, sections: list[Section], paras: Sequence[_Para], at) -> list[Section]:
    """Carve an abstract out of the front matter when no heading says 'Abstract'."""
    for idx, section in enumerate(sections):
        if section.kind != "title":
            continue
        inside = [p for p in paras if section.body_start <= at(p.line0) < section.char_end]
        chosen = next((p for p in inside if _ABSTRACT_LABEL.match(p.text)), None)
        end_at_section = chosen is not None
        if chosen is None:
            chosen = next((p for p in inside if len(p.text.split()) >= MIN_ABSTRACT_WORDS
                           and len(_SENTENCE_END.findall(p.text)) >= 2 and "@" not in p.text), None)
        if chosen is None:
            continue
        p_start = at(chosen.line0)
        p_end = section.char_end if end_at_section else min(at(chosen.line1), section.char_end)
        parts = []
        if markdown[section.char_start:p_start].strip():
            parts.append(Section(section.path, "title", section.char_start, p_start, section.body_start,
                                 section.level, section.heading))
        parts.append(Section("Abstract", "abstract", p_start, p_end, p_start, 1, ""))
        if markdown[p_end:section.char_end].strip():
            parts.append(Section(section.path, "title", p_end, section.char_end, p_end, section.level, ""))
        return sections[:idx] + parts + sections[idx + 1:]
    return sections


def _abstract_text(markdown: str, sections: Sequence[Section]) -> str:
    pieces = [markdown[s.body_start:s.char_end].strip() for s in sections if s.kind == "abstract"]
    text = "\n\n".join(p for p in pieces if p)
    return _ABSTRACT_LABEL.sub("", text, count=1) if _ABSTRACT_LABEL.match(text) else text


def _split_references(text: str) -> list[str]:
    """Split a paragraph holding several numbered references ('1. A ... 2. B ...') at consecutive numbers."""
    markers = list(_REF_MARKER.finditer(text))
    if not markers or markers[0].start() != 0:
        return [text]
    cuts = [0]
    expected = int(markers[0].group(1)) + 1
    for m in markers[1:]:
        if int(m.group(1)) == expected:
            cuts.append(m.start())
            expected += 1
    cuts.append(len(text))
    return [text[a:b].strip() for a, b in zip(cuts, cuts[1:]) if text[a:b].strip()]


def _references(markdown: str, sections: Sequence[Section], paras: Sequence[_Para], at) -> tuple[str, ...]:
    """Reference strings of the references sections: one per list item / paragraph, numbered runs split."""
    refs: list[str] = []
    for section in sections:
        if section.kind != "references":
            continue
        for p in paras:
            if section.body_start <= at(p.line0) < section.char_end:
                refs.extend(r for r in _split_references(p.text) if len(r.split()) >= 3)
    return tuple(refs)
