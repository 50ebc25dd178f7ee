"""`forage ask "QUESTION"`: a short cited answer from the stored library (see actors/steps/ask.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer


def ask(
    question: Annotated[str, typer.Argument(help="Your question. It stays on this machine.")],
    store: Annotated[Path | None, typer.Option(help="Store folder of the library (default: settings).")] = None,
    llm: Annotated[str | None, typer.Option(help="LLM backend: ollama or embedded.")] = None,
    model: Annotated[str | None, typer.Option(help="Ollama model name.")] = None,
) -> None:
    """Answer QUESTION briefly from the papers already in the store, with citations; says so when the
    library does not hold enough evidence. Nothing is searched or downloaded."""
    from actors.steps.ask import AskStep
    from gateway import cli as base
    from infra.embed import build_embedder
    from infra.errors import ForageError
    from infra.llm import build_llm
    from infra.settings import Settings
    from infra.store import build_store

    settings = Settings.load()
    changes: dict[str, dict[str, object]] = {}
    if store is not None:
        changes["store"] = {"path": store}
    if llm or model:
        changes["llm"] = {k: v for k, v in (("backend", llm), ("model", model)) if v}
    settings = settings.updated(**changes) if changes else settings
    try:
        if not Path(settings.store.path).exists():
            raise ForageError(f"no store at {settings.store.path}: run forage research or forage library add first")
        client = build_llm(settings)
        asyncio.run(client.check())
        step = AskStep(build_store(settings), build_embedder(settings), client, alpha=settings.store.hybrid_alpha)
        result = asyncio.run(step.ask(question))
    except (ForageError, ValueError) as exc:
        base.err.print(f"[red]error:[/red] {base._one_line(exc)}")
        raise typer.Exit(2) from None
    base.console.print(result.text, highlight=False)
    if result.cited:
        base.console.print()
        for c in result.cited:
            base.console.print(f"[{c.n}] {c.title} — {c.section_path} (chunk {c.chunk_id})", highlight=False,
                               markup=False)


def register(app: typer.Typer) -> None:
    app.command("ask")(ask)
