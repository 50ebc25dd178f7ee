"""Bibliographic metadata read from a PDF's first page (infra/pdf/pymupdf.py): the title by layout (the largest
type near the top, a title over two lines, a running proceedings header above it, the author line below it), the
authors from the block under the title (names with affiliation marks, "and", two-column author grids) or the info
dictionary, the DOI and arXiv id, and the venue (the year: infra/pdf/page_year.py). Rules for PDFs in general
(docs/ingestion.md measures them on papers of many fields and layouts); each is tested on synthetic PDFs in
tests/unit/test_pdf_metadata.py and tests/unit/test_pdf_layouts.py."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from markdown_it import MarkdownIt

from messages.search import VenueKind

_MD = MarkdownIt("commonmark")
_WS = re.compile(r"\s+")
_YEAR = re.compile(r"(?<![\d.])(1[89]\d{2}|20\d{2})(?![\d])")
_FILE_LIKE = re.compile(r"\.(pdf|docx?|dvi|tex|ps|indd|qxd|rtf|odt)$|^(microsoft word|untitled|pii|doi)\b|[\\/]",
                        re.IGNORECASE)
_NAME_WORD = re.compile(r"^(?:[A-Z][\w'’.\-]*|[A-Z]\.(?:-?[A-Z]\.)*)$")
_NAME_PARTICLES = frozenset({"van", "von", "de", "der", "den", "da", "di", "du", "la", "le", "del", "dos", "bin",
                             "ibn", "al", "y"})
_NOT_NAME_WORDS = frozenset({
    "university", "universit", "institute", "institut", "department", "dept", "school", "college", "center",
    "centre", "laboratory", "laboratories", "lab", "inc", "corporation", "research", "science", "sciences",
    "group", "faculty", "hospital", "usa", "uk", "china", "abstract", "introduction", "email", "e-mail",
    "foundation", "company", "ltd", "gmbh", "division", "program", "unit", "academy", "ai",
    # publishing labels and running heads set near the byline ("Open Access", "Cambridge Journals",
    # "Association for Computational Linguistics"): never a person
    "open", "access", "article", "articles", "original", "review", "letter", "journal", "journals",
    "proceedings", "association", "society", "press", "publishing", "publications", "publishers", "publisher",
    "conference", "annual", "meeting", "linguistics", "computational", "systematic", "meta-analysis", "chapter",
    "edition", "volume", "copyright", "licence", "license", "creative", "commons", "received", "accepted",
    "published", "editor", "editors", "preprint", "draft", "submitted", "manuscript",
})
# a thesis's statement between its title and its author ("A dissertation submitted in partial fulfilment of the
# requirements for the degree of Doctor of Philosophy"): passed over like an e-mail line
_DEGREE_STATEMENT = re.compile(r"\b(?:thesis|dissertation|submitted\b.*\bdegree|degree of|doctor of philosophy)\b",
                               re.IGNORECASE)
# words of an affiliation ("NOOR AHMED, University of Toronto, Canada"), and the stems of such words in the
# languages papers are printed in ("Universités", "Laboratoire", "Département", "Universiteit", "ISBN")
_AFFILIATION_WORDS = frozenset({"dept", "school", "college", "center", "centre", "lab", "inc", "corporation",
                                "research", "foundation", "company", "ltd", "gmbh"})
_AFFILIATION_STEMS = ("univ", "laborat", "depart", "départ", "instit", "facult", "hospit", "academ", "technol",
                      "isbn", "health", "statist", "biochem", "biochim", "physi", "chemi", "école", "ecole")
# academic degrees written after a name ("Xiaoliang Bai, MD", "Nina Brooks MPP"): dropped, never a name
_DEGREES = frozenset({"md", "mm", "phd", "ph.d", "ma", "mas", "mpp", "mph", "msc", "bsc", "ms", "bs", "ba", "mba",
                      "dphil", "rn", "frcs", "frcp", "mbbs", "dds", "pharmd", "dvm", "facs", "jd", "llm", "med"})
_LIGATURES = str.maketrans({"ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st"})
_MARKERS = str.maketrans("", "", "*∗†‡§¶#⋄□◇○•♯♭‖⊥☯✉")
_SPLIT_NAMES = re.compile(r"\s*(?:,|;|\band\b|\bAND\b|&)\s*")  # "ADA LOVELACE AND ALAN TURING" too
_LABELLED_DOI = re.compile(r"(?:\bdoi\s*:?\s*|doi\.org/)(10\.\d{4,9}/[^\s\"<>,;]+)", re.IGNORECASE)
_ARXIV_STAMP = re.compile(r"\barXiv:\s*(\d{4}\.\d{4,5}|[a-z][a-z.\-]*/\d{7})(?:v\d+)?", re.IGNORECASE)
# a venue as page 1 prints it: "[In] Proceedings of the …" (a conference), "Journal of …", or a journal's
# citation line ("Clinical Science (2014) 126, 305–313") or its running footer ("PLOS ONE | https://doi.org/…")
# (at a line's start, or after "In" / "et al.": a name inside a sentence may be a cited work's venue)
_PROCEEDINGS = re.compile(r"^(?:(?:In|Published in|Appeared in):? )?(Proceedings of (?:the )?[A-Z0-9][^,;()\n]*)")
_NAME_CHAIN = r"[A-Z][\w’'.-]*(?: (?:&|and|of|in|for|on|the|[A-Z][\w’'.-]*))*"
_JOURNAL_OF = re.compile(r"^(?:[^.]{0,60}\bet al\.? )?((?:The )?Journal of " + _NAME_CHAIN + ")")
_CITATION_LINE = re.compile(r"^(" + _NAME_CHAIN + r") \((?:19|20)\d{2}\) \d+, \d+")
_DOI_FOOTER = re.compile(r"^([A-Z][A-Za-z]+(?: [A-Z][A-Za-z]+){0,4}) \| https?://(?:dx\.)?doi\.org/")
# journals whose name starts "Proceedings of" (a conference's proceedings are the rule)
_JOURNAL_PROCEEDINGS = re.compile(r"^Proceedings of the (?:National Academy of Sciences|Royal Society|IEEE$|"
                                  r"American Mathematical Society|Japan Academy|VLDB Endowment)")
_VENUE_JOINERS = frozenset({"of", "on", "in", "for", "and", "the", "&"})
# a line that names a venue, an issue or a publisher rather than a paper: never a title ("Proceedings of the 45th
# Annual Meeting of the Association …", "Développement durable et territoires, Vol. 4, n°3 | Octobre 2013")
_VENUE_LINE = re.compile(r"^\W*(?:in:? )?(?:proceedings of|proc\. |journal of|transactions on|advances in "
                         r"|annual meeting of|conference on|workshop on)|\b(?:vol\.?|volume|n°|no\.|issue)\s*\d"
                         r"|\bpp\.\s*\d|\bpages \d|©|\bcopyright\b|\bissn\b|\bisbn\b|https?://|www\.",
                         re.IGNORECASE)
# a metadata title written for ASCII or TeX ("… at sqrt(s) = 7 and 8 TeV", "$\alpha$"): the page prints it better
_TEX_LIKE = re.compile(r"\$|\\[a-zA-Z]|\bsqrt\(|\^\{|_\{")
# footnote and affiliation marks that end a title line ("… AT FERMILAB*", "… packing†")
_TRAILING_MARKS = "*∗†‡§¶⋆✉ "
# spacing accents that LaTeX fonts put before the letter they belong to ("J˛edrzej" is "Jędrzej")
_SPACING_ACCENTS = {"˛": "\u0328", "˙": "\u0307", "´": "\u0301", "`": "\u0300", "¨": "\u0308", "ˇ": "\u030c",
                    "˘": "\u0306", "˝": "\u030b", "˚": "\u030a", "¸": "\u0327", "˜": "\u0303"}
_SPACING_ACCENT = re.compile("([" + "".join(_SPACING_ACCENTS) + "])([A-Za-z])")
# a collaboration signs as one author ("The ATLAS and CMS Collaborations", "the XYZ Consortium")
_COLLABORATION = re.compile(r"^[\w .&-]{0,80}\b(?:collaborations?|consortium|consortia)$", re.IGNORECASE)
_FRONT_END_HEADINGS = re.compile(r"^\W*(\d+\.?\s*|[ivx]+\.\s*)?(abstract|summary|introduction|background|keywords)\b",
                                 re.IGNORECASE)


def plain_text(markdown: str) -> str:
    """The visible text of a Markdown block or inline snippet: no markup, no HTML tags, one line."""
    parts: list[str] = []
    for token in _MD.parse(markdown):
        if token.type != "inline" or not token.children:
            continue
        for child in token.children:
            if child.type in ("text", "code_inline"):
                parts.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
        parts.append(" ")
    return _WS.sub(" ", "".join(parts)).strip()


def norm_text(text: str) -> str:
    """Lower-case letters and digits only, for comparing titles across sources."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text).split())


