"""`forage ask "QUESTION"`: a short cited answer from the stored library (see actors/steps/tools/ask.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway import cli_base as base
from infra.errors import ForageError
from infra.settings import Settings


def ask(
    question: Annotated[str, typer.Argument(help="Your question. It stays on this machine.")],
    library: Annotated[Path | None, typer.Option(
        help="Answer only from the stored papers whose PDF lies under this folder (as `forage research --library "
             "DIR` or `forage library add DIR` stored them).")] = None,
    store: Annotated[Path | None, typer.Option(help="Store folder of the library (default: settings).")] = None,
    llm: Annotated[str | None, typer.Option(help="LLM backend: ollama, openai or embedded.")] = None,
    model: Annotated[str | None, typer.Option(help="Model: an Ollama model name, or the served model id.")] = None,
    run: Annotated[str | None, typer.Option(
        help="Answer only from this run's evidence and sources (its id, a unique prefix of it, or its folder), "
             "in the store the run used; the answer is added to the run's asks.jsonl.")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Runs folder (default: settings).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer, its kind ('answer', 'insufficient' "
                                                         "or 'chit_chat') and the cited passages as one JSON "
                                                         "object on stdout.")] = False,
) -> None:
    """Answer QUESTION briefly from the papers already in the store, with citations; says so when the
    library does not hold enough evidence. Nothing is searched or downloaded.

    Exit codes: 0 an answer, 3 not enough evidence (the answer abstained), 2 bad input or no store."""

    settings = Settings.load()
    changes: dict[str, dict[str, object]] = {}
    if store is not None:
        changes["store"] = {"path": store}
    if llm or model:
        changes["llm"] = {k: v for k, v in (("backend", llm), ("model", model)) if v}
    settings = settings.updated(**changes) if changes else settings
    if run is not None and library is not None:
        base.err.print("[red]error:[/red] give --run or --library, not both")
        raise typer.Exit(2)
    try:
        if run is not None:
            from actors.steps.tools.verify import find_run

            rundir = find_run(run, runs_dir or settings.run.runs_dir)
            result, problem = asyncio.run(ask_run(settings, rundir, question))
        else:
            step, problem = asyncio.run(ask_step(settings, library))
            result = asyncio.run(step.ask(question))
        if problem:
            base.err.print(f"[yellow]note:[/yellow] {problem}", highlight=False)
    except (ForageError, ValueError, OSError) as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None
    show(result, as_json)
    if result.abstained:
        raise typer.Exit(ABSTAINED)


ABSTAINED = 3  # the exit code of an answer that says "not enough evidence" (documented in --help and the README)


def show(result: Any, as_json: bool) -> None:
    """Print an AskResult: its text and numbered sources, or (``as_json``) one JSON object."""
    if as_json:
        import json

        typer.echo(json.dumps(result.as_dict(), ensure_ascii=False))
        return
    base.console.print(result.text, highlight=False, markup=False)  # quoted passages are text, not markup
    if result.cited:
        base.console.print()
        for c in result.cited:
            base.console.print(f"[{c.n}] {c.title} — {c.section_path} (chunk {c.chunk_id})", highlight=False,
                               markup=False)


def run_settings(settings: Settings, state: Any) -> Settings:
    """``settings`` with the store the run used and the embedder it stored with (its run.json), so its
    passages are searched as they were stored; the model stays the caller's choice."""
    changes: dict[str, dict[str, Any]] = {}
    resolved = state.settings.resolved if state.settings is not None else None
    if isinstance(resolved, dict):
        for section in ("embed", "store"):
            if isinstance(resolved.get(section), dict):
                changes[section] = dict(resolved[section])
    elif state.settings is not None and state.settings.embedder in ("minilm", "ollama"):
        changes["embed"] = {"backend": state.settings.embedder}
    if state.store_path:
        changes["store"] = {**changes.get("store", {}), "path": Path(state.store_path)}
    return settings.updated(**changes) if changes else settings


async def ask_run(settings: Settings, rundir: Any, question: str, llm: Any | None = None) -> tuple[Any, str | None]:
    """Ask ``question`` of one run (``forage ask --run``, the MCP ``ask`` tool with a run_id, the dashboard's
    ask box): an AskResult from the run's documents only, appended to the run's asks.jsonl; and a note on the
    relevance check when one could not be built. ForageError when the run has no run.json or no documents;
    a question that is empty (ValueError) is not recorded."""
    from actors.steps.tools.ask import record_ask

    if not question.split():
        raise ValueError("the question is empty")
    try:
        state = rundir.require_state()
    except FileNotFoundError as exc:
        raise ForageError(str(exc)) from None
    step, problem = await ask_step(run_settings(settings, state), run=(rundir.run_id, state), llm=llm)
    result = await step.ask(question)
    record_ask(rundir.asks_jsonl, question, result)
    return result, problem


async def ask_step(settings: Any, library: Path | None = None, run: tuple[str, Any] | None = None,
                   llm: Any | None = None) -> tuple[Any, str | None]:
    """The AskStep `forage ask` and the MCP server's ``ask`` tool answer with (the store, the embedder, the
    checked model, the relevance check, scoped to the papers under ``library``, or to the documents of ``run``
    — (its id, its RunState)), and a note on the relevance check when one could not be built. ``llm``: the
    model to answer with (default: built from ``settings``). ForageError (one sentence) when there is no
    store, nothing under ``library`` or of the run in it, or the model server does not answer."""
    from actors.steps.tools.ask import INSUFFICIENT, RUN_INSUFFICIENT, AskStep, library_filter, run_filter
    from infra.embed import build_embedder
    from infra.llm import build_llm
    from infra.rerank import build_relevance
    from infra.store import build_store

    if settings.store.backend == "lancedb" and not Path(settings.store.path).exists():
        raise ForageError(f"no store at {settings.store.path}: run forage research or forage library add first")
    db = build_store(settings)
    scope = None
    where, insufficient = "the store", INSUFFICIENT
    if run is not None:
        run_id, state = run
        scope = run_filter(state)
        held = db.document_ids(scope) if scope.doc_ids else []
        if not held:
            raise ForageError(f"run {run_id} has no documents in its store ({settings.store.path}): there is "
                              "nothing of it to ask")
        where, insufficient = f"run {run_id}'s {len(held)} document(s)", RUN_INSUFFICIENT
    if library is not None:
        folder = library.expanduser().resolve()
        scope = library_filter(folder)
        if not db.document_ids(scope):
            raise ForageError(f"the store holds no documents from the library {folder}: run forage library add "
                              f"{folder} (or forage research --library {folder}) first")
    client = llm if llm is not None else build_llm(settings)
    await client.check()
    embedder = build_embedder(settings)
    relevance, problem = build_relevance(settings, embedder, db)
    step = AskStep(db, embedder, client, alpha=settings.store.hybrid_alpha, scope=scope,
                   relevance=relevance if settings.forage.relevance_check else None,
                   extractive=settings.extractive(), where=where, insufficient=insufficient)
    return step, problem


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
