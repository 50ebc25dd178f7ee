"""Bibliographic metadata read from the PDFs themselves: right / wrong / missing per field, per folder of papers.

    .venv/bin/python bench/metadata.py                 # the 16 shared PDFs (../shared/data/pdfs)
    .venv/bin/python bench/metadata.py --set extra     # the pdfs-extra papers (../shared/data/pdfs-extra)
    .venv/bin/python bench/metadata.py --set all --cache /tmp/forage-meta   # both; page-1 parses kept
    .venv/bin/python bench/metadata.py --json out.json

Each set is a folder and its truth file (``tests/data/shared_pdfs_metadata.json``,
``tests/data/extra_pdfs_metadata.json``). Each PDF is parsed by the PyMuPDF parser (layout mode when
pymupdf-layout is installed) as ingestion does, but only its first page: every metadata field is read from page 1
and the file's info dictionary, so the figures equal a whole-file parse's, at a fraction of the CPU. ``--cache``
keeps what pymupdf4llm read (``PyMuPDFParser.extract``, keyed by the file's sha256 and the parser's name), so a
rerun after a change to the metadata rules costs no parsing. What was read is compared with what the paper prints
about itself (the truth file, read by hand from each first page and checked against the folder's SOURCE.md):

* **title**: equal after Unicode normalisation, case folding and whitespace;
* **first author**: the truth's surname is in the first author's name;
* **year**: equal, where the paper prints one (a paper that prints none is "not printed": any year is counted
  apart, as "year, none printed");
* **venue**: the name equal (as for titles) and its kind (journal / conference) too;
* **DOI**, **arXiv id**: equal; a value where the paper prints none is **wrong** (a cited work's DOI taken for
  the paper's), none where it prints one is **missing**.

A field a truth file does not hold (the pdfs-extra file holds no venue) is not graded. A PDF the parser refuses
(no text layer) has every field "missing" where the paper prints it, and is listed.

No model and no network: the figures are the parser's alone. Printed: one line per paper, then per field the
counts right / wrong / missing (out of the papers that print it), and the share of (paper, field) pairs right
among the title, first author and year the papers print (a year read where none is printed, e.g. the file's
creation year, is shown apart and counted neither way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATA = REPO.parent / "shared" / "data"
SETS = {  # name: (folder, truth file)
    "shared": (DATA / "pdfs", REPO / "tests" / "data" / "shared_pdfs_metadata.json"),
    "extra": (DATA / "pdfs-extra", REPO / "tests" / "data" / "extra_pdfs_metadata.json"),
}
TRUTH = SETS["shared"][1]
FIELDS = ("title", "first author", "year", "doi", "arxiv id", "venue")
CORE = ("title", "first author", "year")
TRUTH_KEYS = {"title": "title", "first author": "first_author_surname", "year": "year", "doi": "doi",
              "arxiv id": "arxiv_id", "venue": "venue"}


def norm(text: str | None) -> str:
    return " ".join(unicodedata.normalize("NFKC", text or "").casefold().split())


def grade(expected: object, got: object, same: bool) -> str:
    """'right', 'wrong', 'missing' or 'not printed' (the paper prints none and none was read)."""
    if expected in (None, ""):
        return "not printed" if got in (None, "", ()) else "wrong"
    if got in (None, "", ()):
        return "missing"
    return "right" if same else "wrong"


def judge(truth: dict, parsed) -> dict[str, str]:  # noqa: ANN001 - a ParsedDocument (None: refused)
    """The grade of each field the truth holds."""
    if parsed is None:
        return {f: ("missing" if truth[TRUTH_KEYS[f]] not in (None, "") else "not printed")
                for f in FIELDS if TRUTH_KEYS[f] in truth}
    first = parsed.authors[0] if parsed.authors else None
    doi, arxiv_id = getattr(parsed, "doi", None), getattr(parsed, "arxiv_id", None)  # older parsers read neither
    venue = getattr(parsed, "venue", None)
    year = grade(truth["year"], parsed.year, parsed.year == truth["year"])
    if truth["year"] is None and parsed.year is not None:
        year = "not printed, read"  # e.g. the file's creation year: neither right nor known wrong
    grades = {
        "title": grade(truth["title"], parsed.title, norm(parsed.title) == norm(truth["title"])),
        "first author": grade(truth["first_author_surname"], first,
                              norm(truth["first_author_surname"]) in norm(first)),
        "year": year,
        "doi": grade(truth.get("doi"), doi, (doi or "").lower() == (truth.get("doi") or "").lower()),
        "arxiv id": grade(truth.get("arxiv_id"), arxiv_id, arxiv_id == truth.get("arxiv_id")),
        "venue": grade(truth.get("venue"), venue, norm(venue) == norm(truth.get("venue"))
                       and getattr(parsed, "venue_kind", "") == truth.get("venue_kind")),
    }
    return {f: g for f, g in grades.items() if TRUTH_KEYS[f] in truth}


def core_counts(grades: dict[str, str]) -> tuple[int, int]:
    """(right, printed) over title, first author and year: only what the paper prints counts."""
    printed = [grades[f] for f in CORE if grades.get(f) in ("right", "wrong", "missing")]
    return printed.count("right"), len(printed)


def _plain_chunks(pages: list[dict]) -> list[dict]:
    """The parts of pymupdf4llm's page chunks the parser reads, as plain data (the chunks hold functions)."""
    keep = ("text", "page_height")
    plain = []
    for chunk in pages:
        item = {k: chunk[k] for k in keep if k in chunk}
        item["metadata"] = {k: v for k, v in (chunk.get("metadata") or {}).items() if k in ("page", "page_number")}
        if chunk.get("page_boxes"):
            item["page_boxes"] = [{"class": b["class"], "pos": tuple(b["pos"]), "bbox": tuple(b["bbox"])}
                                  for b in chunk["page_boxes"]]
        plain.append(item)
    return plain