def title_words(text: str) -> list[str]:
    return [w for w in norm_text(text).split() if len(w) >= 3]


def page_one_lines(doc: Any) -> list[tuple[float, float, str]]:
    """(font size, top y, text) of the horizontal text lines in the upper two thirds of page 1.

    The text keeps the spaces MuPDF sets as spans of their own (dropping them glued a title's words together:
    "Meansecondaryelectronyield…") and leaves out raised, smaller spans — superscript affiliation and footnote
    marks ("Sebastian Goldt¹", "… FERMILAB*") — which the font size ignores too; small capitals sit on the
    baseline and stay. Spacing accents set before their letter are folded in ("J˛edrzej" → "Jędrzej")."""
    try:
        page = doc[0]
        blocks = page.get_text("dict").get("blocks", [])
    except Exception:  # noqa: BLE001 - only a title hint; the Markdown itself came out fine
        return []
    limit = page.rect.height * 2 / 3
    lines: list[tuple[float, float, str]] = []
    for block in blocks:
        for line in block.get("lines", []):
            dx, dy = line.get("dir", (1, 0))
            if abs(dy) > 0.01 or dx <= 0:  # rotated text: arXiv side stamps, margin notes
                continue
            spans = [s for s in line.get("spans", []) if s.get("text", "")]
            inked = [s for s in spans if s["text"].strip()]
            if not inked or line["bbox"][1] > limit:
                continue
            top = max(s["size"] for s in inked)
            base = max(s.get("origin", (0, 0))[1] for s in inked if s["size"] == top)
            kept = [s for s in spans if not _superscript(s, top, base)]
            text = "".join(" " if _superscript(s, top, base) else s["text"] for s in spans)  # a mark parts words
            text = _fold_accents(_WS.sub(" ", text).strip())
            if text:
                lines.append((round(max(s["size"] for s in kept if s["text"].strip()), 1), float(line["bbox"][1]),
                              text))
    return lines


