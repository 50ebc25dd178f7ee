"""`forage …` — the command line (typer + rich).

    forage demo                              offline, shipped library, embedded model and store
    forage research "QUERY" --library DIR    your PDFs, your Ollama
    forage research --from RUN "NARROWER"    follow up a run: its documents and evidence first
    forage chunk CHUNK_ID --json             print a stored chunk, to check a citation
    forage runs                              list runs and their state
    forage eval retrieval --beir DIR         measured retrieval quality on a BEIR dataset
    forage eval evidence --beir DIR          evidence quality of the Forager, scored without an LLM
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.live import Live
from rich.table import Table

from actors.steps.run.record import follow_up_of
from actors.steps.run.rundir import find_run_dir
from gateway import (cli_ask, cli_eval, cli_library, cli_metadata, cli_privacy, cli_report, cli_runs, cli_serve,
                     cli_store)
from gateway.cli_base import ProgressView, app, console, err, eval_app, one_line, run_settings
from infra.errors import ConfigError, ForageError
from infra.settings import EMBEDDED_WINDOW, PresetName, Settings, settings_for_run
from messages.plan import RequirementsPlan, ResearchQuery
from messages.run_state import FollowUp, RunState

DEMO_QUERY = ("What complications and risks are associated with thromboprophylaxis for deep venous thrombosis "
              "in trauma patients, and how is it evaluated?")


def demo_library() -> Path:
    """The CC-BY demo papers shipped in the repository (examples/demo_library)."""
    return Path(__file__).resolve().parents[1] / "examples" / "demo_library"


# -- approval ----------------------------------------------------------------------------------------
def show_requirements(plan: RequirementsPlan) -> None:
    table = Table(title="Requirements derived from your query")
    table.add_column("id")
    table.add_column("requirement")
    for r in plan.requirements:
        table.add_row(r.id, r.text)
    console.print(table)
    if plan.degraded:
        console.print(f"[yellow]note:[/yellow] {'; '.join(plan.degraded)}")
    show_search_strings(plan)


def show_search_strings(plan: RequirementsPlan) -> None:
    """The exact strings that will leave the machine, or a plain statement that nothing will."""
    if not plan.search_queries:
        console.print("[dim]Nothing leaves this machine: the source is the local library.[/dim]")
        return
    table = Table(title="Search strings sent to the online databases (nothing else from your query leaves)")
    table.add_column("#")
    table.add_column("exact string")
    table.add_column("filters")
    table.add_column("for")
    for i, q in enumerate(plan.search_queries, 1):  # the filters (years, authors, venue...) are sent too
        table.add_row(str(i), q.text, ", ".join(q.filters()), ", ".join(q.requirement_ids))
    console.print(table)
    console.print("[dim]Paper downloads go to the open-access locations the databases list; every request is "
                  "recorded in the run's egress.jsonl.[/dim]")


def approve(plan: RequirementsPlan, *, yes: bool, interactive: bool | None = None) -> RequirementsPlan:
    """Accept, edit ($EDITOR) or drop requirements. Returns the approved plan."""
    from actors.steps.plan.requirements import requirements_from_text, requirements_to_text

    if interactive is None:
        interactive = sys.stdin.isatty()
    while True:
        show_requirements(plan)
        if yes:
            return plan.approve()
        if not interactive:
            raise ForageError("cannot ask for approval without a terminal: pass --yes, or --requirements FILE")
        answer = typer.prompt("[a]ccept, [e]dit requirements, edit [s]earch strings, [d]rop N, [q]uit",
                              default="a").strip().lower()
        if answer in ("a", "accept", "y", "yes"):
            return plan.approve()
        if answer in ("q", "quit"):
            raise typer.Exit(1)
        if answer in ("e", "edit"):
            edited = click.edit(requirements_to_text(plan), extension=".txt")
            if edited is not None:
                plan = requirements_from_text(edited, plan.query).model_copy(
                    update={"search_queries": plan.search_queries})
            continue
        if answer in ("s", "search"):
            plan = edit_search_strings(plan)
            continue
        if answer.startswith("d"):
            ids = {f"R{x}" if x.isdigit() else x.upper() for x in answer[1:].replace(",", " ").split()}
            kept = tuple(r for r in plan.requirements if r.id not in ids)
            if not kept:
                console.print("[red]at least one requirement must remain[/red]")
                continue
            plan = plan.model_copy(update={"requirements": kept})
            continue
        console.print(f"[red]unknown answer {answer!r}[/red]")


SEARCH_HELP = ("# One search string per line, sent verbatim to OpenAlex and arXiv. Optional filters after ' | ':\n"
               "#   YEAR-YEAR (or YEAR- / -YEAR), oa (open access only), pdf (only works with a PDF),\n"
               "#   author: NAME (repeat for any of several), venue: NAME (journal or conference); they are sent\n"
               "#   too. 'title: ...' / 'author: ...' at the start look up a named paper or person.\n"
               "#   Delete a line to send nothing for it; delete all to stay local.\n")


def edit_search_strings(plan: RequirementsPlan) -> RequirementsPlan:
    from actors.steps.plan.search_terms import parse_search_lines, search_lines

    edited = click.edit(SEARCH_HELP + search_lines(plan.search_queries) + "\n", extension=".txt")
    if edited is None:
        return plan
    try:
        queries = parse_search_lines(edited)
    except ValueError as exc:
        console.print(f"[red]{one_line(exc)}[/red]")
        return plan
    return plan.model_copy(update={"search_queries": queries})


# -- the run -----------------------------------------------------------------------------------------
def preflight(settings: Settings, query: str, follow_up: bool = False) -> None:
    """Everything that can be checked before any work starts, each failure one clear sentence.
    A follow-up run (``follow_up``) may have nothing new to search: it has the earlier run's documents."""
    from actors.steps.search.library import library_files
    from gateway.session import check_model_servers

    ResearchQuery(run_id="preflight", text=query)  # empty query → ValidationError
    if settings.search.library is None and not settings.online() and not follow_up:
        raise ForageError("nothing to search: pass --library DIR (a folder of PDFs), or drop --offline to search "
                          "OpenAlex and arXiv")
    if settings.search.library is not None:
        library_files(settings.search.library)
    check_model_servers(settings)


