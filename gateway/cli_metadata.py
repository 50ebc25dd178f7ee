"""`forage library fix-metadata` and `forage library match` — the bibliographic fields of stored documents.

    forage library fix-metadata DOC [--title T] [--author A]... [--year Y] [--doi D] [--arxiv ID]
                                    [--venue V --venue-kind journal|conference]
    forage library match [DOC...] [--yes] [--store PATH]

``fix-metadata`` corrects one document by hand. ``match`` fills what documents lack (authors, year, DOI,
arXiv id, venue) from OpenAlex: it prints every lookup that would leave the machine (a DOI, or a title) and
sends nothing until the researcher says yes (``--yes`` says it up front); each request is recorded in
``<runs_dir>/library-<time>/egress.jsonl``. Which work is taken, and why a found work can be refused, is
in :mod:`actors.steps.ingest.match`. Without DOC, every document that lacks one of those fields is looked up.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from gateway import cli_base as base
from gateway.cli_base import console
from gateway.cli_library import ID_WIDTH, fail, library_settings, open_library_store, resolve_ids, show_outcomes
from infra.errors import ForageError

MATCH_STATUSES = ("filled", "unchanged", "no match", "failed")


def register(app: typer.Typer) -> None:
    base.library_app.command("fix-metadata")(fix_metadata)
    base.library_app.command("match")(match_metadata)


def fix_metadata(
    doc: Annotated[str, typer.Argument(metavar="DOC", help="Document id as `forage library list` shows it, or a "
                                       "unique prefix.", show_default=False)],
    title: Annotated[str | None, typer.Option(help="The paper's title.")] = None,
    author: Annotated[list[str] | None, typer.Option(
        "--author", help="An author, in order; repeat for each (replaces the whole list).")] = None,
    year: Annotated[int | None, typer.Option(min=1000, max=2999, help="Year of publication.")] = None,
    doi: Annotated[str | None, typer.Option(help="The paper's DOI ('10.…', 'doi:10.…' or a doi.org link); "
                                            "'' removes it.")] = None,
    arxiv: Annotated[str | None, typer.Option(help="The paper's arXiv id ('2302.07302'); '' removes it.")] = None,
    venue: Annotated[str | None, typer.Option(help="The journal, or the conference's proceedings, it appeared in; "
                                              "'' removes it.")] = None,
    venue_kind: Annotated[Literal["journal", "conference"] | None, typer.Option(
        help="What the venue is (BibTeX @article or @inproceedings); needed with a first --venue.")] = None,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Correct a document's title, authors, year, DOI, arXiv id or venue where its PDF's page 1 misled the parser.

    Reports and BibTeX/RIS exports written from then on use the corrected values (a run's own report keeps
    what it was written with); the document keeps its chunks and vectors, and searches match its new title."""
    from actors.steps.ingest.documents import identifier_changes
    from infra.store.base import update_metadata

    changes: dict[str, Any] = {}
    if title is not None:
        if not title.strip():
            raise fail("--title is empty: give the paper's title")
        changes["title"] = " ".join(title.split())
    if author is not None:
        names = [" ".join(a.split()) for a in author if a.strip()]
        if not names:
            raise fail("--author is empty: give each author's name")
        changes["authors"] = tuple(names)
    if year is not None:
        changes["year"] = year
    try:
        settings = library_settings(store)
        library = open_library_store(settings)
        (chosen,) = resolve_ids(library.list_documents(), [doc], unchanged="nothing was changed")
        if doi is not None or arxiv is not None:
            changes.update(identifier_changes(chosen, doi, arxiv))
        if venue is not None:
            name = " ".join(venue.split())
            kind = (venue_kind or chosen.venue_kind) if name else ""
            if name and not kind:
                raise fail("--venue needs --venue-kind journal or conference (it decides the BibTeX entry type); "
                            "nothing was changed")
            changes["venue"], changes["venue_kind"] = name, kind
        elif venue_kind is not None:
            if not chosen.venue:
                raise fail("--venue-kind needs a venue: give --venue too; nothing was changed")
            changes["venue_kind"] = venue_kind
        if not changes:
            raise fail("nothing to change: give --title, --author, --year, --doi, --arxiv or --venue")
        fixed = update_metadata(library, chosen.doc_id, changes)
    except (ForageError, ValueError) as exc:
        raise fail(str(exc), 1) from None
    console.print(f"[green]fixed[/green] {fixed.doc_id[:ID_WIDTH]}  {', '.join(fixed.authors) or 'Anonymous'} "
                  f"({fixed.year or 'n.d.'}) {fixed.title}."
                  + (f" {fixed.venue} ({fixed.venue_kind})." if fixed.venue else "") + f" {fixed.origin}",
                  highlight=False)


