"""`forage mcp`: the library and the runs as a Model Context Protocol server (the official ``mcp`` SDK), for assistants,
editors and agents (Claude Desktop, IDEs) — over stdio, or streamable HTTP on loopback behind the gateway's token.

Tools (each one sentence on failure, never a traceback):

* ``search_library`` — hybrid search of the stored papers (years, a library folder as filters): passages with ids;
* ``get_chunk`` — one stored passage by id, with its sha256: what a citation rests on;
* ``ask`` — a short cited answer from the library (or, with a run_id, from that run's documents only, recorded in
  its asks.jsonl), or "not enough evidence" with what was searched;
* ``list_runs``, ``run_status``, ``read_report`` — the runs, a run's state, its report and evidence;
* ``propose_research`` — derives the requirements and the exact search strings for a query and returns them;
  nothing is searched or downloaded. ``approve_research`` starts that run (optionally with edited requirements):
  the approval rule of the CLI and the dashboard holds for agents too.

Resources: ``forage://runs/{run_id}/report`` (report.md). Runs are held by the gateway's own
:class:`~gateway.runs.RunManager`, so a run an agent starts has every rule a dashboard run has: the model server
is checked first, a library folder must be one the owner allowed (`forage library allow DIR`), ``--offline`` sends
nothing at all (a request cannot turn it off), and the run goes on in this process until it ends.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError

from infra.errors import ForageError, describe, validation_text
from infra.settings import Settings

PLAN_WAIT_S = 900.0  # how long propose_research waits for the model to derive the requirements


def build_mcp(settings: Settings, *, llm: Any | None = None, allowed_libraries: list[Path] | None = None) -> Any:
    """The MCP server (an ``mcp.server.mcpserver.MCPServer``) over ``settings``' store and runs folder."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError

    from gateway.api import Approval, RequirementIn, RunCreate
    from gateway.errors import RunRequestError
    from gateway.runs import RunManager

    settings = settings.updated(run={"runs_dir": settings.run.runs_dir.expanduser().resolve()},
                                store={"path": settings.store.path.expanduser().resolve()})
    manager = RunManager(settings, llm=llm, allowed_libraries=allowed_libraries)
    held: dict[str, Any] = {}  # the store and embedder, built on first use

    @asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        manager.loop = asyncio.get_running_loop()
        try:
            yield
        finally:
            manager.shutdown()

    server: Any = MCPServer(
        "forage", title="Forage", version="0.1", lifespan=lifespan,
        instructions="Forage's local library of papers and its research runs. search_library and ask read the "
                     "stored papers; propose_research shows the requirements and exact search strings a run would "
                     "use, and only approve_research starts it. Cite passages by their chunk_id; get_chunk "
                     "returns the stored text a citation rests on.")

    def fail(exc: BaseException) -> ToolError:
        if isinstance(exc, RunRequestError):
            return ToolError(str(exc))
        if isinstance(exc, ValidationError):
            return ToolError(validation_text(exc))
        return ToolError(describe(exc) if isinstance(exc, ForageError) else " ".join(str(exc).split()))

    def store() -> Any:
        from infra.store import build_store

        if "store" not in held:
            if settings.store.backend == "lancedb" and not Path(settings.store.path).exists():
                raise ToolError(f"no store at {settings.store.path}: run forage research or forage library add first")
            held["store"] = build_store(settings)
        return held["store"]

    def embedder() -> Any:
        from infra.embed import build_embedder

        if "embedder" not in held:
            held["embedder"] = build_embedder(settings)
        return held["embedder"]

    async def blocking(fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(manager.pool, fn, *args)

    def managed(run_id: str) -> Any:
        run = manager.runs.get(run_id)
        if run is None:
            manager.state(run_id)  # 404 for an unknown run, else it is one this server did not start
            raise ToolError(f"run {run_id} was not proposed through this server: approve it where it was started")
        return run

    @server.tool(description="Hybrid (BM25 + embedding) search of the papers in the store. Returns passages "
                             "with chunk_id, document, section and score; cite a passage by its chunk_id.")
    async def search_library(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="What to look for.")],
        k: Annotated[int, Field(ge=1, le=50, description="How many passages.")] = 8,
        year_min: Annotated[int | None, Field(ge=1000, le=2999)] = None,
        year_max: Annotated[int | None, Field(ge=1000, le=2999)] = None,
        library: Annotated[str | None, Field(description="Only papers whose PDF lies under this folder.")] = None,
    ) -> list[dict[str, Any]]:
        from actors.steps.tools.ask import library_filter
        from infra.store import ChunkFilter

        def search() -> list[dict[str, Any]]:
            flt = library_filter(Path(library)) if library else ChunkFilter()
            flt = flt.model_copy(update={"year_min": year_min, "year_max": year_max})
            db = store()
            [vector] = embedder().embed([query])
            hits = db.hybrid(query, vector, k, settings.store.hybrid_alpha, flt)
            titles: dict[str, str] = {}
            out = []
            for hit in hits:
                c = hit.chunk
                if c.doc_id not in titles:
                    doc = db.get_document(c.doc_id)
                    titles[c.doc_id] = doc.title if doc else ""
                out.append({"chunk_id": c.chunk_id, "doc_id": c.doc_id, "title": titles[c.doc_id],
                            "section_path": c.section_path, "pages": list(c.pages), "score": round(hit.score, 4),
                            "text": c.text})
            return out

        try:
            return await blocking(search)
        except (ForageError, ValueError) as exc:
            raise fail(exc) from None

    @server.tool(description="One stored passage by chunk_id: its exact text, document, section, pages and the "
                             "sha256 of its text (what a report's citation rests on).")
    async def get_chunk(
        chunk_id: Annotated[str, Field(min_length=1, max_length=200)],
        run_id: Annotated[str | None, Field(description="Read from this run's store (default: the server's).")] = None,
    ) -> dict[str, Any]:
        from infra.store import build_store

        def read() -> dict[str, Any]:
            if run_id:  # the run's own store; the server's is not opened for it
                state = manager.rundir(run_id).load_state()
                if state is None or not state.store_path:
                    raise ToolError(f"run {run_id} records no store")
                db = build_store(settings.updated(store={"path": state.store_path}))
            else:
                db = store()
            chunk = db.get_chunk(chunk_id)
            if chunk is None:
                raise ToolError(f"no chunk {chunk_id!r} in the store")
            doc = db.get_document(chunk.doc_id)
            return {"chunk_id": chunk.chunk_id, "doc_id": chunk.doc_id, "title": doc.title if doc else None,
                    "section_path": chunk.section_path, "pages": list(chunk.pages), "text": chunk.text,
                    "sha256": hashlib.sha256(chunk.text.encode("utf-8")).hexdigest()}

        try:
            return await blocking(read)
        except (ForageError, RunRequestError, OSError, ValueError) as exc:
            raise fail(exc) from None

    @server.tool(description="A short answer from the papers already stored, citing passages [n] by chunk_id; "
                             "or 'not enough evidence' with what was searched. Nothing is searched online.")
    async def ask(
        question: Annotated[str, Field(min_length=1, max_length=2000)],
        library: Annotated[str | None, Field(description="Only papers whose PDF lies under this folder.")] = None,
        run_id: Annotated[str | None, Field(
            max_length=128, description="Answer only from this run's evidence and sources (its documents, in the "
                                        "store it used); the answer is added to the run's asks.jsonl.")] = None,
    ) -> dict[str, Any]:
        from gateway.cli_ask import ask_run, ask_step

        try:
            if run_id and library:
                raise ValueError("give library or run_id, not both")
            if run_id:
                result, _ = await ask_run(settings, manager.rundir(run_id), question, llm=manager.llm)
            else:
                step, _ = await ask_step(settings, Path(library) if library else None, llm=manager.llm)
                result = await step.ask(question)
        except (ForageError, RunRequestError, ValueError) as exc:
            raise fail(exc) from None
        return result.as_dict()

    @server.tool(description="Every run in the runs folder (and those this server holds), newest first.")
    async def list_runs() -> list[dict[str, Any]]:
        return [item.model_dump(mode="json") for item in manager.list()]

    @server.tool(description="A run's state: status, requirements, coverage, documents, stop reason.")
    async def run_status(run_id: Annotated[str, Field(min_length=1, max_length=100)]) -> dict[str, Any]:
        try:
            return manager.state(run_id).model_dump(mode="json")
        except RunRequestError as exc:
            raise fail(exc) from None

    @server.tool(description="A finished run's report (Markdown, citations [n]) and its evidence: for each [n] "
                             "the chunk_id and the quoted text.")
    async def read_report(run_id: Annotated[str, Field(min_length=1, max_length=100)]) -> dict[str, Any]:
        import json

        try:
            rundir = manager.rundir(run_id)
        except RunRequestError as exc:
            raise fail(exc) from None
        if not rundir.report_md.exists():
            raise ToolError(f"run {run_id} has no report (yet): run_status says where it is")
        evidence = [json.loads(line) for line in rundir.evidence_jsonl.read_text(encoding="utf-8").splitlines()
                    if line.strip()] if rundir.evidence_jsonl.exists() else []
        return {"run_id": run_id, "report": rundir.report_md.read_text(encoding="utf-8"), "evidence": evidence}

    @server.tool(description="Derive the requirements and the exact search strings a research run would use for "
                             "QUERY, and return them with the run_id. Nothing is searched or downloaded: only "
                             "approve_research starts the run.")
    async def propose_research(
        query: Annotated[str, Field(min_length=1, max_length=4000, description="The research question.")],
        library: Annotated[str | None, Field(description="A folder of PDFs the owner allowed (forage library "
                                                         "allow DIR).")] = None,
        preset: Annotated[str | None, Field(pattern="^(quick|standard|deep)$")] = None,
        max_requirements: Annotated[int | None, Field(ge=1, le=10)] = None,
        offline: Annotated[bool | None, Field(description="Send nothing at all (only the library is read).")] = None,
    ) -> dict[str, Any]:
        if settings.net.offline and offline is False:  # `forage mcp --offline`: no request turns it off
            raise ToolError("this server is offline (forage mcp --offline): a run cannot go online")
        try:
            req = RunCreate(query=query, library=library, preset=preset, max_requirements=max_requirements,
                            offline=offline)
            run = await manager.create(req)
            await asyncio.wait_for(run.planned.wait(), PLAN_WAIT_S)
            view = manager.state(run.run_id)
        except (RunRequestError, ValidationError, ForageError) as exc:
            raise fail(exc) from None
        except TimeoutError:
            raise ToolError(f"the requirements were not derived within {PLAN_WAIT_S:g} s") from None
        if view.status != "awaiting_approval" or view.proposal is None:
            raise ToolError(f"run {view.run_id} could not be planned: {view.error or view.status}")
        return {"run_id": view.run_id, "status": view.status, "requirements": view.proposal.requirements,
                "search_queries": view.proposal.search_queries, "offline": run.settings.net.offline,
                "next": "show these to the researcher; approve_research(run_id) starts the run with them"}

    @server.tool(description="Start a proposed run, optionally with edited requirements (the search strings stay "
                             "as proposed). Returns its state; run_status follows it.")
    async def approve_research(
        run_id: Annotated[str, Field(min_length=1, max_length=100)],
        requirements: Annotated[list[Annotated[str, Field(min_length=3, max_length=400)]] | None,
                                Field(max_length=10, description="Replace the requirements (in order).")] = None,
    ) -> dict[str, Any]:
        try:
            run = managed(run_id)
            edited = None if requirements is None else [RequirementIn(id=f"R{i}", text=t)
                                                        for i, t in enumerate(requirements, 1)]
            manager.approve(run, Approval(requirements=edited))
            return manager.state(run_id).model_dump(mode="json")
        except (RunRequestError, ValidationError) as exc:
            raise fail(exc) from None

    @server.resource("forage://runs/{run_id}/report", mime_type="text/markdown",
                     description="A run's report.md (citations [n]; read_report adds the evidence).")
    def report(run_id: str) -> str:
        try:
            path = manager.rundir(run_id).report_md
        except RunRequestError as exc:
            raise ResourceError(str(exc)) from None
        if not path.exists():
            raise ResourceError(f"run {run_id} has no report (yet)")
        return path.read_text(encoding="utf-8")

    server.forage_manager = manager
    return server


