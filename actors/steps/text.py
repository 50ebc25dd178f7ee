"""Model-written text made presentable, and passages split into quotable sentences (plain functions).

Small models loop, cut off at their length limit, label their sentences and echo JSON-repair feedback; these
helpers turn what they wrote into plain sentences (or nothing) before it reaches a report, a comparison or an
answer. Used by the Writer (actors.steps.write), the comparison (actors.steps.write.compare) and ``forage ask``.
"""

from __future__ import annotations

import re

from actors.steps.plan.requirements import echoes_feedback

# [3], [1, 2], [1–3] — not preceded by a backslash (escaped brackets are literal text)
CITE = re.compile(r"(?<!\\)\[(\d+(?:\s*[,;–-]\s*\d+)*)\]")
_LABEL = re.compile(r"\b(Evidence|Mechanism)\s*:", re.IGNORECASE)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")
_WORD = re.compile(r"[^\W\d_]{2,}")  # an alphabetic word (two letters or more)
_FINAL_PUNCT = re.compile(r"[.!?…][\"'”’)\]]*$")
SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+")

MIN_SENTENCE_WORDS = 3  # alphabetic words a model-written sentence needs
MIN_LETTER_SHARE = 0.5  # letters among its non-space characters ("2022-01-01T00:00:00Z" has 0.1)
LOOP_WORDS = 4  # a phrase of this many words that occurs 3 times or more is a repetition loop
CUT_SLACK = 0.98  # text at least this share of its maxLength, without final punctuation, was cut off


def escape_md(text: str) -> str:
    """Plain text made safe inside Markdown inline content (one line, no live brackets or emphasis)."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))


def plain_text(text: str) -> str:
    """Model-written text as one line of plain text: no citation markers, no 'Evidence:' or
    'Mechanism:' labels (they would read as report sentences of their own). Not yet escaped."""
    text = CITE.sub("", text)
    text = re.sub(r"\(\s*(?:see\s*)?\)", "", text)
    text = " ".join(text.split())
    text = re.sub(r"^(?:Evidence|Mechanism)\s*:\s*", "", text, flags=re.IGNORECASE)
    text = _LABEL.sub(lambda m: f"{m.group(1)} -", text)
    return re.sub(r"\s+([,.;:!?])", r"\1", text).strip()


def whole_sentences(text: str) -> str:
    """Plain text without repeated sentences (small models loop) and without a last sentence cut off
    by the length limit (kept if it is the only one)."""
    parts = [p for p in re.split(r"(?<=[.!?])\s+", text.strip()) if p]
    unique = list(dict.fromkeys(parts))
    if len(unique) > 1 and not re.search(r"[.!?][\"')\]]*$", unique[-1]):
        unique.pop()
    return " ".join(unique)


def plausible(text: str) -> bool:
    """Whether model-written text looks like prose: at least ``MIN_SENTENCE_WORDS`` alphabetic words,
    letters making up at least ``MIN_LETTER_SHARE`` of its non-space characters (so a timestamp or a
    soup of digits and punctuation fails), and no echo of the JSON-repair feedback."""
    chars = "".join(text.split())
    if not chars or len(_WORD.findall(text)) < MIN_SENTENCE_WORDS or echoes_feedback(text):
        return False
    return sum(c.isalpha() for c in chars) / len(chars) >= MIN_LETTER_SHARE


# what a parser leaves in a passage that is not its prose: the words read off a figure (PyMuPDF's layout mode wraps
# them in these comments), superscripts (citation and footnote numbers), other HTML comments and tags
_PICTURE_TEXT = re.compile(r"<!--\s*Start of picture text\s*-->.*?<!--\s*End of picture text\s*-->", re.S | re.I)
_SUPERSCRIPT = re.compile(r"<sup>.*?</sup>", re.S | re.I)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?/?>")
_STRONG = re.compile(r"\*\*|__")  # Markdown bold markers


def without_markup(text: str) -> str:
    """``text`` without figure text, superscripts, HTML comments and tags (a ``<br>`` becomes a space)."""
    for pattern, into in ((_PICTURE_TEXT, " "), (_SUPERSCRIPT, ""), (_COMMENT, " "), (_TAG, " ")):
        text = pattern.sub(into, text)
    return text


# the sections that say how a paper was made, not what it found: never evidence (their chunks carry the paper's title
# for BM25 like every other, so they are retrieved for the paper's subject)
_DECLARATIONS = re.compile(
    r"\b(?:competing\s+interests?|conflicts?\s+of\s+interests?|declarations?|acknowledge?ments?|funding|financial"
    r"\s+support|author(?:s'?)?\s+contributions?|data\s+(?:and\s+code\s+)?availability|code\s+availability|ethics"
    r"|consent|abbreviations)\b", re.IGNORECASE)


def declaration(section_path: str) -> bool:
    """Whether a chunk sits in a section about how the paper was made (acknowledgements, funding, competing interests,
    author contributions, data availability, ethics, abbreviations), by its section's own heading."""
    return bool(_DECLARATIONS.search(section_path.rsplit(">", 1)[-1]))


