"""The layers are contracts, not hope: import-linter checks pyproject.toml's [tool.importlinter] contracts
(messages import nothing of Forage; step code imports no Ray or FastAPI; infra knows no actor or gateway; the
gateway is the top layer; the typed client needs no FastAPI; the runs, the session and the MCP server need no FastAPI;
actors import no FastAPI)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold(monkeypatch, capsys) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "11 kept, 0 broken" in out


#: where Forage's own code imports Forage's modules inside functions, and why: nowhere else (the test below)
LAZY_IMPORTS = {
    # a command imports what it runs: `forage --help` starts in 0.3 s, 1.8 s with every command's modules loaded
    "gateway/cli.py": "commands", "gateway/cli_ask.py": "commands", "gateway/cli_eval.py": "commands",
    "gateway/cli_library.py": "commands", "gateway/cli_metadata.py": "commands", "gateway/cli_privacy.py": "commands",
    "gateway/cli_report.py": "commands",
    "gateway/cli_runs.py": "commands", "gateway/cli_serve.py": "commands", "gateway/cli_store.py": "commands",
    "gateway/eval_suite.py": "commands",
    # the gateway loads Ray, a store backend or a model client when a request needs one, not at start
    "gateway/server.py": "on request", "gateway/mcp_server.py": "on request", "gateway/session.py": "on request",
    "gateway/runs.py": "on request", "gateway/routes/runs.py": "on request", "gateway/routes/reports.py": "on request",
    "gateway/forget.py": "on request",
    # an actor builds its ports (store, embedder, parser, model client) in its own process on first use: the
    # driver that creates the actor never loads them; a crew makes Ray actors of its classes only when it starts
    "actors/ray_crew.py": "actor", "actors/reservation.py": "actor", "actors/ingestor_pool.py": "actor",
    "actors/forager.py": "actor", "actors/ingestor.py": "actor",
    "actors/searcher.py": "actor", "actors/writer.py": "actor", "actors/llm_endpoint.py": "actor",
    "actors/options.py": "actor",
    # a backend's dependencies (torch, lancedb, weaviate-client, marker, ollama, openai, matplotlib) load only
    # when it is chosen
    "infra/embed/__init__.py": "backend", "infra/llm/__init__.py": "backend", "infra/pdf/__init__.py": "backend",
    "infra/store/__init__.py": "backend", "infra/pdf/marker.py": "backend",
    "actors/steps/ingest/step.py": "backend", "actors/steps/write/step.py": "backend",
    "actors/steps/evaluation/evidence.py": "backend", "actors/steps/evaluation/retrieval.py": "backend",
}


def lazy_imports() -> dict[str, set[str]]:
    """file -> Forage modules it imports inside functions (tests, benches and examples aside)."""
    found: dict[str, set[str]] = {}
    for package in ("actors", "gateway", "infra", "messages"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for func in ast.walk(tree):
                if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(func):
                    module = (node.module if isinstance(node, ast.ImportFrom) and node.level == 0
                              else node.names[0].name if isinstance(node, ast.Import) else None)
                    if module and module.split(".")[0] in ("actors", "gateway", "infra", "messages"):
                        found.setdefault(path.relative_to(REPO).as_posix(), set()).add(module)
    return found


def test_forage_modules_are_imported_inside_functions_only_where_a_reason_is_written() -> None:
    found = lazy_imports()
    unexplained = {path: sorted(mods) for path, mods in found.items() if path not in LAZY_IMPORTS}
    assert unexplained == {}, "import these at the top of the module, or add the file and its reason to LAZY_IMPORTS"
    stale = sorted(set(LAZY_IMPORTS) - set(found))
    assert stale == [], "these files import nothing inside functions any more: drop them from LAZY_IMPORTS"
