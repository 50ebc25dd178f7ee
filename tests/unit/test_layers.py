"""The layers are contracts, not hope: import-linter checks pyproject.toml's [tool.importlinter] contracts
(messages import nothing of Forage; step code imports no Ray or FastAPI; infra knows no actor or gateway; the
gateway is the top layer; the typed client needs no FastAPI)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_contracts_hold(monkeypatch, capsys) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "7 kept, 0 broken" in out
