"""Contextual retrieval (ingest.contextual): an LLM's one-to-two-sentence context per chunk goes into
the embedder's input and BM25's search text, never into the chunk text; batched; cached by chunk
hash next to the store; a bad answer leaves chunks without context and the document is stored.

Real parts: IngestStep, LanceStore in tmp_path, the Ollama embedding client against the loopback
Ollama server (what it was sent is what the embedder read). The LLM is a FunctionLLM / ScriptedLLM
going through the real validation and retry path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from actors.ingestor import Ingestor
from actors.steps.ingest.chunking import CHUNK_CONTEXT_TOKENS, CONTEXT_TOKENS, SPECIAL_TOKENS, window_for
from actors.steps.ingest.contextual import (ChunkContexts, ContextCache, Contextualizer, cache_path, chunk_hash,
                                     clean_context)
from actors.steps.ingest.documents import text_markdown
from actors.steps.ingest.step import IngestStep
from infra.embed.ollama import OllamaEmbedder
from infra.llm.base import ChatMessage
from infra.llm.fakes import FunctionLLM, ScriptedLLM
from infra.settings import Settings
from infra.store.base import ChunkFilter, ChunkRecord
from infra.store.lancedb import LanceStore
from messages.ingest import IngestRequest
from messages.search import Candidate
from tests.loopback_ollama import LoopbackOllama, install_real_llm_guard
from tests.factories import wheat_pdf

NOMIC = "nomic-embed-text"
SENT = "Households in the northern districts were surveyed about their water use every season. "
BODY = (f"## Abstract\n\nWe study household water use. {SENT * 3}\n\n## 1 Methods\n\n{SENT * 12}\n\n"
        f"## 2 Results\n\n{SENT * 12}\n\n## References\n\n1. A. Author. A cited paper. 2001.\n")
_PASSAGE = re.compile(r"^\[(\d+)\] Section: (.*)$", re.MULTILINE)


def contexts_for(messages: list[ChatMessage], _schema: object) -> dict:
    """A well-behaved model: one context per numbered passage, naming a word the text never has."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    return {"contexts": [{"passage": int(n), "context": f"Zebrafish field study, part {path}: passage {n}."}
                         for n, path in _PASSAGE.findall(user)]}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    install_real_llm_guard(monkeypatch)
    with LoopbackOllama(models=(NOMIC,), embed_dim=768) as srv:
        yield srv


def make_step(tmp_path: Path, server: LoopbackOllama, llm: object | None, *, contextual: bool = True,
              batch: int = 8, store: str = "store") -> tuple[IngestStep, LanceStore, Settings]:
    settings = Settings.load(embed={"backend": "ollama"}, store={"path": str(tmp_path / store)},
                             ingest={"contextual": contextual, "contextual_batch": batch})
    lance = LanceStore(tmp_path / store, dim=768)
    step = IngestStep(settings, lance, OllamaEmbedder(host=server.url, timeout_s=10), llm=llm)  # type: ignore[arg-type]
    return step, lance, settings


def embedded_inputs(server: LoopbackOllama) -> list[str]:
    return [text for r in server.requests if r.path == "/api/embed" for text in r.body["input"]]


def stored_chunks(store: LanceStore, doc_id: str) -> list[ChunkRecord]:
    return store.chunks(ChunkFilter(doc_ids=(doc_id,), exclude_kinds=()), limit=1000)


# ---------------------------------------------------------------- through the ingest step