def _superscript(span: dict[str, Any], size: float, baseline: float) -> bool:
    """A span set smaller than the line's largest font and raised above its baseline (a mark, not a word)."""
    if not span["text"].strip() or span["size"] >= 0.9 * size:
        return False
    return span.get("origin", (0, baseline))[1] < baseline - 0.2 * size


def _fold_accents(text: str) -> str:
    """Spacing accents placed before their letter made into the accented letter (NFC)."""
    if not _SPACING_ACCENT.search(text):
        return text
    return unicodedata.normalize("NFC", _SPACING_ACCENT.sub(lambda m: m.group(2) + _SPACING_ACCENTS[m.group(1)],
                                                            text))


def page_one_text(doc: Any) -> str:
    """All text of page 1, rotated stamps included (the arXiv id runs up the left margin)."""
    try:
        return doc[0].get_text() if len(doc) else ""
    except Exception:  # noqa: BLE001 - only an identifier hint; the Markdown itself came out fine
        return ""


def page_one_ids(page1_text: str, meta: dict[str, Any]) -> tuple[str | None, str | None]:
    """(DOI, arXiv id) of the paper: the first DOI written with a DOI label on page 1 or in the file's
    subject/keywords metadata (a bare "10.x/y" may be a cited work's), and the first arXiv stamp."""
    doi = None
    for text in (page1_text, meta.get("subject") or "", meta.get("keywords") or ""):
        found = _LABELLED_DOI.search(text)
        if found:
            doi = found.group(1).rstrip(".)]}").lower()
            break
    stamp = _ARXIV_STAMP.search(page1_text)
    return doi, (stamp.group(1) if stamp else None)