def parse_page_one(parser, path: Path, cache: Path | None):  # noqa: ANN001, ANN201 - PyMuPDFParser -> ParsedDocument
    """The parser's reading of page 1 of ``path``; pymupdf4llm's page chunks kept under ``cache`` when one is given
    (the rest of ``PyMuPDFParser.extract`` is cheap and read again, so a change to it needs no new cache)."""
    if cache is None:
        return parser.parse(path)
    key = hashlib.sha256(path.read_bytes() + parser.name.encode()).hexdigest()[:32]
    entry = cache / f"{key}.pickle"
    if entry.exists():
        extracted = parser.extract(path, chunks=pickle.loads(entry.read_bytes()))  # noqa: S301 - our own cache
    else:
        extracted = parser.extract(path)
        cache.mkdir(parents=True, exist_ok=True)
        entry.write_bytes(pickle.dumps(_plain_chunks(extracted[0])))
    return parser._assemble(path, *extracted)  # noqa: SLF001 - the same reading parse() does


def run_set(name: str, folder: Path, truth_file: Path, cache: Path | None) -> dict[str, dict[str, str]]:
    from infra.errors import PDFError
    from infra.pdf.pymupdf import PyMuPDFParser

    truth = json.loads(truth_file.read_text())["papers"]
    parser = PyMuPDFParser(max_pages=1)
    rows: dict[str, dict[str, str]] = {}
    print(f"== {name}: {folder} ({len(truth)} papers)")
    for file in sorted(truth):
        try:
            parsed = parse_page_one(parser, folder / file, cache)
        except PDFError as exc:
            parsed, refused = None, str(exc)
        rows[file] = judge(truth[file], parsed)
        shown = ", ".join(f"{f}: {g}" for f, g in rows[file].items() if g not in ("right", "not printed"))
        print(f"{file:50} {shown or 'all right'}")
        if parsed is None:
            print(f"{'':50} refused: {refused:.100}")
            continue
        print(f"{'':50} read: {parsed.title!r:.80} | {(parsed.authors or ('-',))[0]} | {parsed.year} | "
              f"{getattr(parsed, 'doi', None)} | {getattr(parsed, 'arxiv_id', None)} | {getattr(parsed, 'venue', None)}")
    print(f"parser {parser.name} (revision {getattr(parser, 'revision', '1')}), {len(rows)} papers")
    return rows


def table(rows: dict[str, dict[str, str]]) -> None:
    print(f"{'field':14} {'printed':>8} {'right':>6} {'wrong':>6} {'missing':>8}")
    for field in FIELDS:
        grades = [r[field] for r in rows.values() if field in r]
        if not grades:
            continue
        printed = sum(g in ("right", "wrong", "missing") for g in grades)
        wrong = sum(g == "wrong" for g in grades)
        print(f"{field:14} {printed:>8} {grades.count('right'):>6} {wrong:>6} {grades.count('missing'):>8}"
              + (f"   ({grades.count('not printed, read')} read where none is printed)"
                 if "not printed, read" in grades else ""))
    counts = [core_counts(r) for r in rows.values()]
    right, printed = sum(c[0] for c in counts), sum(c[1] for c in counts)
    print(f"title + first author + year right: {right} / {printed} printed ({100 * right / max(printed, 1):.1f} %)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=(*SETS, "all"), default="shared", help="which folder and truth file")
    ap.add_argument("--pdfs", type=Path, help="another folder for the set (default ../shared/data/<folder>)")
    ap.add_argument("--cache", type=Path, help="keep pymupdf4llm's page-1 reading here (reruns parse nothing)")
    ap.add_argument("--json", type=Path, help="write the per-paper grades here")
    args = ap.parse_args()

    names = list(SETS) if args.set == "all" else [args.set]
    everything: dict[str, dict[str, str]] = {}
    for name in names:
        folder, truth_file = SETS[name]
        rows = run_set(name, args.pdfs or folder, truth_file, args.cache)
        table(rows)
        print()
        everything.update({f"{name}/{file}": grades for file, grades in rows.items()})
    if len(names) > 1:
        print(f"== all ({len(everything)} papers)")
        table(everything)
    if args.json:
        args.json.write_text(json.dumps(everything, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