def http_app(server: Any, token: str) -> Any:
    """The streamable-HTTP app of ``server`` behind the gateway's token (every request: ``Authorization: Bearer``),
    with the SDK's DNS-rebinding protection for a loopback host."""
    from starlette.responses import JSONResponse

    from gateway.security import same_secret

    inner = server.streamable_http_app(host="127.0.0.1")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            given = headers.get("authorization", "")
            if not (given.startswith("Bearer ") and same_secret(given[7:].strip(), token)):
                response = JSONResponse({"error": "missing or wrong token: send Authorization: Bearer TOKEN (the "
                                                  "owner's token file: $XDG_CONFIG_HOME/forage/gateway-token)"},
                                        status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await inner(scope, receive, send)

    return app


def serve_mcp(settings: Settings, *, http: bool = False, port: int = 8766, say: Any = print) -> None:
    """Run the MCP server (blocking): stdio, or streamable HTTP on 127.0.0.1:``port`` behind the token."""
    from infra import privacy

    privacy.apply()
    server = build_mcp(settings)
    if not http:
        server.run("stdio")
        return
    import socket

    import uvicorn

    from gateway.api import load_or_create_token

    token = load_or_create_token()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))  # loopback only: over the network an assistant uses the gateway
    sock.listen(128)
    say(f"MCP over streamable HTTP on http://127.0.0.1:{port}/mcp (Authorization: Bearer <the token in "
        f"$XDG_CONFIG_HOME/forage/gateway-token>)")
    uvicorn.Server(uvicorn.Config(http_app(server, token), log_level="warning")).run(sockets=[sock])