def test_context_goes_to_embedding_and_bm25_but_not_into_the_text(tmp_path: Path, server: LoopbackOllama) -> None:
    llm = FunctionLLM(contexts_for)
    step, store, _ = make_step(tmp_path, server, llm)
    result = step.ingest_text("run-1", "text:water", "Household Water Use", BODY)
    assert result.status == "stored" and not any(f.startswith("context_missing") for f in result.flags)

    markdown = text_markdown("Household Water Use", BODY)
    chunks = stored_chunks(store, result.doc_id)  # type: ignore[arg-type]
    body = [c for c in chunks if c.section_kind != "references"]
    assert len(body) >= 3
    for chunk in chunks:
        assert markdown[chunk.char_start:chunk.char_end] == chunk.text  # citations quote the original
        assert "Zebrafish" not in chunk.text
    for chunk in body:
        assert chunk.context.startswith("Zebrafish field study") and chunk.section_path in chunk.context
    assert all(c.context == "" for c in chunks if c.section_kind == "references")  # never asked for

    sent = embedded_inputs(server)
    for chunk in body:  # the embedder read context line, then the chunk's context, then its text
        assert any(text.endswith(chunk.context + "\n" + chunk.text) for text in sent), chunk.chunk_id
    hits = store.bm25("zebrafish", 20)  # the word is only in the contexts
    assert {h.chunk.chunk_id for h in hits} == {c.chunk_id for c in body}
    assert llm.calls == -(-len(body) // 8)  # batched: one call per 8 chunks


def test_pdf_chunks_get_contexts_too(tmp_path: Path, server: LoopbackOllama) -> None:
    from infra.pdf.pymupdf import PyMuPDFParser

    llm = FunctionLLM(contexts_for)
    settings = Settings.load(embed={"backend": "ollama"}, store={"path": str(tmp_path / "store")},
                             ingest={"contextual": True})
    store = LanceStore(tmp_path / "store", dim=768)
    step = IngestStep(settings, store, OllamaEmbedder(host=server.url, timeout_s=10), PyMuPDFParser(), llm=llm)
    path = wheat_pdf(tmp_path / "wheat.pdf")
    result = step.ingest(IngestRequest(run_id="run-1", candidate=Candidate(key=f"file:{path}", path=str(path))))
    assert result.status == "stored"
    doc = store.get_document(result.doc_id)  # type: ignore[arg-type]
    chunks = stored_chunks(store, result.doc_id)  # type: ignore[arg-type]
    assert any(c.context for c in chunks)
    assert all(doc.markdown[c.char_start:c.char_end] == c.text for c in chunks)  # type: ignore[union-attr]
    abstract_seen = any("Heat stress reduces wheat yield" in c.last_user_message for c in llm.calls_log)
    assert abstract_seen and "Title: Heat Stress in Wheat Crops" in llm.calls_log[0].last_user_message


def test_cache_hit_makes_no_llm_call(tmp_path: Path, server: LoopbackOllama) -> None:
    first = FunctionLLM(contexts_for)
    step, store, settings = make_step(tmp_path, server, first)
    result = step.ingest_text("run-1", "text:water", "Household Water Use", BODY)
    assert first.calls > 0
    before = {c.chunk_id: c.context for c in stored_chunks(store, result.doc_id)}  # type: ignore[arg-type]
    assert cache_path(settings).exists() and cache_path(settings).parent == tmp_path  # next to the store

    store.delete_document(result.doc_id)  # type: ignore[arg-type]  # re-ingest: the document must be rebuilt
    second = FunctionLLM(contexts_for)
    step2, store2, _ = make_step(tmp_path, server, second)
    again = step2.ingest_text("run-2", "text:water", "Household Water Use", BODY)
    assert again.status == "stored" and again.doc_id == result.doc_id
    assert second.calls == 0
    assert {c.chunk_id: c.context for c in stored_chunks(store2, again.doc_id)} == before  # type: ignore[arg-type]


def test_garbage_answers_leave_chunks_without_context_and_the_document_is_stored(
        tmp_path: Path, server: LoopbackOllama) -> None:
    llm = FunctionLLM(lambda _m, _s: "Sure! Here are some contexts: the passage is about water.", max_retries=1)
    step, store, settings = make_step(tmp_path, server, llm)
    result = step.ingest_text("run-1", "text:water", "Household Water Use", BODY)
    assert result.status == "stored"
    chunks = stored_chunks(store, result.doc_id)  # type: ignore[arg-type]
    body = [c for c in chunks if c.section_kind != "references"]
    assert all(c.context == "" for c in chunks)
    assert f"context_missing:{len(body)}" in result.flags
    assert store.get_document(result.doc_id).flags == result.flags  # type: ignore[union-attr]  # recorded
    assert len(ContextCache(cache_path(settings))) == 0  # failures are not cached: the next ingest asks again
    assert llm.calls == 2 * -(-len(body) // 8)  # each batch: the answer, one repair attempt


def test_a_bad_entry_fails_only_its_chunk(tmp_path: Path, server: LoopbackOllama) -> None:
    def answers(messages: list[ChatMessage], schema: object) -> dict:
        good = contexts_for(messages, schema)["contexts"]
        good[1]["context"] = "ok"  # too short to say anything
        good[2]["passage"] = 99  # not a passage of the batch (fails validation on its own)
        del good[3]  # no entry at all
        return {"contexts": good}

    long_body = BODY.replace(SENT * 12, SENT * 40)  # several chunks per section: more than the 4 spoiled
    step, store, _ = make_step(tmp_path, server, FunctionLLM(answers), batch=32)
    result = step.ingest_text("run-1", "text:water", "Household Water Use", long_body)
    assert result.status == "stored" and "context_missing:3" in result.flags
    body = [c for c in stored_chunks(store, result.doc_id) if c.section_kind != "references"]  # type: ignore[arg-type]
    assert len(body) > 4
    assert [bool(c.context) for c in body[:4]] == [True, False, False, False]
    assert all(c.context for c in body[4:])


def test_setting_off_asks_no_llm_and_keeps_chunks_as_before(tmp_path: Path, server: LoopbackOllama) -> None:
    llm = ScriptedLLM([])  # any call would raise ScriptExhausted
    step, store, settings = make_step(tmp_path, server, llm, contextual=False)
    assert step.contextualizer is None
    result = step.ingest_text("run-1", "text:water", "Household Water Use", BODY)
    assert result.status == "stored" and llm.calls == 0
    assert all(c.context == "" for c in stored_chunks(store, result.doc_id))  # type: ignore[arg-type]
    assert not cache_path(settings).exists()


def test_ingestor_gets_an_llm_only_when_the_setting_is_on(tmp_path: Path) -> None:
    llm = FunctionLLM(contexts_for)
    off = Ingestor(Settings.load(store={"path": str(tmp_path / "s")}), "run-1", llm=llm)
    assert off._context_llm() is None
    on = Ingestor(Settings.load(store={"path": str(tmp_path / "s")}, ingest={"contextual": True}), "run-1", llm=llm)
    assert on._context_llm() is llm  # no ray.llm_slots: called directly, as a Forager does


# ---------------------------------------------------------------- the parts


def test_window_leaves_room_for_the_context() -> None:
    from infra.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    plain = window_for(Settings.load(), embedder)[0]
    contextual = window_for(Settings.load(ingest={"contextual": True}), embedder)[0]
    assert contextual == min(Settings.load().chunk_window()[0],
                             embedder.max_tokens - SPECIAL_TOKENS - CONTEXT_TOKENS - CHUNK_CONTEXT_TOKENS)
    assert contextual < plain


def test_clean_context() -> None:
    assert clean_context("  This passage reports the survey sample.  ", "x") == "This passage reports the survey sample."
    three = "First sentence is here. Second one is here. Third one is too much."
    assert clean_context(three, "x") == "First sentence is here. Second one is here."
    for bad in ("", "ok", "1234 5678 9012 3456", "<|im_end|> {} [] ()"):
        assert clean_context(bad, "x") is None, bad
    copied = "Households in the northern districts were surveyed about their water use every season."
    assert clean_context(copied, SENT * 3) is None


def test_cache_is_shared_through_the_file(tmp_path: Path) -> None:
    chunk = ChunkRecord(chunk_id="a:0", doc_id="a", ordinal=0, text="text", section_path="Methods", char_start=0,
                        char_end=4, token_count=1)
    h = chunk_hash("Title", "Abstract", chunk)
    assert h != chunk_hash("Title", "Another abstract", chunk)
    assert h != chunk_hash("Title", "Abstract", chunk.model_copy(update={"section_path": "Results"}))
    writer, reader = ContextCache(tmp_path / "c.jsonl"), ContextCache(tmp_path / "c.jsonl")
    assert reader.get_many([h]) == {}
    writer.put_many({h: "A context sentence for the methods."})
    assert reader.get_many([h]) == {h: "A context sentence for the methods."}  # another process's append
    with (tmp_path / "c.jsonl").open("a") as handle:
        handle.write("not json\n" + json.dumps({"h": "x"}) + "\n")  # damaged lines are skipped
    assert len(ContextCache(tmp_path / "c.jsonl")) == 1


def test_batches_and_skips_reference_chunks() -> None:
    chunks = [ChunkRecord(chunk_id=f"a:{i}", doc_id="a", ordinal=i, text=f"passage number {i}",
                          section_path="Body" if i < 10 else "References",
                          section_kind="body" if i < 10 else "references", char_start=0, char_end=1,
                          token_count=3) for i in range(12)]
    llm = FunctionLLM(contexts_for)
    found = Contextualizer(llm, None, batch_size=4).contextualize("T", "", chunks)
    assert llm.calls == 3 and found.llm_calls == 3 and not found.missing
    assert set(found.contexts) == {f"a:{i}" for i in range(10)}
    assert [c.schema for c in llm.calls_log] == [ChunkContexts.__name__] * 3