# a full stop that ends an abbreviation, not a sentence ("Chambers et. al (9) pioneered", "e.g. heparin", "Fig. 2")
_ABBREVIATION = re.compile(r"(?:\b(?:et(?:\s?al)?|al|e\.g|i\.e|figs?|eqs?|vs|cf|approx|refs?|sec|dr|resp)"
                           r"|(?-i:\b[A-Z]))\.$", re.IGNORECASE)


def sentences(text: str) -> list[str]:
    """``text`` split into sentences at a '.', '!' or '?' and a space, not after an abbreviation or an initial."""
    out: list[str] = []
    for part in SENTENCE_SPLIT.split(text):
        if out and _ABBREVIATION.search(out[-1]):
            out[-1] += " " + part
        else:
            out.append(part)
    return out


def sentence_windows(text: str, size: int) -> list[str]:
    """Every run of ``size`` consecutive sentences of ``text`` (whitespace normalised), in order; none when the text
    has ``size`` sentences or fewer (it is its own window) or ``size`` is 0."""
    return [" ".join(text[start:end].split()) for start, end in sentence_window_spans(text, size)]


def sentence_window_spans(text: str, size: int) -> list[tuple[int, int]]:
    """Where in ``text`` each of :func:`sentence_windows` lies: (start, end) character offsets from the first
    character of its first sentence to the last of its last (an in-process embedder pools these spans of one
    forward pass over the whole text)."""
    if size < 1:
        return []
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    bounds: list[tuple[int, int]] = []  # each sentence's first and last word (sentences split between words)
    first = 0
    for part in sentences(" ".join(text[start:end] for start, end in words)):
        count = len(part.split())
        if count:
            bounds.append((first, first + count - 1))
        first += count
    if len(bounds) <= size:
        return []
    return [(words[bounds[i][0]][0], words[bounds[i + size - 1][1]][1]) for i in range(len(bounds) - size + 1)]


def prose_sentences(text: str, as_before: bool = False) -> list[str]:
    """The plausible sentences of a passage in order (heading lines, footnotes, a sentence cut at the passage's start,
    figure text and markup left out, whitespace normalised): what extractive sections and answers quote from. A
    footnote is a line the parser set as a block quote ("> 17https://…", "> 5PDFs are not the only way …": its number
    glued on); kept, it ran into the sentence after it, which was then quoted with the footnote's URL in front. A
    passage that starts inside a sentence (a token window's start: "the Cosmic Microwave Background (CMB) spectrum.")
    starts with its lower-case tail, which is no sentence. A full stop inside a quotation does not end the sentence
    around it (:func:`_within_quotations`). A table's rows are no prose, and a table's or figure's caption ends at
    its paragraph's end: a caption without a full stop ran into the table under it ("Number of persons, …
    2001-2012 |Population|Mean …|") and was quoted as the finding. ``as_before``: keep all of these as before (what
    a report written before may have quoted, for checking it)."""
    if as_before:
        prose = " ".join(line for line in without_markup(text).splitlines() if not line.lstrip().startswith("#"))
        return [s for s in sentences(" ".join(_STRONG.sub("", prose).split())) if plausible(s)]
    blocks: list[list[str]] = [[]]  # paragraphs read as one text, a caption alone
    for paragraph in re.split(r"\n\s*\n", without_markup(text)):
        lines = [line for line in paragraph.splitlines() if not line.lstrip().startswith(("#", ">", "|"))]
        if caption("\n".join(lines)):
            blocks += [lines, []]
        else:
            blocks[-1] += lines
    # "**Figure 6.** We handle …": without the bold marks the caption's full stop ends a sentence
    found = [s for block in blocks for s in sentences(" ".join(_STRONG.sub("", " ".join(block)).split())) if s]
    if found and re.match(_LOWER_WORD, found[0]):  # not "mRNA …", "p53 …", "iPhone …"
        found = found[1:]
    return [s for s in _within_quotations(found) if plausible(s)]


