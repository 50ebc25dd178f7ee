"""IngestStep.ingest_texts writes a batch in one store write, and falls back to one write per
document when the batch write fails (so only the bad document fails)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.steps.ingest.documents import TextDocument
from actors.steps.ingest.step import IngestStep
from infra.errors import StoreError
from infra.settings import Settings
from infra.store.lancedb import LanceStore
from infra.embed.ollama import OllamaEmbedder
from tests.factories import WHEAT_ABSTRACT as ABSTRACT
from tests.factories import WHEAT_TEXT_TITLE as TITLE
from tests.loopback_ollama import LoopbackOllama, nomic_ollama


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    with nomic_ollama(monkeypatch) as srv:
        yield srv


class CountingStore(LanceStore):
    """The real LanceStore, counting writes; ``refuse`` names a key whose write fails."""

    def __init__(self, path: Path, refuse: str | None = None) -> None:
        super().__init__(path, dim=768)
        self.refuse = refuse
        self.batches: list[int] = []
        self.singles = 0

    def upsert_documents(self, items: Sequence) -> None:
        self.batches.append(len(items))
        if any(item[0].key == self.refuse for item in items):
            raise StoreError(f"refused {self.refuse}", retryable=True)
        super().upsert_documents(items)

    def upsert_document(self, doc, chunks, vectors, windows=None) -> None:  # type: ignore[no-untyped-def]
        self.singles += 1
        if doc.key == self.refuse:
            raise StoreError(f"refused {self.refuse}", retryable=True)
        LanceStore.upsert_documents(self, [(doc, chunks, vectors, windows)])


def _step(store: LanceStore, server: LoopbackOllama) -> IngestStep:  # noqa: F811
    return IngestStep(Settings.load(embed={"backend": "ollama"}), store, OllamaEmbedder(host=server.url, timeout_s=10))


def _docs(n: int) -> list[TextDocument]:
    return [TextDocument(key=f"k{i}", title=f"{TITLE} {i}", text=f"{ABSTRACT} Case {i}.") for i in range(n)]


def test_a_batch_is_one_store_write(tmp_path: Path, server: LoopbackOllama) -> None:  # noqa: F811
    store = CountingStore(tmp_path / "store")
    results = _step(store, server).ingest_texts("run-1", _docs(4))
    assert [r.status for r in results] == ["stored"] * 4
    assert store.batches == [4] and store.singles == 0
    assert sorted(d.key for d in store.list_documents()) == ["k0", "k1", "k2", "k3"]
    assert all(store.count_chunks(r.doc_id) == r.n_chunks for r in results)


def test_a_failed_batch_write_fails_only_the_bad_document(tmp_path: Path, server: LoopbackOllama) -> None:  # noqa: F811
    store = CountingStore(tmp_path / "store", refuse="k2")
    results = _step(store, server).ingest_texts("run-1", _docs(4))
    assert [r.status for r in results] == ["stored", "stored", "failed", "stored"]
    assert results[2].reason == "refused k2" and results[2].retryable is True
    assert store.batches == [4] and store.singles == 4
    assert sorted(d.key for d in store.list_documents()) == ["k0", "k1", "k3"]