def execute(settings: Settings, query: str, *, yes: bool, requirements_file: Path | None,
            llm: Any | None = None, searches_file: Path | None = None, follow_up: FollowUp | None = None) -> int:
    from actors.steps.plan.requirements import requirements_from_text
    from actors.steps.plan.search_terms import parse_search_lines
    from gateway.session import ResearchSession

    searches = None
    if searches_file is not None:  # read before anything starts: a bad line is one clear error, nothing lost
        searches = parse_search_lines(Path(searches_file).read_text(encoding="utf-8"))
        if searches and not settings.online():
            console.print(f"[yellow]offline:[/yellow] the {len(searches)} search string(s) in {searches_file} are "
                          "not sent; nothing leaves this machine.")
            searches = ()
    session = ResearchSession(settings, llm=llm, quiet=True)
    console.print(f"run [bold]{session.run_id}[/bold] → {session.rundir.path}")
    if follow_up is not None:
        console.print(f"following up run [bold]{follow_up.earlier_run}[/bold]: its documents and evidence come first")
    try:
        if requirements_file is not None:
            text = Path(requirements_file).read_text(encoding="utf-8")
            plan = requirements_from_text(text, ResearchQuery(run_id=session.run_id, text=query))
            if searches_file is None:
                plan = session.propose_search(plan)
        else:
            with console.status("deriving requirements from your query…"):
                plan = session.plan(query)
        if searches is not None:
            plan = plan.model_copy(update={"search_queries": searches})
        console.print("scope: " + ("every paper in the store (--whole-store)" if settings.run.whole_store else
                                   "this run's own sources only (its library folder and the papers its searches "
                                   "find; --whole-store widens it to the whole store)"), highlight=False)
        plan = approve(plan, yes=yes)
        view = ProgressView(plan, live=console.is_terminal)
        if view.live:
            with Live(view, console=console, refresh_per_second=4, transient=False):
                summary = session.run(plan, on_event=view.update, follow_up=follow_up)
        else:
            summary = session.run(plan, on_event=view.update, follow_up=follow_up)
    finally:
        session.close()
    if summary.status != "finished":
        err.print(f"[red]run failed:[/red] {summary.stop_reason}")
        err.print(f"state: {summary.run_dir}/run.json")
        return 1
    console.print(f"stopped: {summary.stop_reason}")
    for rid, why in summary.settled.items():  # per requirement, why it settled
        console.print(f"  {rid}: {why}", highlight=False)
    console.print(f"documents: {summary.documents_stored} in the store, {summary.documents_failed} failed "
                  f"(reasons in {summary.run_dir}/run.json)")
    read = library_read(settings, Path(summary.run_dir))
    if read is not None and read[0] < read[1]:
        console.print(f"library: {read[0]} of {read[1]} files read (the most relevant to the requirements "
                      "first)", highlight=False)
    console.print(f"[bold green]report:[/bold green] {summary.report_path}")
    return 0


