"""A paper whose PDF could not be had is still ingested from its title and abstract, flagged abstract_only."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.steps.events import RecordingEmit
from actors.steps.ingest.step import IngestStep
from infra.embed.ollama import OllamaEmbedder
from infra.settings import Settings
from infra.store.base import ChunkFilter
from infra.store.lancedb import LanceStore
from messages.ingest import IngestRequest
from messages.search import Candidate
from tests.loopback_ollama import LoopbackOllama

ABSTRACT = ("Microplastics ingested by zooplankton move up marine food webs: fish that eat contaminated prey "
            "carried three times more particles than controls in a 12-week feeding trial.")


@pytest.fixture
def step(tmp_path: Path):
    with LoopbackOllama(models=("nomic-embed-text",), embed_dim=768) as srv:
        settings = Settings.load(embed={"backend": "ollama"}, store={"path": str(tmp_path / "store")})
        store = LanceStore(tmp_path / "store", dim=768)
        yield IngestStep(settings, store, OllamaEmbedder(host=srv.url, timeout_s=10), None, emit=RecordingEmit()), store


def candidate(**kw) -> Candidate:
    base = dict(key="doi:10.1/mp", source="openalex", doi="10.1/mp", title="Microplastics in marine food webs",
                authors=("Doe, J.",), year=2021, abstract=ABSTRACT, abstract_only=True,
                download_failures=("https://pub.example/mp.pdf: answered HTML, not a PDF",))
    return Candidate(**{**base, **kw})


def test_abstract_only_candidate_is_stored_and_searchable(step):
    ingest, store = step
    result = ingest.ingest(IngestRequest(run_id="r1", candidate=candidate()))
    assert result.status == "stored", result.reason
    assert result.flags == ("abstract_only",) and result.parser == "text" and result.n_chunks == 1
    doc = store.get_document(result.doc_id)
    assert doc.title == "Microplastics in marine food webs" and doc.year == 2021 and doc.flags == ("abstract_only",)
    [chunk] = store.chunks(ChunkFilter(doc_ids=(result.doc_id,)))
    assert chunk.text.strip() == ABSTRACT  # citations quote the abstract itself
    # a second offer of the same paper is known
    again = ingest.ingest(IngestRequest(run_id="r1", candidate=candidate()))
    assert again.status == "skipped"


def test_without_pdf_or_abstract_the_reason_is_clear(step):
    ingest, _ = step
    result = ingest.ingest(IngestRequest(run_id="r1", candidate=candidate(abstract=None)))
    assert result.status == "failed" and "no local file" in result.reason and not result.retryable
