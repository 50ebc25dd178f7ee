"""Fixtures of the store contract: every test that takes ``store`` runs on each Store implementation (LanceDB in a
temporary folder; Weaviate where WEAVIATE_URL names a live server, else skipped with that reason)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from infra.store.base import Store
from tests.factories import open_store


@pytest.fixture(params=["lancedb", "weaviate"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(kind, location) of a fresh, empty store."""
    if request.param == "weaviate":
        if not os.environ.get("WEAVIATE_URL"):
            pytest.skip("needs a live Weaviate: set WEAVIATE_URL (and WEAVIATE_GRPC_PORT if not 50051)")
    return request.param, str(tmp_path / "store")


@pytest.fixture(autouse=True)
def _drop_weaviate_library(request: pytest.FixtureRequest) -> Any:
    """Remove the test's Weaviate collections afterwards (a live server outlives the test)."""
    yield
    spec = request.node.funcargs.get("store_spec")
    if spec and spec[0] == "weaviate":
        store = open_store(*spec)
        client = store._connect()  # type: ignore[attr-defined]
        for name in (store.chunks_name, store.docs_name):  # type: ignore[attr-defined]
            client.collections.delete(name)
        store.close()  # type: ignore[attr-defined]


@pytest.fixture
def store(store_spec: tuple[str, str]) -> Store:
    return open_store(*store_spec)
