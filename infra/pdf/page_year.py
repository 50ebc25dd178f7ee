"""The paper's year from its first page (infra/pdf/pymupdf.py): a labelled publication year, the info dictionary's
own year keys, the latest plausible year printed on page 1 (a NeurIPS volume, a new-style arXiv id; never a download,
access or generation stamp), else the file's creation year. Rules for PDFs in general (docs/ingestion.md)."""

from __future__ import annotations

import re
from datetime import date
from typing import Any

_YEAR = re.compile(r"(?<![\d.])(1[89]\d{2}|20\d{2})(?![\d])")
# where a year on page 1 is not the paper's: a download, access or generation stamp ("Downloaded via … on June
# 25, 2025", "consulté le 03 septembre 2017", "(generated 26 October 2017)", "On: Sat, 22 Nov 2014 00:09:14")
_STAMP = re.compile(r"\b(?:downloaded|download|generated|g[ée]n[ée]r[ée]|consult[ée]|accessed|retrieved|printed on"
                    r"|viewed)\b|\bon:", re.IGNORECASE)
_CLOCK_AFTER = re.compile(r"^,?\s*(?:at\s*)?\d{1,2}:\d{2}")
# an explicit publication year ("Year of publication: 2012") outranks every other year on the page
_PUBLICATION_YEAR = re.compile(r"\b(?:year of publication|publication year|date of publication)\W{0,4}"
                               r"(?:[A-Za-z]+\.? \d{1,2},? )?(1[89]\d{2}|20\d{2})\b", re.IGNORECASE)
# NeurIPS (NIPS) proceedings name their volume, not the year: volume N is the meeting of 1987 + N
_NIPS_VOLUME = re.compile(r"Advances in Neural Information Processing Systems (\d{1,2})\b")
_NEW_ARXIV_ID = re.compile(r"\barXiv:\s*(\d{2})(\d{2})\.\d{4,5}", re.IGNORECASE)
_INFO_YEAR_KEYS = ("Published", "Year", "Date")  # non-standard info keys some publishers set (NeurIPS: all three)


def info_extras(doc: Any) -> dict[str, str]:
    """The non-standard year keys of the file's info dictionary ("/Published (2008)" in NeurIPS proceedings),
    which ``doc.metadata`` leaves out."""
    try:
        kind, ref = doc.xref_get_key(-1, "Info")
        if kind != "xref":
            return {}
        xref = int(ref.split()[0])
        found = {key: doc.xref_get_key(xref, key) for key in _INFO_YEAR_KEYS}
    except Exception:  # noqa: BLE001 - only a year hint
        return {}
    return {key: value for key, (kind, value) in found.items() if kind == "string" and value}


def _pdf_date_year(value: str | None) -> int | None:
    match = re.match(r"^(?:D:)?((?:19|20)\d{2})", (value or "").strip())
    return int(match.group(1)) if match else None


def pick_year(meta: dict[str, Any], page1_text: str) -> int | None:
    """The paper's year from page 1 (its venue, copyright and date lines, its arXiv stamp or id), else from the
    file's info dictionary.

    In order: a year labelled as the publication year ("Year of publication: 2012"); the info dictionary's
    own "Published" / "Year" / "Date" keys; else the latest plausible year printed on page 1 — a NeurIPS
    volume ("Advances in Neural Information Processing Systems 21") read as its year, a new-style arXiv id
    ("arXiv:2501.10120") as its month's year, and never a year in a download, access or generation stamp
    ("Downloaded … on June 25, 2025", "consulté le 3 septembre 2017", a date followed by a clock time);
    else the PDF creation year. "Plausible" means not after the creation year + 1 (or next year when the
    date is missing), which keeps future-looking numbers out; citations on page 1 are older than the paper.
    """
    created = _pdf_date_year(meta.get("creationDate")) or _pdf_date_year(meta.get("modDate"))
    ceiling = (created + 1) if created else date.today().year + 1

    def plausible(years: list[int]) -> list[int]:
        return [y for y in years if 1900 <= y <= ceiling]

    labelled = plausible([int(m.group(1)) for m in _PUBLICATION_YEAR.finditer(page1_text)])
    if labelled:
        return max(labelled)
    for key in _INFO_YEAR_KEYS:
        found = _YEAR.search(str(meta.get(key) or ""))
        if found and plausible([int(found.group(1))]):
            return int(found.group(1))
    years = plausible(_printed_years(page1_text))
    if years:
        return max(years)
    return created


def _printed_years(text: str) -> list[int]:
    """Every year printed in ``text`` that may be the paper's (see :func:`pick_year`), in order."""
    years: list[int] = []
    for line in text.splitlines():
        last = 0
        for found in _YEAR.finditer(line):
            before, after = line[last:found.start()], line[found.end():]
            last = found.end()
            if _STAMP.search(before) or _CLOCK_AFTER.match(after):
                continue
            years.append(int(found.group(1)))
        years.extend(1987 + int(m.group(1)) for m in _NIPS_VOLUME.finditer(line))
        years.extend(2000 + int(m.group(1)) for m in _NEW_ARXIV_ID.finditer(line) if 1 <= int(m.group(2)) <= 12)
    return years