# a first word all in lower-case letters: no sentence starts so ("mRNA", "p53", "iPhone", "k-means" do)
_LOWER_WORD = re.compile(r"[a-z]+\b(?![-\d])")


# a table's or figure's caption, as a paragraph of its own ("Table 1. Number of persons …", "**Figure 6.** Mean …",
# "Fig. 2: …", "Supplementary Table S3 …")
_CAPTION = re.compile(r"^\s*(?:supplementary\s+)?(?:table|fig(?:ure)?\.?)\s*(?:S?\d+[a-z]?|[IVXL]{1,6})\s*[.:|]",
                      re.IGNORECASE)  # "Table II: …" (IEEE) too


def caption(text: str) -> bool:
    """Whether ``text`` opens as a table's or a figure's caption ("Table 5: …", "Fig. 2. …", "Supplementary Table
    S3 | …"): it says what a table or figure shows, not what the paper finds."""
    return _CAPTION.match(_STRONG.sub("", text)) is not None


QUOTATION_CHARS = 600  # the longest sentence a quotation left open may run to (a closing mark the PDF lost)


def _within_quotations(found: list[str]) -> list[str]:
    """``found`` with a full stop inside a quotation not taken as the end of the sentence around it ("Quotes such
    as “Violent video games are just one risk factor. They're not the biggest …,” appear to be …" is one sentence,
    not "Quotes such as “Violent video games are just one risk factor."), up to :data:`QUOTATION_CHARS`; nor one
    before a part that starts with a lower-case word, which is no sentence of its own ("… a paper node a �!" and
    "p for each author of that paper.": an arrow the PDF's font did not map, read as "!")."""
    out: list[str] = []
    for part in found:
        last = out[-1] if out else ""
        opened = last.count("“") > last.count("”") or last.count('"') % 2 == 1 or _LOWER_WORD.match(part)
        if last and opened and len(last) + len(part) < QUOTATION_CHARS:
            out[-1] = f"{last} {part}"
        else:
            out.append(part)
    return out


# What a quoted sentence should be: a finding (a measured value, a comparison, what was observed), not the
# background or aim around it. Counted, not judged: the extractive writer ranks by it next to the words a sentence
# shares with the requirement.
_MEASURE = re.compile(r"\d+(?:\.\d+)?\s?%|\bp\s?[<=>≤]\s?0?\.\d+|\b\d+(?:\.\d+)?\s?(?:of|in|out of)\s\d+\b"
                      r"|\b(?:OR|RR|HR|CI|AUC|F1)\b|\b\d+(?:\.\d+)?[-–]fold\b")
_RESULT_WORDS = re.compile(
    r"\b(?:found|finds|showed|shows|observed|reported|occurred|increased|decreased|reduced|reduces|reduction|higher"
    r"|lower|associated|significant(?:ly)?|incidence|rates?|risks?|ratio|outperform(?:s|ed)?|improv(?:ed|es|ement)"
    r"|achiev(?:ed|es)|accuracy|compared)\b", re.IGNORECASE)
_AIM_OR_BACKGROUND = re.compile(
    r"\b(?:the (?:aim|purpose|objective|goal)s? of|we (?:review|describe|present|propose|aim)|this (?:review|paper|"
    r"study|article) (?:aims|describes|presents|reviews)|(?:is|are|remains?) (?:essential|important|unclear|unknown)"
    r"|(?:an? )?(?:absolute )?requirement for|little is known)\b", re.IGNORECASE)


def finding_weight(sentence: str) -> int:
    """How much ``sentence`` reads as a finding: +2 for a measured value (a percentage, a p-value, "12 of 40", an
    odds ratio), +1 for a result word (found, reduced, associated, rate …), -2 for an aim or background phrase
    ("the aim of", "is essential", "little is known")."""
    return (2 * bool(_MEASURE.search(sentence)) + bool(_RESULT_WORDS.search(sentence))
            - 2 * bool(_AIM_OR_BACKGROUND.search(sentence)))


