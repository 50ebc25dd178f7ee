"""REST routes that read a run's outputs: its report (Markdown, or HTML with clickable citations), evidence,
files, figures and stored chunks, and the questions asked of it (``/api/runs/{run_id}/…``)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from pydantic import ValidationError

from gateway.api import AskIn, AskOut, Chunk, Message
from gateway.errors import Conflict, Invalid, NotFound, Unavailable
from gateway.routes import manager
from gateway.runs import ARTIFACTS, RunManager, read_state
from gateway.security import authorize, authorize_page
from infra.errors import ForageError, describe
from infra.settings import Settings

router = APIRouter(tags=["reports"])
Manager = Depends(manager)
auth = [Depends(authorize)]
_FIGURE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.(svg|png)$")
FIGURE_TYPES = {"svg": "image/svg+xml", "png": "image/png"}
_CITE = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def render_report(markdown: str) -> str:
    """report.md as HTML (markdown-it-py, raw HTML escaped) with each citation [n] a clickable link."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)

    def link(m: re.Match[str]) -> str:
        nums = [n.strip() for n in m.group(1).split(",")]
        inner = ", ".join(f'<a href="#cite-{n}" class="cite" data-n="{n}">{n}</a>' for n in nums)
        return f"[{inner}]"

    # only in text, never inside a tag
    return re.sub(r"(>[^<]*)", lambda t: _CITE.sub(link, t.group(1)), html)


@router.get("/api/runs/{run_id}/report", response_class=PlainTextResponse, dependencies=auth,
            summary="report.md", responses={200: {"content": {"text/markdown": {}}}, 404: {"model": Message}})
async def report(run_id: str, runs: RunManager = Manager) -> Response:
    path = runs.rundir(run_id).report_md
    if not path.exists():
        raise NotFound(f"run {run_id} has no report yet")
    return PlainTextResponse(path.read_text(encoding="utf-8"), media_type="text/markdown; charset=utf-8")


@router.get("/api/runs/{run_id}/report.html", response_class=HTMLResponse, dependencies=auth,
            summary="report.md rendered as an HTML fragment; citations are <a class=cite data-n=N>")
async def report_html(run_id: str, runs: RunManager = Manager) -> HTMLResponse:
    path = runs.rundir(run_id).report_md
    if not path.exists():
        raise NotFound(f"run {run_id} has no report yet")
    return HTMLResponse(render_report(path.read_text(encoding="utf-8")))


@router.get("/api/runs/{run_id}/evidence", response_model=list[dict[str, Any]], dependencies=auth,
            summary="evidence.jsonl: one row per cited chunk (n, chunk_id, doc_id, quote...)")
async def evidence(run_id: str, runs: RunManager = Manager) -> list[dict[str, Any]]:
    path = runs.rundir(run_id).evidence_jsonl
    if not path.exists():
        raise NotFound(f"run {run_id} has no evidence yet")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@router.get("/api/runs/{run_id}/artifacts/{name}", dependencies=[Depends(authorize_page)],
            summary=f"One of the run's files: {', '.join(ARTIFACTS)}", response_class=FileResponse)
async def artifact(run_id: str, name: str, runs: RunManager = Manager) -> FileResponse:
    if name not in ARTIFACTS:
        raise NotFound(f"{name!r} is not a run artifact; one of {', '.join(ARTIFACTS)}")
    path = runs.rundir(run_id).path / name
    if not path.exists():
        raise NotFound(f"run {run_id} has no {name}")
    return FileResponse(path, media_type=ARTIFACTS[name])


@router.get("/api/runs/{run_id}/figures/{name}", dependencies=auth,
            summary="A chart of the run's report (figures/<name>.svg|png, as the report links it)",
            response_class=FileResponse)
async def figure(run_id: str, name: str, runs: RunManager = Manager) -> FileResponse:
    match = _FIGURE.fullmatch(name)
    if match is None:
        raise NotFound(f"{name!r} is not a figure name (<name>.svg or <name>.png)")
    path = runs.rundir(run_id).path / "figures" / name
    if not path.is_file():
        raise NotFound(f"run {run_id} has no figure {name}")
    # an SVG is a document that may carry script: served sandboxed, never run as the gateway's page
    headers = {"Content-Security-Policy": "sandbox"} if match.group(1) == "svg" else None
    return FileResponse(path, media_type=FIGURE_TYPES[match.group(1)], headers=headers)


@router.get("/api/runs/{run_id}/chunks/{chunk_id}", response_model=Chunk, dependencies=auth,
            summary="A stored chunk cited by the run (as `forage chunk`): text, document, section, pages")
async def chunk(run_id: str, chunk_id: str, runs: RunManager = Manager) -> Chunk:
    state = read_state(runs.rundir(run_id))
    if state is None or not state.store_path:
        raise NotFound(f"run {run_id} records no store")
    return await asyncio.get_running_loop().run_in_executor(
        runs.pool, _load_chunk, runs.settings, Path(state.store_path), chunk_id)


@router.post("/api/runs/{run_id}/ask", response_model=AskOut, dependencies=auth,
             summary="Ask a question of the run: a cited answer from its documents only (as `forage ask --run`), "
                     "or 'not enough evidence' with what was searched; appended to the run's asks.jsonl",
             responses={404: {"model": Message}, 409: {"model": Message}, 503: {"model": Message}})
async def ask_run(run_id: str, body: AskIn, runs: RunManager = Manager) -> AskOut:
    from gateway.cli_ask import ask_run as ask

    rundir = runs.rundir(run_id)
    if read_state(rundir) is None:
        raise NotFound(f"no run {run_id!r}")
    try:
        result, _ = await ask(runs.settings, rundir, body.question, llm=runs.llm)
    except ValueError as exc:
        raise Invalid(" ".join(str(exc).split())) from None
    except ForageError as exc:  # the model server does not answer, or the run has no documents
        raise (Unavailable if exc.retryable else Conflict)(describe(exc)) from None
    return AskOut.model_validate(result.as_dict())


@router.get("/api/runs/{run_id}/asks", response_model=list[AskOut], dependencies=auth,
            summary="The questions asked of the run so far and their answers (asks.jsonl), first first")
async def asks(run_id: str, runs: RunManager = Manager) -> list[AskOut]:
    from actors.steps.tools.ask import read_asks

    rundir = runs.rundir(run_id)
    out = []
    for record in read_asks(rundir.asks_jsonl):
        try:
            out.append(AskOut.model_validate(record))
        except ValidationError:
            continue  # a line another version wrote differently: skipped, never a 500
    return out


def _load_chunk(settings: Settings, store_path: Path, chunk_id: str) -> Chunk:
    from infra.store import build_store

    s = settings.updated(store={"path": store_path})
    store = build_store(s)
    found = store.get_chunk(chunk_id)
    if found is None:
        raise NotFound(f"no chunk {chunk_id!r} in the run's store")
    doc = store.get_document(found.doc_id)
    return Chunk(chunk_id=found.chunk_id, doc_id=found.doc_id, title=doc.title if doc else None,
                 section_path=found.section_path, pages=list(found.pages), text=found.text)