def page_one_venue(page1_text: str, meta: dict[str, Any]) -> tuple[str | None, VenueKind]:
    """(venue, kind) printed on page 1: kind 'conference' for "[In] Proceedings of …" (a name broken over two
    lines is joined), 'journal' for "Journal of …" (also in the file's subject metadata), a journal citation
    line ("Clinical Science (2014) 126, 305–313") or a "PLOS ONE | https://doi.org/…" footer; (None, '') when
    none of these is printed (an abbreviation such as "PLDI’09" alone is not read)."""
    lines = [" ".join(line.split()) for line in page1_text.splitlines()]
    lines = [line for line in lines if line]
    for i, line in enumerate(lines):
        found = _PROCEEDINGS.search(line)
        if not found:
            continue
        name = found.group(1).strip()
        last = name.split()[-1]
        if found.end() == len(line) and i + 1 < len(lines) and not _YEAR.fullmatch(last) and (
                last[:1].isupper() or last in _VENUE_JOINERS):
            rest = re.match(r"[^,;()]*", lines[i + 1])
            more = rest.group(0).strip() if rest else ""
            if more and len(more.split()) <= 4 and more[:1].isupper():
                name = f"{name} {more}"
        name = re.sub(r"\s*(?:,?\s*pages?\b.*|\d+\s*[–-]\s*\d+)$", "", name).strip(" .")
        if len(name.split()) >= 3:
            return name, "journal" if _JOURNAL_PROCEEDINGS.match(name) else "conference"
    for text in (*lines, meta.get("subject") or ""):
        for pattern in (_JOURNAL_OF, _CITATION_LINE, _DOI_FOOTER):
            found = pattern.search(text)
            if found:
                words = found.group(1).split()
                while words and (words[-1] in _VENUE_JOINERS or _YEAR.fullmatch(words[-1])):
                    words.pop()
                if len(words) >= 2:
                    return " ".join(words), "journal"
    return None, ""


def names_in_lines_under(lines: list[tuple[float, float, str]], title: str) -> list[str]:
    """Names from the page-1 lines after the title's last line, up to the abstract: the lines whose pieces
    (split at ',', ';', 'and', '&') all look like names. E-mail, affiliation and place lines are passed over
    (an ACM author grid interleaves them with the names); a line of running prose ends the search."""
    words = set(title_words(title))
    if not words:
        return []
    ends = [i for i, (_, _, text) in enumerate(lines)
            if (ws := title_words(text)) and sum(w in words for w in ws) >= 0.8 * len(ws)]
    if not ends:
        return []
    names: list[str] = []
    for _, _, text in lines[ends[-1] + 1:ends[-1] + 40]:
        plain = text.translate(_MARKERS).strip()
        if _FRONT_END_HEADINGS.match(plain):
            break
        if "@" in plain or _DEGREE_STATEMENT.search(plain):  # e-mail; a thesis's "submitted … for the degree of"
            continue
        if len(plain.split()) > 12:
            break
        pieces = [p.strip(" .,;:0123456789") for p in _SPLIT_NAMES.split(plain)]
        pieces = [p for p in pieces if p]
        if pieces and all(_looks_like_name(p) for p in pieces):
            names.extend(pieces)
        elif affiliated := _name_with_affiliation(pieces):
            names.append(affiliated)
    return [_name_case(n) for n in dict.fromkeys(names)][:50]


def _name_with_affiliation(pieces: list[str]) -> str:
    """The name of a byline line that gives one author and then the affiliation ("NOOR AHMED, University of Toronto,
    Canada": ACM's journal layout); '' when the line is not one."""
    if len(pieces) < 2 or not _looks_like_name(pieces[0]):
        return ""
    return pieces[0] if any(_affiliation_word(w) for p in pieces[1:] for w in p.split()) else ""


def _name_case(name: str) -> str:
    """A name printed in capitals as a name is written ("LIAM O'BRIEN" → "Liam O'Brien"), others as printed; ligatures
    written as letters ("Soﬁa" → "Sofia")."""
    name = name.translate(_LIGATURES)
    return name.title() if name.isupper() and len(name) > 3 else name


def _sensible_title(title: str, page1_text: str) -> bool:
    """A metadata title worth using: real words, not a file name nor a venue or issue line, and its words appear
    on page 1."""
    title = title.strip()
    if len(title) < 8 or len(title.split()) < 2 or _FILE_LIKE.search(title) or _VENUE_LINE.search(title):
        return False
    letters = sum(ch.isalpha() for ch in title)
    if letters < 0.5 * len(title):
        return False
    words = title_words(title)
    if not words:
        return False
    page_words = set(title_words(page1_text))
    return sum(w in page_words for w in words) >= 0.6 * len(words)