def collapse_loop(text: str) -> str:
    """``text`` with a repetition loop cut off: when a phrase of ``LOOP_WORDS`` words (case and
    punctuation ignored) occurs three times or more, only the text before its second occurrence is
    kept, ending in "…". '' when that keeps less than half of the words (the text is mostly loop)."""
    words = text.split()
    keys = [re.sub(r"[^\w]", "", w.casefold()) for w in words]
    seen: dict[tuple[str, ...], list[int]] = {}
    cut = len(words)
    for i in range(len(words) - LOOP_WORDS + 1):
        at = seen.setdefault(tuple(keys[i:i + LOOP_WORDS]), [])
        at.append(i)
        if len(at) == 3:
            cut = min(cut, at[1])
    if cut == len(words):
        return text
    if cut * 2 < len(words):
        return ""
    return " ".join(words[:cut]).rstrip(",;:-–— ") + "…"


_SLUG = re.compile(r"\S*?[-_]\S*?[-_]\S*?[-_]\S*?[-_]\S*")  # a "word" of five or more parts joined by - or _


def search_query(raw: str, max_words: int = 32) -> str:
    """A model-written search query made usable: slug-joined words ("a-query-like_this-one-here", a small model's
    habit) split into words, a repetition loop cut (:func:`collapse_loop`, '' when the query is mostly loop), at
    most ``max_words`` words. A hyphenated term of fewer parts ("COVID-19", "beta-blocker") is kept as it is."""
    text = _SLUG.sub(lambda m: re.sub(r"[-_]+", " ", m.group(0)), " ".join(raw.split()))
    words = collapse_loop(" ".join(text.split())).split()
    return " ".join(words[:max_words]).rstrip("…").strip()


def echoes_prompt(query: str, prompt: str, subject: str) -> bool:
    """Whether a model-written query is only the prompt's own wording echoed back — every word of it from the
    instructions or block labels (``prompt``), none from what the query is about (``subject``: the requirement, the
    titles shown): SmolLM2-135M answered a reformulation request with "TITLES", the label of the titles' block. A
    query using other words than the requirement's (what a reformulation asks for) is not an echo."""
    words = {w.casefold() for w in re.findall(r"[^\W\d_]{3,}", query)}
    if not words:
        return False
    own = {w.casefold() for w in re.findall(r"[^\W\d_]{3,}", subject)}
    scaffold = {w.casefold() for w in re.findall(r"[^\W\d_]{3,}", prompt)}
    return words <= scaffold and not words & own


def trim_cut(text: str) -> str:
    """Text cut off mid-sentence, trimmed back to its last complete sentence or, when there is none, to
    its last whole word followed by "…" (the last word may itself be cut, so it goes too)."""
    text = text.rstrip()
    if _FINAL_PUNCT.search(text):
        return text
    ends = list(re.finditer(r"[.!?][\"'”’)\]]*(?=\s)", text))
    if ends:
        return text[:ends[-1].end()]
    words = text.split()
    return " ".join(words[:-1]).rstrip(",;:-–— ") + "…" if len(words) > 1 else ""


def tidy(raw: str, limit: int, *, drop_unfinished: bool = False) -> str:
    """Model-written text (limited to ``limit`` characters by its schema) as presentable plain text, or
    '' when nothing plausible is left.

    Citation markers and labels are removed (:func:`plain_text`); text at the length limit without
    final punctuation is trimmed back (:func:`trim_cut`); repeated sentences are dropped and a
    repetition loop inside a sentence is collapsed (:func:`collapse_loop`); sentences that are not
    :func:`plausible` are dropped. ``drop_unfinished`` also drops a last sentence without final
    punctuation when there are others (see :func:`whole_sentences`). Not yet escaped.
    """
    text = plain_text(raw)
    if len(raw.rstrip()) >= limit * CUT_SLACK:
        text = trim_cut(text)
    if drop_unfinished:
        text = whole_sentences(text)
    sentences = dict.fromkeys(collapse_loop(s) for s in SENTENCE_SPLIT.split(text))
    return " ".join(s for s in sentences if plausible(s))


def block(name: str, text: str) -> str:
    """Untrusted text between clearly marked delimiters (delimiter look-alikes inside are removed): how every prompt
    shows the LLM a passage, a title list or a query, as data and never as instructions."""
    clean = text.replace("<<<", "‹‹‹").replace(">>>", "›››")
    return f"<<<{name}\n{clean}\n{name}>>>"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis where it was cut."""
    return text if len(text) <= limit else text[:limit].rstrip() + " …"