def library_read(settings: Settings, run_dir: Path) -> tuple[int, int] | None:
    """(library files the run offered for ingestion, files in the library), None without a library."""
    if settings.search.library is None:
        return None
    from actors.steps.search.library import file_key, library_files


    try:
        files = {file_key(p) for p in library_files(settings.search.library)}
        state = RunState.load(run_dir / "run.json")
    except (ForageError, OSError, ValueError):
        return None
    return len(files & set(state.documents if state else {})), len(files)


ADDRESS_HELP = ("Run on this Ray cluster: 'auto' (the cluster this machine is a node of), 'HOST:6379' or "
                "'ray://HEAD:10001' (Ray Client). Default: FORAGE_RAY__ADDRESS, else a local Ray on loopback.")


@app.command()
def research(
    query: Annotated[str, typer.Argument(help="Your research question. It stays on this machine. '-' reads it "
                                              "from standard input (then it never shows in the process list).")],
    library: Annotated[Path | None, typer.Option(help="Folder of PDFs to research.")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accept the derived requirements.")] = False,
    requirements: Annotated[Path | None, typer.Option(help="Use these requirements (one per line).")] = None,
    preset: Annotated[PresetName | None, typer.Option(help="quick / standard / deep")] = None,
    llm: Annotated[str | None, typer.Option(help="LLM backend: ollama, openai (an OpenAI-compatible server at "
                                                  "llm.base_url: vLLM, llama.cpp, LM Studio) or embedded.")] = None,
    model: Annotated[str | None, typer.Option(
        help="Model: an Ollama model name, or the served model id (--llm openai).")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where runs/<run_id>/ goes.")] = None,
    store: Annotated[Path | None, typer.Option(help="LanceDB store folder.")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Send nothing at all: only --library is used.")] = False,
    searches: Annotated[Path | None, typer.Option(help="Use these search strings (one per line, see the "
                                                  "approval editor for the format).")] = None,
    mailto: Annotated[str | None, typer.Option(help="Your email for OpenAlex's polite pool.")] = None,
    zotero: Annotated[bool, typer.Option("--zotero", help="File accepted papers in a Zotero collection "
                                         "named after the run (zotero settings).")] = False,
    from_run: Annotated[str | None, typer.Option(
        "--from", help="Follow up this earlier run (a narrower question): its store, library and documents are "
                       "reused, its evidence is judged first, and foraging stays within its documents and the "
                       "ones this run adds.")] = None,
    address: Annotated[str | None, typer.Option(
        help=ADDRESS_HELP)] = None,
    whole_store: Annotated[bool, typer.Option(
        "--whole-store", help="Forage every paper in the store (other runs' and libraries' too), not only this "
                              "run's own sources.")] = False,
) -> None:
    """Research QUERY: search OpenAlex and arXiv with the strings you approve (and/or a local library of
    PDFs), read the papers, and write a cited report."""
    if query == "-":  # from standard input: the question never shows in the process list (ps)
        query = sys.stdin.read()
    settings = run_settings(preset, library, llm, model, runs_dir, store, offline, mailto, zotero, address)
    if whole_store:
        settings = settings.updated(run={"whole_store": True})
    raise typer.Exit(checked_run(settings, query, yes=yes, requirements_file=requirements, searches_file=searches,
                                 from_run=from_run, keep_library=library is not None, keep_store=store is not None))


def follow_up_settings(settings: Settings, from_run: str, *, keep_library: bool = False,
                       keep_store: bool = False) -> tuple[Settings, FollowUp]:
    """The earlier run read once (:func:`follow_up_of`), and the follow-up's settings: its store, embedder and
    library (unless given on the command line). ForageError naming the problem when it cannot be followed up."""
    earlier = find_run_dir(settings.run.runs_dir, from_run)
    try:
        state = earlier.load_state()
    except (OSError, ValueError) as exc:
        raise ForageError(f"cannot read run {from_run!r}: {exc}") from exc
    if state is None:
        raise ForageError(f"no run {from_run!r} in {earlier.path.parent}: see `forage runs`")
    follow_up = follow_up_of(state, earlier.path.name, settings.forage.seed_chunks)
    embedder = follow_up.embedder
    return settings_for_run(
        settings, store=Path(follow_up.store_path) if follow_up.store_path and not keep_store else None,
        embedder=embedder if embedder in ("minilm", "ollama") else None,  # the store's vectors come from it
        library=Path(follow_up.library) if follow_up.library and not keep_library else None), follow_up


def checked_run(settings: Settings, query: str, *, yes: bool, requirements_file: Path | None,
                searches_file: Path | None = None, from_run: str | None = None, keep_library: bool = False,
                keep_store: bool = False) -> int:
    """Preflight, then the run. Bad input exits with code 2 and one clear sentence."""
    try:
        from gateway.forget import apply_retention

        apply_retention(settings, say=console.print)  # run.retention_days: forget expired runs first
        follow_up = None
        if from_run:
            settings, follow_up = follow_up_settings(settings, from_run, keep_library=keep_library,
                                                     keep_store=keep_store)
        preflight(settings, query, follow_up=follow_up is not None)
        return execute(settings, query, yes=yes, requirements_file=requirements_file, searches_file=searches_file,
                       follow_up=follow_up)
    except (ForageError, ValueError) as exc:
        err.print(f"[red]error:[/red] {one_line(exc)}")
        raise typer.Exit(2) from None


@app.command()
def demo(
    runs_dir: Annotated[Path | None, typer.Option(help="Where runs/<run_id>/ goes.")] = None,
    store: Annotated[Path, typer.Option(help="Store folder for the demo library.")] = Path(".forage/demo-store"),
    requirements: Annotated[int, typer.Option(help="Most requirements to derive.")] = 3,
) -> None:
    """Run the whole flow offline on the shipped CC-BY demo papers with the embedded model."""
    settings = Settings.load("quick").updated(
        llm={"backend": "embedded", **EMBEDDED_WINDOW},
        embed={"backend": "minilm"},
        search={"library": demo_library()},
        net={"offline": True},
        store={"path": store},
        run={"max_requirements": requirements, **({"runs_dir": runs_dir} if runs_dir else {})},
    )
    console.print("[bold]Forage demo[/bold]: 4 CC-BY papers, the embedded SmolLM2-135M model, LanceDB. "
                  "Everything stays on this machine.")
    console.print("[dim]A 135M-parameter model writes a weak report; the pipeline is the point. "
                  "Point Forage at Ollama for real quality (see README).[/dim]")
    console.print(f"query: {DEMO_QUERY}")
    code = checked_run(settings, DEMO_QUERY, yes=True, requirements_file=None)
    if code == 0:
        console.print(f"check any citation: forage chunk CHUNK_ID --json --store {store}")
    raise typer.Exit(code)


@app.command()
def chunk(
    chunk_id: Annotated[str, typer.Argument(help="A chunk id from a report's evidence.jsonl.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
    run: Annotated[str | None, typer.Option(help="Use the store recorded in this run's run.json.")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Runs folder.")] = Path("runs"),
) -> None:
    """Print a stored chunk (text, document, section path) so anyone can check a citation."""
    from infra.store import build_store

    settings = Settings.load()
    if run is not None:
        from actors.steps.tools.verify import store_path

        try:
            store = store_path(find_run_dir(runs_dir, run))
        except (OSError, ValueError, ConfigError) as exc:
            err.print(f"[red]error:[/red] {one_line(exc)}")
            raise typer.Exit(2) from None
    if store is not None:
        settings = settings.updated(store={"path": store})
    found = build_store(settings).get_chunk(chunk_id)
    if found is None:
        err.print(f"[red]no chunk {chunk_id!r}[/red] in the store at {settings.store.path}")
        raise typer.Exit(1)
    doc = build_store(settings).get_document(found.doc_id)
    data = {"chunk_id": found.chunk_id, "doc_id": found.doc_id, "title": doc.title if doc else None,
            "section_path": found.section_path, "pages": list(found.pages), "text": found.text}
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        console.print(f"[bold]{data['title']}[/bold] — {found.section_path} (pages {list(found.pages)})")
        console.print(found.text, highlight=False)


# -- eval --------------------------------------------------------------------------------------------
class EvalMode(str, Enum):
    bm25 = "bm25"
    dense = "dense"
    hybrid = "hybrid"
    all = "all"


class FusionName(str, Enum):
    relative_score = "relative_score"
    rrf = "rrf"


@eval_app.command("retrieval")
def eval_retrieval(
    beir: Annotated[Path, typer.Option(help="BEIR folder: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.")],
    mode: Annotated[EvalMode, typer.Option(help="Search to evaluate (all: bm25, dense and hybrid).")] = EvalMode.all,
    k: Annotated[int, typer.Option(min=1, help="Documents ranked per query (nDCG@k, Recall@k, MRR@k).")] = 10,
    alpha: Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Hybrid weight of the vector side "
                                                "(default: store.hybrid_alpha).")] = None,
    fusion: Annotated[FusionName | None, typer.Option(help="Hybrid fusion (default: store.hybrid_fusion).")] = None,
    split: Annotated[str, typer.Option(help="qrels split to evaluate.")] = "test",
    store: Annotated[Path | None, typer.Option(help="Store folder to load into and keep (default: a temporary "
                                               "one). Known documents are not loaded again.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the results as JSON here.")] = None,
    limit_queries: Annotated[int | None, typer.Option(min=1, help="Evaluate only the first N judged queries "
                                                      "of --split.")] = None,
    chunks: Annotated[int | None, typer.Option(min=1, help="Chunks retrieved per query before ranking "
                                               "documents by their best chunk (default: 4 × k).")] = None,
    tune: Annotated[bool, typer.Option("--tune", help="Grid-search alpha × fusion on --tune-split, then "
                                       "evaluate the best setting on --split too.")] = False,
    tune_split: Annotated[str, typer.Option(help="qrels split used by --tune.")] = "train",
    tune_limit: Annotated[int | None, typer.Option(min=1, help="Tune on only the first N judged queries "
                                                   "of --tune-split.")] = None,
    batch_docs: Annotated[int, typer.Option(min=1, help="Documents embedded together per ingest call.")] = 256,
) -> None:
    """Retrieval quality (nDCG, Recall, P, MRR) of BM25, dense and hybrid search on a BEIR dataset,
    with the corpus loaded through Forage's own ingestion and store."""
    from actors.steps.evaluation.retrieval import MODES, evaluate_retrieval

    modes = MODES if mode == EvalMode.all else (mode.value,)

    def progress(done: int, total: int, seconds: float) -> None:
        err.print(f"[dim]loaded {done:,}/{total:,} documents ({seconds:.0f} s)[/dim]", highlight=False)

    try:
        results = evaluate_retrieval(Settings.load(), beir, modes=modes, k=k, alpha=alpha,
                                     fusion=None if fusion is None else fusion.value,
                                     split=split, store_path=store, n_chunks=chunks, limit_queries=limit_queries,
                                     tune=tune, tune_split=tune_split, tune_limit=tune_limit,
                                     batch_docs=batch_docs, progress=progress)
    except ForageError as exc:
        err.print(f"[red]error:[/red] {one_line(exc)}")
        raise typer.Exit(1 if exc.retryable else 2) from None
    show_retrieval(results)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        console.print(f"results: {out}")


def show_retrieval(results: dict[str, Any]) -> None:
    """The metrics per mode as a table; the tuning grid's best settings when there is one."""
    timings = results["timings"]
    table = Table(title=f"{results['dataset']} · {results['split']} · {results['n_queries']} queries · "
                        f"hybrid alpha={results['alpha']} {results['fusion']}")
    table.add_column("mode")
    names = list(next(iter(results["metrics"].values())))
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("ms/query", justify="right")
    for mode, metrics in results["metrics"].items():
        table.add_row(mode, *(f"{metrics[n]:.4f}" for n in names), f"{timings['per_query_ms'][mode]:.1f}")
    console.print(table)
    load = results["load"]
    console.print(f"{load['n_docs']:,} documents ({load['stored']:,} stored, {load['skipped']:,} known, "
                  f"{load['failed']:,} failed) · {results['n_chunks']:,} chunks · load {timings['load_s']:.1f} s "
                  f"(embed {timings['embed_s']:.1f} s, store {timings['store_s']:.1f} s) · query embedding "
                  f"{timings['query_embed_ms']:.1f} ms/query", highlight=False)
    tuned = results.get("tune")
    if tuned:
        metric = tuned["metric"]
        grid = Table(title=f"hybrid fusion tuned on {tuned['split']} ({tuned['n_queries']} queries), best first")
        for col in ("alpha", "fusion", metric):
            grid.add_column(col, justify="right")
        for point in tuned["grid"][:5]:
            grid.add_row(f"{point['alpha']:.1f}", point["fusion"], f"{point[metric]:.4f}")
        console.print(grid)
        best = tuned["best"]
        test = tuned[results["split"]]
        console.print(f"best: alpha={best['alpha']} {best['fusion']} → {results['split']}: "
                      + ", ".join(f"{n} {v:.4f}" for n, v in test.items()), highlight=False)


# -- the command groups kept in their own modules (each adds its commands to the shared apps) -------------
for _module in (cli_report, cli_ask, cli_eval, cli_privacy, cli_runs, cli_library, cli_metadata, cli_store, cli_serve):
    _module.register(app)


def main() -> None:
    from infra import privacy

    privacy.apply()
    app()


if __name__ == "__main__":
    main()
