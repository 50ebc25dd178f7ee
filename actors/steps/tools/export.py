"""Exports of a finished run: Markdown, self-contained HTML, BibTeX, RIS and JSON.

HTML is rendered with markdown-it (raw HTML in the report is not passed through) and made
self-contained: every image the report links inside its run folder (the charts) is inlined as a data
URI, any other image source is dropped, and the style sheet is inline, so the file reads offline and
asks nothing of the network. BibTeX and RIS come from the report's sources (title, authors, year, venue,
DOI or URL when the origin names one); the entry type follows the venue's kind: a conference paper is
``@inproceedings`` / ``CONF`` with its proceedings as ``booktitle`` / ``T2``, a journal article ``@article`` /
``JOUR`` with its ``journal`` / ``T2``. What a reader weighs a source by goes with it (:func:`weight_words`): a
retracted work is marked in BibTeX's ``note`` and ``keywords`` and RIS's ``N1`` and ``KW`` (RETRACTED), its
citation count, open-access status and "preprint only" in the ``annote`` / ``N1`` lines; HTML and JSON carry
them as the report and run record do.
"""

from __future__ import annotations

import base64
import html
import json
import mimetypes
import re
import unicodedata
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

from actors.steps.run.rundir import RunDir
from actors.steps.tools.verify import load_report
from actors.steps.write.citations import SOURCES_HEADING
from messages.run_state import RunState
from messages.write import Report, SourceRef

FORMATS = ("md", "html", "bibtex", "ris", "json")
SUFFIX = {"md": ".md", "html": ".html", "bibtex": ".bib", "ris": ".ris", "json": ".json"}

_DOI = re.compile(r"\b(10\.\d{4,9}/\S+)", re.IGNORECASE)
_ARXIV = re.compile(r"\barXiv:(\d{4}\.\d{4,5}|[a-z][a-z.\-]*/\d{7})", re.IGNORECASE)
_IMG_SRC = re.compile(r'(<img\b[^>]*?\bsrc=")([^"]*)(")')

CSS = """
body { font-family: Georgia, 'Times New Roman', serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem;
       line-height: 1.55; color: #1d1d1f; background: #fff; }
h1, h2, h3 { font-family: system-ui, sans-serif; line-height: 1.25; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 1rem 0; font-size: .92rem; }
th, td { border: 1px solid #ccc; padding: .3rem .5rem; vertical-align: top; text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; height: auto; display: block; margin: 1rem auto; }
code { font-size: .9em; }
footer { margin-top: 3rem; color: #666; font-size: .85rem; }
"""


def doi_of(source: SourceRef) -> str | None:
    """A source's DOI: its own field, else (a report written before the field, a text's origin) the one its origin
    names ('doi:10.…', 'https://doi.org/10.…' or a bare '10.…'), if any."""
    if source.doi:
        return source.doi
    m = _DOI.search(source.origin)
    return m.group(1).rstrip(".,;)") if m else None


def arxiv_of(source: SourceRef) -> str | None:
    """A source's arXiv id: its own field, else the one its origin names ('arXiv:2302.07302'), if any."""
    if source.arxiv_id:
        return source.arxiv_id
    m = _ARXIV.search(source.origin)
    return m.group(1) if m else None


def url_of(source: SourceRef) -> str | None:
    origin = source.origin.strip()
    if origin.startswith(("http://", "https://")):
        return origin
    doi, arxiv_id = doi_of(source), arxiv_of(source)
    if doi:
        return f"https://doi.org/{doi}"
    return f"https://arxiv.org/abs/{arxiv_id}" if arxiv_id else None


# -- HTML --------------------------------------------------------------------------------------------------
def _inline_images(body: str, base: Path) -> str:
    root = base.resolve()

    def swap(m: re.Match[str]) -> str:
        src = html.unescape(m.group(2))
        if src.startswith("data:"):
            return m.group(0)
        path = (root / src).resolve()
        if "://" in src or not path.is_relative_to(root) or not path.is_file():
            return m.group(1) + m.group(3)  # never fetched: an external or missing image is dropped
        mime = "image/svg+xml" if path.suffix == ".svg" else (mimetypes.guess_type(path.name)[0] or "image/png")
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"{m.group(1)}data:{mime};base64,{data}{m.group(3)}"

    return _IMG_SRC.sub(swap, body)


def _link_citations(body: str) -> str:
    """[n] in the text links to its entry under Sources Consulted, which gets the anchor ``source-n``."""
    marker = f"<h2>{SOURCES_HEADING}</h2>"
    if marker not in body:
        return body
    text, sources = body.split(marker, 1)
    text = re.sub(r"\[(\d+)\](?![^<]*>)", r'<a href="#source-\1">[\1]</a>', text)
    sources = re.sub(r"<p>\[(\d+)\]", r'<p id="source-\1">[\1]', sources)
    return text + marker + sources


def to_html(markdown: str, base: Path, title: str = "Forage report") -> str:
    """A self-contained HTML page for ``markdown``; images under ``base`` are inlined, citations linked."""
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    body = _link_citations(_inline_images(body, base))
    m = re.search(r"^# (.+)$", markdown, re.MULTILINE)
    page_title = html.escape(m.group(1).replace("\\", "") if m else title)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">\n"
            f"<title>{page_title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}"
            "<footer>Written by Forage, a local-first literature-research agent.</footer>\n</body>\n</html>\n")


def weight_words(source: SourceRef) -> list[str]:
    """What a reader weighs the source by, as short phrases: 'RETRACTED (OpenAlex)', 'cited by 138 (OpenAlex)',
    'open access: gold', 'preprint only'."""
    out = []
    if source.is_retracted:
        out.append("RETRACTED (OpenAlex)")
    if source.cited_by_count is not None:
        out.append(f"cited by {source.cited_by_count} (OpenAlex)")
    if source.oa_status:
        out.append(f"open access: {source.oa_status}")
    if source.preprint_only:
        out.append("preprint only")
    return out


