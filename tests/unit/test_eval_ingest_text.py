"""IngestStep.ingest_text / ingest_texts: documents given as text take the PDF path from the outline
on (chunks, context lines, embeddings, store.upsert_document), with the chunks of a whole batch
embedded in one embedder call. Real LanceStore in tmp_path; embeddings from OllamaEmbedder against
the loopback Ollama server, which records exactly what was embedded and in how many calls."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from actors.steps.events import RecordingEmit
from actors.steps.text import sentence_windows
from actors.steps.ingest.documents import TextDocument, text_markdown
from actors.steps.ingest.step import IngestStep
from infra.embed.ollama import OllamaEmbedder
from infra.settings import Settings
from infra.store.base import ChunkFilter
from infra.store.lancedb import LanceStore
from messages.ingest import IngestRequest
from messages.search import Candidate
from messages.status import Stage
from tests.factories import WHEAT_ABSTRACT, WHEAT_TEXT_TITLE
from tests.loopback_ollama import LoopbackOllama, closed_loopback_url, install_real_llm_guard, nomic_ollama

TITLE, ABSTRACT = WHEAT_TEXT_TITLE, WHEAT_ABSTRACT


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    with nomic_ollama(monkeypatch) as srv:
        yield srv


@pytest.fixture
def setup(tmp_path: Path, server: LoopbackOllama):
    settings = Settings.load(embed={"backend": "ollama"})
    store = LanceStore(tmp_path / "store", dim=768)
    emit = RecordingEmit()
    return IngestStep(settings, store, OllamaEmbedder(host=server.url, timeout_s=10), emit=emit), store, emit


def embed_calls(server: LoopbackOllama) -> list[list[str]]:
    return [list(r.body["input"]) for r in server.requests if r.path == "/api/embed"]


def test_text_document_is_stored_like_a_parsed_pdf(setup, server: LoopbackOllama) -> None:
    step, store, emit = setup
    result = step.ingest_text("run-1", "beir:mini:7", TITLE, ABSTRACT, authors=["A. Author"], year=2020,
                              origin="mini:7")
    markdown = text_markdown(TITLE, ABSTRACT)
    assert markdown == f"# {TITLE}\n\n{ABSTRACT}\n"
    assert result.status == "stored" and result.parser == "text" and result.path is None
    assert result.doc_id == hashlib.sha256(markdown.encode()).hexdigest()
    doc = store.get_document(result.doc_id)
    assert (doc.key, doc.title, doc.authors, doc.year, doc.origin, doc.parser) == (
        "beir:mini:7", TITLE, ("A. Author",), 2020, "mini:7", "text")
    assert doc.markdown == markdown and doc.abstract == ABSTRACT and doc.sections == (TITLE, "Abstract")
    chunks = store.chunks(ChunkFilter(doc_ids=(result.doc_id,), exclude_kinds=()), limit=100)
    assert len(chunks) == result.n_chunks == doc.n_chunks >= 1
    for chunk in chunks:  # the same invariants as PDF chunks: exact slices, within the window, no pages
        assert markdown[chunk.char_start:chunk.char_end] == chunk.text and chunk.pages == ()
        assert chunk.token_count <= step.max_tokens and chunk.section_kind == "abstract"
        assert TITLE not in chunk.text  # the title heading is not chunk text ...
    [inputs] = embed_calls(server)  # ... it reaches the embedder through the context line
    assert inputs[:len(chunks)] == [f"{TITLE} — Abstract\n{c.text}" for c in chunks]
    # then each chunk's sentence windows (embed.window_sentences, 2 by default), with the same context line
    assert inputs[len(chunks):] == [f"{TITLE} — Abstract\n{w}" for c in chunks for w in sentence_windows(c.text, 2)]
    assert len(inputs) > len(chunks)
    [event] = [e for e in emit.events if e.kind != "progress"]
    assert (event.stage, event.kind, event.payload["status"]) == (Stage.INGEST, "document", "stored")
    assert [e.payload["phase"] for e in emit.events if e.kind == "progress"] == ["chunking", "embedding", "stored"]
    assert {"chunk_s", "embed_s", "store_s"} <= set(event.payload)


def test_a_batch_is_embedded_in_one_call_and_stored_per_document(setup, server: LoopbackOllama) -> None:
    step, store, _ = setup
    docs = [TextDocument(key=f"beir:mini:{i}", title=f"Paper {i}", text=f"Finding number {i}. " * (10 + i))
            for i in range(5)]
    results = step.ingest_texts("run-1", docs)
    assert [r.status for r in results] == ["stored"] * 5 and [r.key for r in results] == [d.key for d in docs]
    [inputs] = embed_calls(server)
    chunks = store.chunks(ChunkFilter(exclude_kinds=()), limit=1000)
    assert len(chunks) == sum(r.n_chunks for r in results) == store.count_chunks()
    assert len(inputs) == len(chunks) + sum(len(sentence_windows(c.text, 2)) for c in chunks)  # and their windows
    assert sorted(d.key for d in store.list_documents()) == sorted(d.key for d in docs)
    for r in results:
        assert store.count_chunks(r.doc_id) == r.n_chunks


def test_known_repeated_and_changed_text(setup, server: LoopbackOllama) -> None:
    step, store, _ = setup
    first = step.ingest_text("run-1", "k1", TITLE, ABSTRACT)
    calls = len(embed_calls(server))
    again = step.ingest_texts("run-1", [TextDocument("k1", TITLE, ABSTRACT), TextDocument("k2", TITLE, ABSTRACT)])
    assert [(r.status, r.doc_id, r.n_chunks) for r in again] == [("skipped", first.doc_id, first.n_chunks)] * 2
    assert again[0].reason is None and again[1].reason == "same text already stored as k1"
    assert len(embed_calls(server)) == calls  # nothing embedded again

    batch = step.ingest_texts("run-1", [TextDocument("k3", "New", "Fresh text."),
                                        TextDocument("k4", "New", "Fresh text.")])  # same content twice, new
    assert [r.status for r in batch] == ["stored", "skipped"] and batch[1].doc_id == batch[0].doc_id
    assert batch[1].reason == "same text already stored as k3" and batch[1].n_chunks == batch[0].n_chunks

    changed = step.ingest_text("run-1", "k1", TITLE, ABSTRACT + " Drought makes it worse.")
    assert changed.status == "stored" and changed.reason == f"replaces {first.doc_id[:16]} (text changed)"
    assert store.get_document(first.doc_id) is None and store.count_chunks(first.doc_id) == 0
    assert store.document_by_key("k1").doc_id == changed.doc_id


def test_bad_documents_fail_alone(setup) -> None:
    step, store, emit = setup
    results = step.ingest_texts("run-1", [TextDocument("k1", "Empty", "  \n "), TextDocument("k2", TITLE, ABSTRACT),
                                          TextDocument(" ", "No key", "text")])
    assert [r.status for r in results] == ["failed", "stored", "failed"]
    assert results[0].reason == "k1: empty text, nothing to index" and results[0].retryable is False
    assert "needs a key" in results[2].reason
    assert [d.key for d in store.list_documents()] == ["k2"]
    assert [e.kind for e in emit.events if e.kind != "progress"] == ["failed", "document", "failed"]


def test_untitled_text_is_titled_by_its_origin(setup) -> None:
    step, store, _ = setup
    result = step.ingest_text("run-1", "beir:mini:9", "", "A short note without a title.", origin="mini:9")
    doc = store.get_document(result.doc_id)
    assert result.status == "stored" and doc.title == "mini:9" and doc.markdown == "A short note without a title.\n"


def test_embedder_down_fails_the_batch_retryably_and_stores_nothing(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    install_real_llm_guard(monkeypatch)
    store = LanceStore(tmp_path / "store", dim=768)
    step = IngestStep(Settings.load(embed={"backend": "ollama"}), store,
                      OllamaEmbedder(host=closed_loopback_url(), retries=0))
    results = step.ingest_texts("run-1", [TextDocument("k1", TITLE, ABSTRACT), TextDocument("k2", "B", "Other.")])
    assert all(r.status == "failed" and r.retryable and "not reachable" in r.reason for r in results)
    assert store.list_documents() == [] and store.count_chunks() == 0


def test_a_text_only_step_refuses_pdfs_with_a_reason(setup, tmp_path: Path) -> None:
    step, _, _ = setup
    pdf = tmp_path / "paper.pdf"
    pdf.write_bytes(b"%PDF-1.7\n")
    result = step.ingest(IngestRequest(run_id="run-1", candidate=Candidate(key=f"file:{pdf}", path=str(pdf))))
    assert result.status == "failed" and "no PDF parser" in result.reason and result.retryable is False


def test_sentence_windows_are_embedded_only_when_asked_and_kept(tmp_path: Path, server: LoopbackOllama) -> None:
    """``embed.window_sentences=0`` embeds chunks only, and so does a store that keeps no windows (Weaviate):
    their vectors would be work for nothing."""

    class NoWindows(LanceStore):
        keeps_windows = False

    for name, settings, store in (
            ("off", Settings.load(embed={"backend": "ollama", "window_sentences": 0}), LanceStore),
            ("kept-nowhere", Settings.load(embed={"backend": "ollama"}), NoWindows)):
        before = len(embed_calls(server))
        step = IngestStep(settings, store(tmp_path / name, dim=768), OllamaEmbedder(host=server.url, timeout_s=10))
        result = step.ingest_text("run-1", f"beir:mini:{name}", TITLE, ABSTRACT)
        [inputs] = embed_calls(server)[before:]
        assert result.status == "stored" and len(inputs) == result.n_chunks, name
    # three sentences per window: fewer windows than two
    step = IngestStep(Settings.load(embed={"backend": "ollama", "window_sentences": 3}),
                      LanceStore(tmp_path / "three", dim=768), OllamaEmbedder(host=server.url, timeout_s=10))
    before = len(embed_calls(server))
    result = step.ingest_text("run-1", "beir:mini:three", TITLE, ABSTRACT)
    [inputs] = embed_calls(server)[before:]
    chunks = step.store.chunks(ChunkFilter(doc_ids=(result.doc_id,), exclude_kinds=()), limit=100)
    assert inputs[len(chunks):] == [f"{TITLE} — Abstract\n{w}" for c in chunks for w in sentence_windows(c.text, 3)]
