"""Shared fixtures: one privacy-safe Ray cluster per test session, paths to the shared test data."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.early import EARLY_STARTS

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
    ``slow`` too, next to the tests that say so themselves (real models, many PDFs).

    Tests marked ``last`` run after all the others, in their own order: those that read what an early start
    (:func:`_early_starts`) did beside the rest of the session, and checks that something ended by itself."""
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(REPO / "tests").as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if rel.startswith(SLOW_FOLDERS) or fixtures & SLOW_FIXTURES or item.get_closest_marker("ray"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("last") is not None)  # stable: order kept otherwise


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


DVT_PAPER = "dvt_prophylaxis_trauma_bmc2010.pdf"


@pytest.fixture
def dvt_library(shared_pdfs: list[Path], tmp_path: Path) -> Path:
    """A library folder holding one shared paper (thromboprophylaxis in trauma, :data:`DVT_PAPER`), linked."""
    library = tmp_path / "library"
    library.mkdir()
    (library / DVT_PAPER).symlink_to(next(p for p in shared_pdfs if p.name == DVT_PAPER))
    return library


@pytest.fixture(scope="session")
def ingest_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ingest cache (``ingest.cache_dir``: parsed PDFs and chunk vectors, by content) for the session's
    real runs: a shared paper is parsed and embedded once per session, by whichever test ingests it first,
    and every later run still stores it in its own store. Tests about parsing or embedding themselves (a
    killed or hung Ingestor) do not use it. Files are written whole (temp file + rename), so runs that
    ingest the same paper at the same time each read a whole entry or none."""
    return tmp_path_factory.mktemp("ingest-cache")


@pytest.fixture(autouse=True, scope="session")
def _early_starts(request: pytest.FixtureRequest, _offline_by_default: None,
                  _own_config_dir: None) -> Iterator[None]:
    """Long real work starts when the session starts, in its own process, and runs beside the other tests: the
    openai-backend run (its 135M model mostly keeps one core busy) and the research run's 16 papers parsed and
    embedded into the session's ingest cache at the idle CPU priority (tests/e2e/test_research_run.py). A test module that defines
    ``early_start(request)`` has it called here when any of its tests is selected (``request`` is this session
    fixture's: ``request.getfixturevalue`` gives it session fixtures such as ``ingest_cache`` or
    ``ray_cluster``); its fixture reads the result with :func:`tests.early.early_started`, and its tests are
    marked ``last``, so they read it after the rest of the session. What an early start returns may have a
    ``stop()``, called at the session's end. It starts after the session's environment is set (offline, its own
    config folder): children inherit it.

    Not the demo: under ``strace -f --seccomp-bpf`` beside the other tests it hung once (a thread it started
    never ran; strace 6.1), so it runs in its own turn, as before."""
    started: dict[str, Any] = {}
    request.config.stash[EARLY_STARTS] = started
    modules = {item.module for item in request.session.items if getattr(item, "module", None) is not None}
    for module in sorted(modules, key=lambda m: m.__name__):
        start: Callable[..., Any] | None = getattr(module, "early_start", None)
        if start is None:
            continue
        try:
            started[module.__name__] = start(request)
        except (Exception, pytest.skip.Exception) as exc:  # the module's fixture re-raises it, a skip as a skip
            started[module.__name__] = exc
    yield
    for handle in started.values():
        stop = getattr(handle, "stop", None)
        if callable(stop):
            stop()


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