# -- BibTeX ------------------------------------------------------------------------------------------------
def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


def _bib_value(text: str) -> str:
    """A BibTeX field value: braces balanced by removal, LaTeX specials escaped, one line."""
    text = " ".join(text.replace("\\", "").replace("{", "").replace("}", "").split())
    return re.sub(r"([&%$#_])", r"\\\1", text)


def bib_key(source: SourceRef, used: set[str]) -> str:
    first = source.authors[0] if source.authors else "anonymous"
    surname = first.split(",")[0] if "," in first else (first.split() or ["anonymous"])[-1]
    base = re.sub(r"[^a-z0-9]", "", _ascii(surname).lower()) or "anonymous"
    base += str(source.year) if source.year else "nd"
    key, i = base, 0
    while key in used:
        i += 1
        key = base + "abcdefghijklmnopqrstuvwxyz"[(i - 1) % 26] + ("" if i <= 26 else str(i))
    used.add(key)
    return key


_BIB_CONTAINER = {"conference": "booktitle", "journal": "journal"}


def to_bibtex(sources: list[SourceRef] | tuple[SourceRef, ...]) -> str:
    used: set[str] = set()
    entries = []
    for s in sources:
        doi, url, arxiv_id = doi_of(s), url_of(s), arxiv_of(s)
        fields = [("title", _bib_value(s.title) or "Untitled")]
        if s.authors:
            fields.append(("author", " and ".join(_bib_value(a) for a in s.authors)))
        if s.year:
            fields.append(("year", str(s.year)))
        venue = _bib_value(s.venue)
        if venue and s.venue_kind in _BIB_CONTAINER:
            fields.append((_BIB_CONTAINER[s.venue_kind], venue))
        if doi:
            fields.append(("doi", doi))
        if arxiv_id:  # arXiv's own BibTeX: eprint + archivePrefix (BibLaTeX and natbib styles link them)
            fields += [("eprint", arxiv_id), ("archivePrefix", "arXiv")]
        if url:
            fields.append(("url", url))
        notes = (["RETRACTED (OpenAlex marks this work retracted)"] if s.is_retracted else [])
        if s.origin and not doi and not url:
            notes.append(_bib_value(s.origin))
        if notes:
            fields.append(("note", ". ".join(notes)))
        if s.is_retracted:
            fields.append(("keywords", "retracted"))
        if s.preprint_only:
            fields.append(("pubstate", "prepublished"))  # BibLaTeX: not (yet) published
        fields.append(("annote", "; ".join([f"Forage source [{s.n}], document {s.doc_id}", *weight_words(s)])))
        kind = ("inproceedings" if venue and s.venue_kind == "conference" else
                "article" if doi or (venue and s.venue_kind == "journal") else "misc")
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields)
        entries.append(f"@{kind}{{{bib_key(s, used)},\n{body}\n}}\n")
    return "\n".join(entries)


# -- RIS ---------------------------------------------------------------------------------------------------
def to_ris(sources: list[SourceRef] | tuple[SourceRef, ...]) -> str:
    out = []
    for s in sources:
        doi, url = doi_of(s), url_of(s)
        venue = " ".join(s.venue.split())
        kind = ("CONF" if venue and s.venue_kind == "conference" else
                "JOUR" if doi or (venue and s.venue_kind == "journal") else
                "UNPB" if arxiv_of(s) else "GEN")  # UNPB: how reference managers file a preprint
        lines = [f"TY  - {kind}", f"TI  - {' '.join(s.title.split()) or 'Untitled'}"]
        lines += [f"AU  - {' '.join(a.split())}" for a in s.authors if a.strip()]
        if s.year:
            lines.append(f"PY  - {s.year}")
        if venue and s.venue_kind:  # T2: the journal, or the proceedings (also C3, the proceedings title)
            lines += [f"T2  - {venue}", *([f"C3  - {venue}"] if s.venue_kind == "conference" else [])]
        if doi:
            lines.append(f"DO  - {doi}")
        if url:
            lines.append(f"UR  - {url}")
        if s.is_retracted:
            lines.append("KW  - retracted")
        lines += [f"N1  - Forage source [{s.n}], document {s.doc_id}", *(f"N1  - {w}" for w in weight_words(s)),
                  f"ID  - {s.n}", "ER  - "]
        out.append("\n".join(lines))
    return "\n\n".join(out) + ("\n" if out else "")


# -- JSON --------------------------------------------------------------------------------------------------
def to_json(rundir: RunDir, report: Report, state: RunState) -> str:
    data: dict[str, Any] = {
        "run_id": rundir.run_id, "query": state.query, "status": state.status,
        "stop_reason": state.stop_reason, "final_coverage": state.final_coverage,
        **state.model_dump(mode="json", include={"requirements", "iterations"}),
        "report": json.loads(report.model_dump_json()),
    }
    comparison = rundir.path / "comparison.json"
    if comparison.exists():
        data["comparison"] = json.loads(comparison.read_text(encoding="utf-8"))
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def export(rundir: RunDir, fmt: str) -> str:
    """The run's report in ``fmt`` (one of :data:`FORMATS`), as text."""

    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    state = rundir.require_state()
    report = load_report(rundir, state)
    if fmt == "md":
        return report.markdown
    if fmt == "html":
        return to_html(report.markdown, rundir.path)
    if fmt == "bibtex":
        return to_bibtex(report.sources)
    if fmt == "ris":
        return to_ris(report.sources)
    return to_json(rundir, report, state)
