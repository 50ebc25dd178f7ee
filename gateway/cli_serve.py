"""`forage serve`: the gateway and dashboard (gateway/server.py); `forage mcp`: the MCP server (mcp_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway import cli_base as base
from infra.settings import Settings


def serve(
    host: Annotated[str, typer.Option(help="Address to bind. Every address requires the token, generated on "
                                      "first start and kept 0600 in $XDG_CONFIG_HOME/forage/gateway-token.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 8765,
    runs_dir: Annotated[Path | None, typer.Option(help="Runs folder (default: settings).")] = None,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
    no_token: Annotated[bool, typer.Option("--no-token", help="Loopback only: serve without the token, so ANY user "
                                           "of this machine can read every run's query and report and start runs "
                                           "(use only on a single-user machine).")] = False,
) -> None:
    """Serve the REST API, the run event WebSocket and the dashboard (http://HOST:PORT/)."""
    from gateway.server import serve as run_server

    settings = Settings.load()
    changes = {}
    if runs_dir is not None:
        changes["run"] = {"runs_dir": runs_dir}
    if store is not None:
        changes["store"] = {"path": store}
    if changes:
        settings = settings.updated(**changes)
    try:
        run_server(settings, host=host, port=port, no_token=no_token, say=base.console.print)
    except ValueError as exc:
        from rich.markup import escape

        base.console.print(f"[red]{escape(str(exc))}[/red]")  # the host is the caller's text, not markup
        raise typer.Exit(2) from None


def mcp(
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 (behind the gateway's "
                                       "token) instead of stdio.")] = False,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port for --http.")] = 8766,
    offline: Annotated[bool, typer.Option("--offline", help="Runs started through MCP send nothing at all (only "
                                          "allowed library folders are read); no request can turn it off.")] = False,
    runs_dir: Annotated[Path | None, typer.Option(help="Runs folder (default: settings).")] = None,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Serve the library and the runs to an MCP client (Claude Desktop, an IDE, an agent): search, ask, read reports,
    and propose a research run that starts only once approved. Stdio by default (the client starts this command)."""
    from gateway.mcp_server import serve_mcp

    changes: dict[str, dict[str, object]] = {}
    if runs_dir is not None:
        changes["run"] = {"runs_dir": runs_dir}
    if store is not None:
        changes["store"] = {"path": store}
    if offline:
        changes["net"] = {"offline": True}
    settings = Settings.load()
    settings = settings.updated(**changes) if changes else settings
    # stdio carries the protocol on stdout: anything said goes to stderr
    serve_mcp(settings, http=http, port=port, say=base.err.print)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("mcp")(mcp)