def _font_title(lines: list[tuple[float, float, str]]) -> str:
    """The largest-font lines of page 1 that sit together (a title spanning two or three lines)."""
    candidates = [(size, y, text) for size, y, text in lines
                  if len(title_words(text)) >= 1 and "arxiv" not in text.lower() and not _VENUE_LINE.search(text)]
    if not candidates:
        return ""
    top = max(size for size, _, _ in candidates)
    chosen = sorted((y, text) for size, y, text in candidates if abs(size - top) < 0.3)
    block = [chosen[0]]
    for y, text in chosen[1:]:
        if y - block[-1][0] > 3 * top:  # a gap: another block in the same font
            break
        block.append((y, text))
    return _WS.sub(" ", " ".join(text for _, text in block)).strip()


def pick_title(meta_title: str, boxes1: list[tuple[str, str]], lines: list[tuple[float, float, str]],
                page1_text: str) -> str:
    """Metadata title if sensible, else the layout title box, the largest front heading, the largest font; a
    venue, issue or publisher line is never one. The choice is then set against the page-1 lines in the title's
    font (:func:`_title_from_lines`): a title broken over lines is completed, an author line glued to it cut."""
    meta_title = _WS.sub(" ", meta_title).strip()
    if _sensible_title(meta_title, page1_text):
        return _title_from_lines(meta_title, lines, from_metadata=True)[:300]
    for cls, seg in boxes1:
        text = plain_text(seg)
        if cls == "title" and len(title_words(text)) >= 2 and not _VENUE_LINE.search(text):
            return _title_from_lines(text, lines)[:300]
    headings: list[tuple[int, str]] = []
    for cls, seg in boxes1:
        if cls != "section-header":
            continue
        text = plain_text(seg)
        if _FRONT_END_HEADINGS.match(text):
            break
        level = len(seg.lstrip()) - len(seg.lstrip().lstrip("#"))
        if len(text.split()) >= 3 and not _VENUE_LINE.search(text):
            headings.append((level or 7, text))
    if headings:
        return _title_from_lines(min(headings, key=lambda h: h[0])[1], lines)[:300]
    font = _font_title(lines)
    return _title_from_lines(font, lines)[:300] if font else ""


def _key(text: str) -> str:
    """The letters and digits of ``text``, lower case, one per character of its NFKC form (spacing and
    punctuation aside: "TABLEFORMER:Robust" and "TableFormer: Robust" have the same key)."""
    return "".join(ch.lower()[:1] for ch in unicodedata.normalize("NFKC", text) if ch.isalnum())


def _split_after_key(text: str, n: int) -> tuple[str, str]:
    """``text`` cut after its first ``n`` key characters (see :func:`_key`)."""
    text = unicodedata.normalize("NFKC", text)
    seen = 0
    for i, ch in enumerate(text):
        if seen == n:
            return text[:i], text[i:]
        seen += ch.isalnum()
    return text, ""


def _join_lines(texts: list[str]) -> str:
    out = ""
    for text in texts:
        text = text.strip()
        out = out + text if not out or out.endswith("-") else f"{out} {text}"
    return out


def _title_lines(key: str, lines: list[tuple[float, float, str]]) -> tuple[list[str], int] | None:
    """The page-1 lines of the title whose key starts (or is started by) ``key``: the first line that begins it
    and the lines that follow in the same font, close under it; with the index of the line after them."""
    for i, (size, y, text) in enumerate(lines):
        k = _key(text)
        if len(k) < 4 or not (key.startswith(k) or k.startswith(key)):
            continue
        block, last_y, j = [text], y, i + 1
        while j < len(lines):
            s2, y2, t2 = lines[j]
            # same font within 5 % (a √ or an integral sets a line's largest size a little higher)
            if abs(s2 - size) > max(0.6, 0.05 * size) or not 0 <= y2 - last_y <= 2.2 * size or _VENUE_LINE.search(t2):
                break
            block.append(t2)
            last_y = y2
            j += 1
        return block, j
    return None


def _subtitle(lines: list[tuple[float, float, str]], after: int, size: float) -> str:
    """A subtitle set on its own line right under the title, in a smaller font that is still well above the
    lines under it ("A meta-analysis" at 16 pt under a 20 pt title, above 10.5 pt authors); '' when none."""
    if after >= len(lines):
        return ""
    s2, _, text = lines[after]
    below = lines[after + 1][0] if after + 1 < len(lines) else 0.0
    pieces = [p.strip(" .,;:0123456789") for p in _SPLIT_NAMES.split(text.translate(_MARKERS))]
    if not (0.7 * size <= s2 < size - 0.6 and s2 >= below + 2) or len(text.split()) > 12:
        return ""
    if _VENUE_LINE.search(text) or any(ch.isdigit() for ch in text) or any(_looks_like_name(p) for p in pieces if p):
        return ""
    return text.strip()


