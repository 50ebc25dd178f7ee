"""Bibliographic metadata read from the PDFs themselves: right / wrong / missing per field on the 16 shared papers.

    .venv/bin/python bench/metadata.py         # ../shared/data/pdfs against tests/data/shared_pdfs_metadata.json
    .venv/bin/python bench/metadata.py --json out.json

Each PDF is parsed by the configured PyMuPDF parser (layout mode when pymupdf-layout is installed), exactly as
ingestion does, and what it read is compared with what the paper prints about itself (the truth file, read by
hand from each first page and checked against the folder's SOURCE.md):

* **title**: equal after Unicode normalisation, case folding and whitespace;
* **first author**: the truth's surname is in the first author's name;
* **year**: equal, where the paper prints one (a paper that prints none is "not printed": any year is counted
  apart, as "year, none printed");
* **venue**: the name equal (as for titles) and its kind (journal / conference) too;
* **DOI**, **arXiv id**: equal; a value where the paper prints none is **wrong** (a cited work's DOI taken for
  the paper's), none where it prints one is **missing**.

No model and no network: the figures are the parser's alone. Printed: one line per paper, then per field the
counts right / wrong / missing (out of the papers that print it).
"""

from __future__ import annotations

import argparse
import json
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TRUTH = REPO / "tests" / "data" / "shared_pdfs_metadata.json"
FIELDS = ("title", "first author", "year", "doi", "arxiv id", "venue")


def norm(text: str | None) -> str:
    return " ".join(unicodedata.normalize("NFKC", text or "").casefold().split())


def grade(expected: object, got: object, same: bool) -> str:
    """'right', 'wrong', 'missing' or 'not printed' (the paper prints none and none was read)."""
    if expected in (None, ""):
        return "not printed" if got in (None, "", ()) else "wrong"
    if got in (None, "", ()):
        return "missing"
    return "right" if same else "wrong"


def judge(truth: dict, parsed) -> dict[str, str]:  # noqa: ANN001 - a ParsedDocument
    first = parsed.authors[0] if parsed.authors else None
    doi, arxiv_id = getattr(parsed, "doi", None), getattr(parsed, "arxiv_id", None)  # older parsers read neither
    venue = getattr(parsed, "venue", None)
    year = grade(truth["year"], parsed.year, parsed.year == truth["year"])
    if truth["year"] is None and parsed.year is not None:
        year = "not printed, read"  # e.g. the file's creation year: neither right nor known wrong
    return {
        "title": grade(truth["title"], parsed.title, norm(parsed.title) == norm(truth["title"])),
        "first author": grade(truth["first_author_surname"], first,
                              norm(truth["first_author_surname"]) in norm(first)),
        "year": year,
        "doi": grade(truth["doi"], doi, (doi or "").lower() == (truth["doi"] or "").lower()),
        "arxiv id": grade(truth["arxiv_id"], arxiv_id, arxiv_id == truth["arxiv_id"]),
        "venue": grade(truth.get("venue"), venue, norm(venue) == norm(truth.get("venue"))
                       and getattr(parsed, "venue_kind", "") == truth.get("venue_kind")),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pdfs", type=Path, default=REPO.parent / "shared" / "data" / "pdfs")
    ap.add_argument("--json", type=Path, help="write the per-paper grades here")
    args = ap.parse_args()

    from infra.pdf.pymupdf import PyMuPDFParser

    truth = json.loads(TRUTH.read_text())["papers"]
    parser = PyMuPDFParser()
    rows: dict[str, dict[str, str]] = {}
    for name in sorted(truth):
        parsed = parser.parse(args.pdfs / name)
        rows[name] = judge(truth[name], parsed)
        shown = ", ".join(f"{f}: {g}" for f, g in rows[name].items() if g not in ("right", "not printed"))
        print(f"{name:45} {shown or 'all right'}")
        print(f"{'':45} read: {parsed.title!r:.60} | {(parsed.authors or ('-',))[0]} | {parsed.year} | "
              f"{getattr(parsed, 'doi', None)} | {getattr(parsed, 'arxiv_id', None)} | {getattr(parsed, 'venue', None)}")
    print(f"\nparser {parser.name} (revision {getattr(parser, 'revision', '1')}), {len(rows)} papers")
    print(f"{'field':14} {'printed':>8} {'right':>6} {'wrong':>6} {'missing':>8}")
    for field in FIELDS:
        grades = [r[field] for r in rows.values()]
        printed = sum(g in ("right", "wrong", "missing") for g in grades)
        wrong = sum(g == "wrong" for g in grades)
        print(f"{field:14} {printed:>8} {grades.count('right'):>6} {wrong:>6} {grades.count('missing'):>8}"
              + (f"   ({grades.count('not printed, read')} read where none is printed)"
                 if "not printed, read" in grades else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
