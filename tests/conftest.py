"""Shared fixtures: one privacy-safe Ray cluster per test session, paths to the shared test data."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


#: folders whose every test drives real runs, real clusters or the 16 real papers
SLOW_FOLDERS = ("e2e/", "cluster/", "real/")
#: fixtures that make a test slow wherever it is: the session's Ray (actors, real runs on it) and the
#: session's ingest cache (real papers parsed and embedded)
SLOW_FIXTURES = {"ray_cluster", "ingest_cache"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fast tier (``pytest -m "not slow"``) is the unit and contract tests: every test in
    SLOW_FOLDERS, or needing a SLOW_FIXTURES fixture (directly or through another fixture), is marked
    ``slow`` too, next to the tests that say so themselves (real models, many PDFs)."""
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(REPO / "tests").as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if rel.startswith(SLOW_FOLDERS) or fixtures & SLOW_FIXTURES or item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _forbid_real_llm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests cannot reach a real model (Ollama or a GGUF) unless marked ``real_llm``."""
    from tests.loopback_ollama import install_real_llm_guard

    if request.node.get_closest_marker("real_llm") is None:
        install_real_llm_guard(monkeypatch)


@pytest.fixture(autouse=True, scope="session")
def _offline_by_default() -> Iterator[None]:
    """Settings built in a test are offline unless the test says ``net={"offline": False}`` (and then it
    points the sources at a loopback server): no test can reach the real OpenAlex, arXiv or Zotero.
    Session-scoped, so module- and session-scoped fixtures that build Settings are offline too."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FORAGE_NET__OFFLINE", "true")
        yield


@pytest.fixture(autouse=True, scope="session")
def _own_config_dir(tmp_path_factory) -> Iterator[None]:
    """The session's own ``$XDG_CONFIG_HOME``: no test reads or writes the user's gateway token or library
    allow-list (gateway/api.py, gateway/allowed.py); child processes inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
        yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.exists():
        pytest.skip(f"shared test data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_pdfs(shared_data: Path) -> list[Path]:
    pdfs = sorted((shared_data / "pdfs").glob("*.pdf"))
    if len(pdfs) != 16:
        pytest.skip(f"expected the 16 shared PDFs in {shared_data / 'pdfs'}, found {len(pdfs)}")
    return pdfs


@pytest.fixture(scope="session")
def ingest_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ingest cache (``ingest.cache_dir``: parsed PDFs and chunk vectors, by content) for the session's
    real runs: a shared paper is parsed and embedded once per session, by whichever test ingests it first,
    and every later run still stores it in its own store. Tests about parsing or embedding themselves (a
    killed or hung Ingestor) do not use it."""
    return tmp_path_factory.mktemp("ingest-cache")


@pytest.fixture(scope="session")
def minilm():
    """The session's MiniLM embedder (tests/minilm.py): its model is loaded once for every test that embeds."""
    from tests.minilm import shared_minilm

    return shared_minilm()


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray for the whole session (Ray takes ~6 s to start): loopback only, no usage stats."""
    import ray

    from infra.ray_runtime import start_ray

    # two llm_slot units, as ``ray.llm_slots = 2`` declares: the LLM endpoint tests use them, nothing else asks
    start_ray(num_cpus=2, resources={"llm_slot": 2})
    yield ray
    ray.shutdown()