def _title_from_lines(candidate: str, lines: list[tuple[float, float, str]], from_metadata: bool = False) -> str:
    """``candidate`` set against the page-1 lines in the title's font.

    Lines that go on past the candidate in the same font complete it (a title cut at its line break); a candidate
    that runs on past those lines is cut where they end (an author line glued to the title: "… Search Yichen
    He∗1"); a subtitle on its own smaller line is joined with ': '. Where both say the same, the candidate's
    text is kept (its spacing is often better). A metadata title is only completed, never cut (it may hold a
    subtitle the page sets in another font), and replaced by the page's lines only when written for ASCII/TeX."""
    candidate = _WS.sub(" ", candidate).strip()
    key = _key(candidate)
    found = _title_lines(key, lines) if key else None
    if found is None:
        return _tidy_title(candidate)
    block, after = found
    page = _join_lines(block)
    pkey = _key(page)
    if pkey == key:
        title = candidate
    elif pkey.startswith(key):
        title = candidate + ("" if candidate.endswith("-") else " ") + _split_after_key(page, len(key))[1].strip()
    elif key.startswith(pkey):
        title = candidate if from_metadata else _split_after_key(candidate, len(pkey))[0]
    elif from_metadata and _TEX_LIKE.search(candidate) and len(set(title_words(page)) & set(title_words(candidate))) >= \
            0.7 * len(set(title_words(candidate))):
        title = page
    else:
        return _tidy_title(candidate)
    sub = _subtitle(lines, after, lines[after - 1][0]) if not from_metadata else ""
    if sub and not _key(title).endswith(_key(sub)):
        title = f"{_tidy_title(title).rstrip(':')}: {sub}"
    return _tidy_title(title)


def _tidy_title(title: str) -> str:
    """Spacing inside parentheses closed up, ligatures written as letters ("ﬁ" → "fi"), trailing footnote marks and
    spaces dropped."""
    title = re.sub(r"\(\s+", "(", re.sub(r"\s+\)", ")", _WS.sub(" ", title.translate(_LIGATURES))))
    return title.strip().rstrip(_TRAILING_MARKS).strip()


def metadata_authors(author: str) -> list[str]:
    """Authors from the PDF Author field: ';'-separated, else ','/'and'-separated full names; marks and degrees
    dropped ("Pablo E. Branchi *", "Nina Brooks MPP", "Christopher Wildeman, PhD, …"), and a publisher or
    label in the field ("Cambridge Journals") is no author."""
    author = _WS.sub(" ", author.translate(_MARKERS)).strip()
    if not author or "@" in author or "http" in author.lower():
        return []
    if _COLLABORATION.match(author):
        return [author]
    parts = [_drop_degrees(p) for p in (author.split(";") if ";" in author else _SPLIT_NAMES.split(author))]
    parts = [p for p in parts if p and not any(w.lower().strip(".,") in _NOT_NAME_WORDS for w in p.split())]
    if len(parts) > 1 and any(len(p.split()) < 2 for p in parts):  # "Last, First" pairs: keep as written
        return [author] if len(author) <= 120 else []
    return [p for p in parts if any(ch.isalpha() for ch in p) and len(p) <= 80]


def _name_runs(segment: str) -> list[str]:
    """Pieces of a name line: text outside <sup>/emphasis, split at bold runs, superscripts, ',', 'and'."""
    pieces: list[str] = []
    current: list[str] = []
    depth_sup = depth_em = 0
    for token in _MD.parse(segment):
        if token.type != "inline" or not token.children:
            continue
        for child in token.children:
            kind = child.type
            if kind == "html_inline":
                tag = child.content.lower()
                if tag.startswith("<sup"):
                    depth_sup += 1
                elif tag.startswith("</sup") and depth_sup:
                    depth_sup -= 1
                pieces.append("".join(current))
                current = []
            elif kind == "em_open":
                depth_em += 1
                pieces.append("".join(current))
                current = []
            elif kind == "em_close":
                depth_em = max(0, depth_em - 1)
            elif kind in ("strong_open", "strong_close", "softbreak", "hardbreak"):
                pieces.append("".join(current))
                current = []
            elif kind in ("text", "code_inline") and not depth_sup and not depth_em:
                current.append(child.content)
        pieces.append("".join(current))
        current = []
    names: list[str] = []
    for piece in pieces:
        names.extend(p for p in _SPLIT_NAMES.split(piece) if p.strip())
    names = [_drop_degrees(_fold_accents(_WS.sub(" ", n.translate(_MARKERS))).strip(" .,;:0123456789"))
             for n in names]
    return [n for n in names if n and not re.fullmatch(r"[a-z](?:,[a-z])*", n)]  # affiliation letters ("a,b")