def match_metadata(
    docs: Annotated[list[str] | None, typer.Argument(
        metavar="[DOC]...", help="Document ids or unique prefixes (default: every document lacking authors, year, "
                                 "DOI or venue).", show_default=False)] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Send the lookups shown without asking.")] = False,
    again: Annotated[bool, typer.Option(help="Also documents looked up before that still lack a field (a preprint "
                                             "has no venue).")] = False,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Fill the authors, year, DOI, arXiv id and venue documents lack from OpenAlex, by DOI or title.

    Every lookup is shown before anything is sent, and sent only when you approve it. A work is taken only
    when its title, first author and year agree with the document's; only missing fields are filled (what
    differs is reported: `forage library fix-metadata` corrects it); titles are never changed. A document whose
    lookup was answered before is not looked up again unless named or with --again."""
    from actors.steps.ingest.match import LOOKED_UP, looked_up, lookup_for, missing_fields, outcome
    from infra.net import Egress, EgressLedger
    from infra.sources.openalex import OpenAlexSource
    from infra.store.base import update_metadata

    settings = library_settings(store)
    library = open_library_store(settings)
    documents = library.list_documents()
    lacking = [d for d in documents if missing_fields(d)]
    before = [] if docs or again else [d for d in lacking if looked_up(d)]
    skipped = {d.doc_id for d in before}
    chosen = (resolve_ids(documents, docs, unchanged="nothing was sent") if docs
              else [d for d in lacking if d.doc_id not in skipped])
    if before:
        console.print(f"{len(before)} document(s) looked up before and still lacking a field are not sent again "
                      "(--again, or name them).", highlight=False)
    planned = [(d, lookup_for(d)) for d in chosen]
    lookups = [(d, lookup) for d, lookup in planned if lookup is not None]
    rows = [("unchanged", d.title, str(d.year or ""), "no DOI, and a title too short to look up")
            for d, lookup in planned if lookup is None]
    if not lookups:
        console.print("Nothing to look up: " + (
            "no DOI or title worth sending." if chosen else "the documents still lacking a field were looked up "
            "before." if before else "every document has authors, year, DOI and venue."))
        raise typer.Exit(0)
    asked = "This lookup" if len(lookups) == 1 else f"These {len(lookups)} lookups"
    console.print(f"{asked} would leave this machine, to OpenAlex ({settings.search.openalex_url}):",
                  highlight=False)
    for doc, lookup in lookups:
        console.print(f"  {doc.doc_id[:ID_WIDTH]}  {lookup.shown()}", highlight=False, markup=False)
    if settings.net.offline:
        raise fail("net.offline is set: nothing was sent (unset FORAGE_NET__OFFLINE to look these up)", 1)
    if not yes and not typer.confirm(f"Send {asked.lower()}?", default=False):
        console.print("Nothing was sent; nothing was changed.")
        raise typer.Exit(0)

    stamp = time.strftime("%Y%m%d-%H%M%S")
    ledger = EgressLedger(settings.run.runs_dir / f"library-{stamp}" / "egress.jsonl")
    with OpenAlexSource(settings.search, settings.net, Egress(settings.net, ledger)) as openalex:
        for doc, lookup in lookups:
            try:
                works = ([w] if (w := openalex.by_doi(lookup.text)) else []) if lookup.kind == "doi" \
                    else openalex.lookup_title(lookup.text, limit=10)
                found = outcome(doc, works)
                if found.changes or not looked_up(doc):  # answered: not sent again by default
                    update_metadata(library, doc.doc_id, found.changes, add_flags=(LOOKED_UP,))
            except (ForageError, ValueError) as exc:
                retry = " (try again later)" if getattr(exc, "retryable", False) else ""
                rows.append(("failed", doc.title, str(doc.year or ""), f"{exc}{retry}"))
                continue
            if found.work is None:
                rows.append(("no match", doc.title, str(doc.year or ""), found.reason))
                continue
            filled = [_shown(name, value) for name, value in found.changes.items() if name != "venue_kind"]
            detail = f"{found.work.openalex_id or 'OpenAlex'} by {lookup.kind}: " + (
                "filled " + "; ".join(filled) if filled else "nothing missing it could fill")
            if found.differences:
                detail += " · differs (kept): " + "; ".join(found.differences)
            year = found.changes.get("year", doc.year)
            rows.append(("filled" if filled else "unchanged", doc.title, str(year or ""), detail))
    counts = show_outcomes(f"OpenAlex matching → {settings.store.path}", rows, MATCH_STATUSES)
    console.print(f"[dim]requests: {len(ledger)} (ledger {ledger.path})[/dim]", highlight=False)
    raise typer.Exit(1 if counts["failed"] else 0)


def _shown(name: str, value: Any) -> str:
    if name == "authors":
        return f"authors {', '.join(value)}"
    if name == "origin":
        return f"identifiers {value}"
    return f"{name} {value}"