def _drop_degrees(text: str) -> str:
    """A name without the degrees written after it ("Xiaoliang Bai, MD" → "Xiaoliang Bai"); '' for a degree."""
    words = text.strip(" .,;:").split()
    while words and words[-1].lower().strip(".,") in _DEGREES:
        words.pop()
    return " ".join(words)


def _affiliation_word(word: str) -> bool:
    """A word of an affiliation or a publishing line (:data:`_AFFILIATION_WORDS`, :data:`_AFFILIATION_STEMS`)."""
    word = word.lower().strip(".,")
    return word in _AFFILIATION_WORDS or word.startswith(_AFFILIATION_STEMS)


def _looks_like_name(text: str) -> bool:
    words = text.split()
    if not 2 <= len(words) <= 5 or any(ch.isdigit() or ch in "@/:()[]{}|" for ch in text):
        return False
    if any(w.lower().strip(".,") in _NOT_NAME_WORDS or _affiliation_word(w) for w in words):
        return False
    return all(_NAME_WORD.match(w) or w.lower() in _NAME_PARTICLES for w in words)


def _title_box_end(boxes1: list[tuple[str, str]], title: str) -> int | None:
    """Index of the last page-1 box of the title: the first box that begins it (its key a prefix of the title's)
    and the boxes after it that hold more of it (a title broken into two boxes, a subtitle box)."""
    key = _key(title)
    if not key:
        return None
    start = next((i for i, (_, seg) in enumerate(boxes1)
                  if len(k := _key(plain_text(seg))) >= 4 and key.startswith(k)), None)
    if start is None:
        return None
    done = len(_key(plain_text(boxes1[start][1])))
    while start + 1 < len(boxes1):
        k = _key(plain_text(boxes1[start + 1][1]))
        if not k and not boxes1[start + 1][1].strip():
            start += 1
            continue
        if not k or not key[done:].startswith(k):
            break
        done += len(k)
        start += 1
    return start


def authors_under_title(boxes1: list[tuple[str, str]], title: str) -> list[str]:
    """Names from the boxes right under the title on page 1 (layout mode): text, heading, list-item or a second
    'title' box (the layout model sometimes calls the byline one); [] when they do not look like names."""
    start = _title_box_end(boxes1, title)
    if start is None:
        return []
    names: list[str] = []
    for cls, seg in boxes1[start + 1:start + 8]:
        if not seg.strip() or cls in ("picture", "page-header", "page-footer"):
            continue
        if cls not in ("text", "section-header", "title", "list-item") or _FRONT_END_HEADINGS.match(plain_text(seg)):
            break
        whole = _WS.sub(" ", plain_text(seg).translate(_MARKERS)).strip(" .,;:0123456789")
        if _COLLABORATION.match(whole):
            names.append(whole)
            continue
        pieces = [p for p in _name_runs(seg) if p]
        good = [p for p in pieces if _looks_like_name(p)]
        affiliated = [_name_with_affiliation([p for p in _name_runs(line) if p])
                      for line in seg.splitlines() if line.strip()]
        if affiliated and all(affiliated):  # a line per author: name, then affiliation
            good = affiliated
        elif not good or len(good) < 0.5 * len(pieces):
            break
        names.extend(good)
    return [_name_case(n) for n in dict.fromkeys(names)][:50]


def choose_authors(from_metadata: list[str], under_title: list[str]) -> list[str]:
    """Metadata authors, unless the names under the title are a longer list that includes the first of them."""
    if not from_metadata:
        return under_title
    surname = norm_text(from_metadata[0]).split()[-1:]
    if len(under_title) > len(from_metadata) and surname and any(surname[0] in norm_text(n).split() for n in under_title):
        return under_title
    return from_metadata
