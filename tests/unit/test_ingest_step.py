"""IngestStep end to end on real parts: PyMuPDFParser, LanceStore in tmp_path, and embeddings from
OllamaEmbedder against the loopback Ollama server (fast, deterministic) or, in the slow test, MiniLM."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from actors.steps.events import RecordingEmit
from actors.steps.ingest.step import IngestStep
from actors.steps.text import sentence_windows
from infra.embed.base import Windowed
from infra.ingest_cache import IngestCache
from infra.embed.minilm import MiniLMEmbedder
from infra.embed.ollama import OllamaEmbedder
from infra.pdf.base import ParsedDocument
from infra.pdf.pymupdf import PyMuPDFParser
from infra.settings import Settings
from infra.store.base import ChunkFilter, ChunkRecord
from infra.store.lancedb import LanceStore
from messages.ingest import IngestRequest
from messages.search import Candidate
from messages.status import Stage
from tests.factories import WHEAT_SENTENCE, WHEAT_TITLE, wheat_pdf
from tests.loopback_ollama import LoopbackOllama, closed_loopback_url, install_real_llm_guard

NOMIC = "nomic-embed-text"
TITLE, SENTENCE = WHEAT_TITLE, WHEAT_SENTENCE


def summaries(emit: RecordingEmit) -> list:
    """The summary events ('document' / 'failed'), without the per-phase progress events."""
    return [e for e in emit.events if e.kind != "progress"]


def phases(emit: RecordingEmit) -> list[str]:
    return [e.payload["phase"] for e in emit.events if e.kind == "progress"]


class CountingParser:
    """The real parser, counting calls (to show a known file is not parsed again)."""

    def __init__(self) -> None:
        self.inner = PyMuPDFParser()
        self.name, self.revision, self.max_pages = self.inner.name, self.inner.revision, self.inner.max_pages
        self.calls = 0

    def parse(self, path: Path) -> ParsedDocument:
        self.calls += 1
        return self.inner.parse(path)


class ExplodingParser:
    """A parser with a bug: the step must still answer, not raise."""

    name = "exploding"
    revision = ""
    max_pages = 60

    def parse(self, path: Path) -> ParsedDocument:
        raise RuntimeError("boom")


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    install_real_llm_guard(monkeypatch)
    with LoopbackOllama(models=(NOMIC,), embed_dim=768) as srv:
        yield srv


@pytest.fixture
def setup(tmp_path: Path, server: LoopbackOllama):
    settings = Settings.load(embed={"backend": "ollama"}, store={"path": str(tmp_path / "store")})
    store = LanceStore(tmp_path / "store", dim=768)
    embedder = OllamaEmbedder(host=server.url, timeout_s=10)
    parser = CountingParser()
    emit = RecordingEmit()
    return IngestStep(settings, store, embedder, parser, emit=emit), store, parser, emit


def request(path: Path | None, key: str | None = None, **candidate) -> IngestRequest:
    key = key or f"file:{path}"
    return IngestRequest(run_id="run-1", candidate=Candidate(key=key, path=str(path) if path else None, **candidate))


def embedded_inputs(server: LoopbackOllama) -> list[str]:
    return [text for r in server.requests if r.path == "/api/embed" for text in r.body["input"]]


def test_stores_document_chunks_and_vectors(setup, server: LoopbackOllama, tmp_path: Path) -> None:
    step, store, parser, emit = setup
    path = wheat_pdf(tmp_path / "wheat.pdf")
    result = step.ingest(request(path))

    assert result.status == "stored" and result.reason is None
    assert result.doc_id == hashlib.sha256(path.read_bytes()).hexdigest()
    assert result.title == TITLE and result.parser == f"{parser.name} r{parser.revision}" and result.seconds > 0
    doc = store.get_document(result.doc_id)
    assert doc is not None and doc.key == f"file:{path}" and doc.origin == "wheat.pdf"
    assert doc.authors == ("Ada Lovelace", "Alan Turing")
    assert doc.year == 2021  # no year printed on page 1: the PDF creation year
    assert doc.abstract.startswith(SENTENCE.strip())
    assert {"Abstract", "1 Introduction", "2 Methods > 2.1 Field trials", "References"} <= set(doc.sections)
    chunks = store.chunks(ChunkFilter(doc_ids=(result.doc_id,), exclude_kinds=()), limit=1000)
    assert len(chunks) == result.n_chunks == doc.n_chunks == store.count_chunks(result.doc_id) > 0
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert doc.markdown[chunk.char_start:chunk.char_end] == chunk.text
        assert chunk.token_count <= step.max_tokens and chunk.pages
    assert {c.section_kind for c in chunks} >= {"abstract", "body", "references"}

    inputs = embedded_inputs(server)  # context line in front of each chunk's exact text
    assert len(inputs) == n_inputs(chunks)
    for text, chunk in zip(inputs, chunks):
        assert text == f"{TITLE} — {chunk.section_path}\n{chunk.text}"
    # then each chunk's sentence windows (not the references'), behind the same context line
    assert inputs[len(chunks):] == [f"{TITLE} — {c.section_path}\n{w}" for c in chunks
                                    if c.section_kind != "references" for w in sentence_windows(c.text, 2)]
    assert len(inputs) > len(chunks)

    [event] = summaries(emit)
    assert (event.stage, event.kind) == (Stage.INGEST, "document")
    assert event.payload["status"] == "stored" and event.payload["n_chunks"] == len(chunks)
    assert phases(emit) == ["parsing", "chunking", "embedding", "stored"]  # 'queued' is the Orchestrator's
    progress = [e for e in emit.events if e.kind == "progress"]
    assert {e.payload["key"] for e in progress} == {f"file:{path}"}
    assert progress[0].payload["pid"] == os.getpid() and progress[2].payload["chunks"] == len(chunks)
    assert event.payload["title"] == TITLE and "parse_s" in event.payload


def test_index_new_chunks_folds_the_batch_into_the_search_index_and_says_so(setup, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    step, store, _, emit = setup
    result = step.ingest(request(wheat_pdf(tmp_path / "wheat.pdf")))
    assert store.unindexed_chunks() == result.n_chunks > 0  # BM25 flat-scans them until they are folded in
    assert step.index_new_chunks() == result.n_chunks
    assert store.unindexed_chunks() == 0
    [indexed] = [e for e in emit.events if e.kind == "indexed"]
    assert indexed.stage == Stage.INGEST and indexed.payload["folded"] == result.n_chunks
    assert step.index_new_chunks() == 0  # nothing new: no work, no event
    assert len([e for e in emit.events if e.kind == "indexed"]) == 1

    step.ingest(request(wheat_pdf(tmp_path / "wheat2.pdf", " Drought too.")))

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    # LanceDB fails under the store: a failed fold-in leaves the chunks found by the flat scan
    monkeypatch.setattr(type(store._table("chunks", create=False)), "optimize", broken)
    assert step.index_new_chunks() == 0
    failed = [e for e in emit.events if e.kind == "indexed"][-1]
    assert "disk full" in failed.payload["error"] and "slower" in failed.message
    assert store.unindexed_chunks() > 0 and store.bm25("drought", 3)


def test_same_file_again_is_skipped_without_parsing(setup, server: LoopbackOllama, tmp_path: Path) -> None:
    step, store, parser, emit = setup
    path = wheat_pdf(tmp_path / "wheat.pdf")
    first = step.ingest(request(path))
    embeds = len(embedded_inputs(server))
    again = step.ingest(request(path))
    assert (again.status, again.doc_id, again.n_chunks, again.title) == ("skipped", first.doc_id, first.n_chunks,
                                                                         TITLE)
    assert parser.calls == 1 and len(embedded_inputs(server)) == embeds
    copy = tmp_path / "copy.pdf"
    copy.write_bytes(path.read_bytes())
    other_key = step.ingest(request(copy))
    assert other_key.status == "skipped" and f"file:{path}" in other_key.reason
    assert [e.payload["status"] for e in summaries(emit)] == ["stored", "skipped", "skipped"]
    assert phases(emit)[-2:] == ["parsing", "skipped"]  # known: no chunking, no embedding
    assert len(store.list_documents()) == 1


def test_changed_file_replaces_the_earlier_version(setup, tmp_path: Path) -> None:
    step, store, _, _ = setup
    path = wheat_pdf(tmp_path / "wheat.pdf")
    first = step.ingest(request(path))
    wheat_pdf(path, " Drought makes it worse.")
    second = step.ingest(request(path))
    assert second.status == "stored" and second.doc_id != first.doc_id
    assert second.reason == f"replaces {first.doc_id[:16]} (file changed)"
    assert store.get_document(first.doc_id) is None and store.count_chunks(first.doc_id) == 0
    assert store.document_by_key(f"file:{path}").doc_id == second.doc_id
    assert "Drought makes it worse." in store.get_document(second.doc_id).markdown


def test_candidate_metadata_wins_over_parsed(setup, tmp_path: Path) -> None:
    step, store, _, _ = setup
    path = wheat_pdf(tmp_path / "wheat.pdf")
    result = step.ingest(request(path, key="doi:10.1/xyz", title="Official Title", authors=("K. Author",),
                                 year=2019, source="openalex"))
    doc = store.get_document(result.doc_id)
    assert (doc.title, doc.authors, doc.year, doc.key) == ("Official Title", ("K. Author",), 2019, "doi:10.1/xyz")


@pytest.mark.parametrize("make,reason", [
    (lambda d: (d / "paywall.pdf").write_text("<html>log in</html>") and d / "paywall.pdf",
     "not a PDF: starts with '<html>log in'"),
    (lambda d: (d / "empty.pdf").write_bytes(b"") or d / "empty.pdf", "empty file (0 bytes)"),
    (lambda d: d / "missing.pdf", "file not found"),
    (lambda d: d, "is a folder"),
])
def test_bad_documents_fail_with_a_reason_and_store_nothing(setup, tmp_path: Path, make, reason: str) -> None:
    step, store, _, emit = setup
    folder = tmp_path / "in"
    folder.mkdir()
    result = step.ingest(request(make(folder)))
    assert result.status == "failed" and reason in result.reason and result.retryable is False
    assert result.doc_id is None and store.list_documents() == []
    [event] = summaries(emit)
    assert event.kind == "failed" and reason in event.payload["reason"] and event.payload["retryable"] is False
    assert phases(emit) == ["parsing", "failed"]
    assert reason in emit.events[-2].payload["reason"]  # the 'failed' phase carries the reason too


def test_candidate_without_a_file_fails(setup) -> None:
    step, _, _, _ = setup
    result = step.ingest(request(None, key="doi:10.1/abc", url="https://example.org/x.pdf"))
    assert result.status == "failed" and "no local file" in result.reason and result.retryable is False


def test_embedder_down_is_a_retryable_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_real_llm_guard(monkeypatch)
    settings = Settings.load(embed={"backend": "ollama"})
    store = LanceStore(tmp_path / "store", dim=768)
    step = IngestStep(settings, store, OllamaEmbedder(host=closed_loopback_url(), retries=0), PyMuPDFParser())
    result = step.ingest(request(wheat_pdf(tmp_path / "wheat.pdf")))
    assert result.status == "failed" and result.retryable is True and "not reachable" in result.reason
    assert store.list_documents() == []


def test_a_crashing_parser_does_not_raise(tmp_path: Path, server: LoopbackOllama) -> None:
    step = IngestStep(Settings.load(embed={"backend": "ollama"}), LanceStore(tmp_path / "s", dim=768),
                      OllamaEmbedder(host=server.url), ExplodingParser())
    result = step.ingest(request(wheat_pdf(tmp_path / "wheat.pdf")))
    assert result.status == "failed" and "RuntimeError" in result.reason and "boom" in result.reason


@pytest.mark.slow
def test_real_paper_with_minilm_is_searchable(tmp_path: Path, shared_pdfs: list[Path]) -> None:
    settings = Settings.load(store={"path": str(tmp_path / "store")})
    store = LanceStore(tmp_path / "store", dim=384)
    embedder = MiniLMEmbedder()
    step = IngestStep(settings, store, embedder, PyMuPDFParser())
    path = next(p for p in shared_pdfs if p.name.startswith("bosonic"))
    result = step.ingest(request(path))
    assert result.status == "stored" and result.title == "Ultra light bosonic dark matter and CMB"
    assert step.max_tokens == 222
    query = embedder.embed(["effect of Bose-Einstein statistics on the CMB acoustic peaks"])[0]
    hits = store.hybrid("Bose-Einstein statistics acoustic peaks", query, k=3)
    assert hits and all(h.chunk.doc_id == result.doc_id for h in hits)
    assert any("Bose" in h.chunk.text for h in hits)


# ---------------------------------------------------------------- the ingest cache (ingest.cache_dir)


def cached_step(tmp_path: Path, server: LoopbackOllama, store_name: str, cache: Path, **embed: int):
    """An ingest step with the cache at ``cache``, a store of its own and a counting parser; ``embed``:
    embedder settings beside the loopback Ollama backend (e.g. a smaller chunk window)."""
    settings = Settings.load(embed={"backend": "ollama", **embed}, store={"path": str(tmp_path / store_name)},
                             ingest={"cache_dir": str(cache)})
    store = LanceStore(tmp_path / store_name, dim=768)
    parser = CountingParser()
    emit = RecordingEmit()
    step = IngestStep(settings, store, OllamaEmbedder(host=server.url, timeout_s=10), parser, emit=emit)
    return step, store, parser, emit


def n_inputs(chunks: list[ChunkRecord]) -> int:
    """How many strings the embedder reads for these chunks: each chunk, and the sentence windows (2 sentences, the
    default) of every chunk but the references."""
    return len(chunks) + sum(len(sentence_windows(c.text, 2)) for c in chunks if c.section_kind != "references")


def all_chunks(store: LanceStore, doc_id: str) -> list[ChunkRecord]:
    return store.chunks(ChunkFilter(doc_ids=(doc_id,), exclude_kinds=()), limit=1000)


def stored(store: LanceStore) -> tuple:
    """(document, its chunks, their vectors) of the store's one document."""
    (item,) = store.export_documents()
    return item


def test_the_cache_serves_another_store_without_parsing_or_embedding(server: LoopbackOllama, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = wheat_pdf(tmp_path / "wheat.pdf")
    first, store_a, parser_a, emit_a = cached_step(tmp_path, server, "a", cache)
    r1 = first.ingest(request(path))
    assert r1.status == "stored" and parser_a.calls == 1
    embeds = len(embedded_inputs(server))
    assert embeds == n_inputs(all_chunks(store_a, r1.doc_id)) and r1.n_chunks > 0
    done = summaries(emit_a)[-1].payload
    assert done["parse_cached"] == 0.0 and "embed_cached" not in done

    second, store_b, parser_b, emit_b = cached_step(tmp_path, server, "b", cache)
    r2 = second.ingest(request(path))
    assert r2.status == "stored" and r2.doc_id == r1.doc_id and r2.n_chunks == r1.n_chunks
    assert parser_b.calls == 0 and len(embedded_inputs(server)) == embeds  # neither parsed nor embedded again
    done = summaries(emit_b)[-1].payload
    assert done["parse_cached"] == 1.0 and done["embed_cached"] == 1.0
    assert phases(emit_b) == phases(emit_a)  # the same phases are reported
    (doc_a, chunks_a, vectors_a), (doc_b, chunks_b, vectors_b) = stored(store_a), stored(store_b)
    assert doc_b.markdown == doc_a.markdown and doc_b.title == doc_a.title and doc_b.authors == doc_a.authors
    assert chunks_b == chunks_a
    assert vectors_b == vectors_a  # the vectors the embedder gave, as stored the first time

    # user-only files, whatever the umask
    for p in [cache, *cache.rglob("*")]:
        assert (p.stat().st_mode & 0o777) == (0o700 if p.is_dir() else 0o600), p


def test_a_changed_file_or_chunking_misses_and_a_damaged_entry_is_parsed_again(server: LoopbackOllama,
                                                                               tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path = wheat_pdf(tmp_path / "wheat.pdf")
    step, _, parser, _ = cached_step(tmp_path, server, "a", cache)
    step.ingest(request(path))
    changed = wheat_pdf(tmp_path / "wheat2.pdf", " Drought makes it worse.")
    step2, _, parser2, _ = cached_step(tmp_path, server, "b", cache)
    before = len(embedded_inputs(server))
    assert step2.ingest(request(changed)).status == "stored"
    assert parser2.calls == 1 and len(embedded_inputs(server)) > before  # another file: parsed and embedded

    # smaller chunks: the parse is reused, the new chunks are embedded
    step3, store3, parser3, _ = cached_step(tmp_path, server, "c", cache, chunk_tokens=64, chunk_overlap=8)
    before = len(embedded_inputs(server))
    r3 = step3.ingest(request(path))
    assert r3.status == "stored" and parser3.calls == 0
    assert len(embedded_inputs(server)) - before == n_inputs(all_chunks(store3, r3.doc_id))

    # another parser (or another version of it: its name carries the version) parses the file again
    step_other, _, parser_other, _ = cached_step(tmp_path, server, "o", cache)
    parser_other.name = parser_other.inner.name + "+next"
    assert step_other.ingest(request(path)).status == "stored" and parser_other.calls == 1

    # a damaged parsed entry is a miss: parsed again and rewritten
    for entry in (cache / "parsed").glob("*.json"):
        entry.write_text("{not json")
    step4, _, parser4, _ = cached_step(tmp_path, server, "d", cache)
    assert step4.ingest(request(path)).status == "stored" and parser4.calls == 1
    step5, _, parser5, _ = cached_step(tmp_path, server, "e", cache)
    assert step5.ingest(request(path)).status == "stored" and parser5.calls == 0


def test_a_broken_file_is_not_cached(server: LoopbackOllama, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bad = tmp_path / "bad.pdf"
    bad.write_text("<html>not a pdf</html>")
    step, _, parser, _ = cached_step(tmp_path, server, "a", cache)
    for _ in range(2):
        result = step.ingest(request(bad))
        assert result.status == "failed" and "not a PDF" in (result.reason or "")
    assert parser.calls == 2 and not list(cache.rglob("*.json"))


def test_vector_cache_keys_tell_pooled_windows_from_windows_embedded_alone() -> None:
    """Windows embedded alone are keyed as the texts they are (so caches written before pooling existed still
    hit); pooled ones by their chunk and spans, never sharing a key with the former."""
    text = "Notes — Results\nHeat cuts yield. Drought makes it worse. Shade helps."
    item = Windowed(text, 16, ((16, 49), (33, len(text))))
    alone = IngestCache.vectors_key("all-MiniLM-L6-v2", [item])
    assert alone == IngestCache.vectors_key("all-MiniLM-L6-v2", [Windowed(t) for t in [text, *item.window_texts()]])
    pooled = IngestCache.vectors_key("all-MiniLM-L6-v2", [item], pooled=True)
    assert pooled != alone and pooled != IngestCache.vectors_key("all-MiniLM-L6-v2", [Windowed(text)], pooled=True)
    assert IngestCache.vectors_key("other-model", [item]) != alone


def test_a_document_an_older_reading_parsed_is_parsed_again_once(setup, server: LoopbackOllama, tmp_path: Path) -> None:
    """A library stored before a fix to Forage's reading of the parser's output (parser revision: line numbers, a
    title rule) gets the fix: the file is parsed again and its stored document replaced, once; another parser's
    record (the researcher chose it) is left as it is."""
    step, store, parser, _ = setup
    path = wheat_pdf(tmp_path / "wheat.pdf")
    first = step.ingest(request(path))
    doc = store.get_document(first.doc_id)
    assert doc is not None and doc.parser == f"{parser.name} r{parser.revision}"
    chunks = all_chunks(store, doc.doc_id)
    store.upsert_document(doc.model_copy(update={"parser": parser.name}), chunks,  # as an older Forage stored it
                          [[1.0] + [0.0] * 767 for _ in chunks])
    calls = parser.calls
    again = step.ingest(request(path))
    assert again.status == "stored" and parser.calls == calls + 1
    assert again.reason == f"parsed again: stored by {parser.name}, now {parser.name} r{parser.revision}"
    assert store.get_document(first.doc_id).parser == f"{parser.name} r{parser.revision}"
    assert step.ingest(request(path)).status == "skipped" and parser.calls == calls + 1  # once
    store.upsert_document(doc.model_copy(update={"parser": "marker-1.9"}), chunks,
                          [[1.0] + [0.0] * 767 for _ in chunks])
    assert step.ingest(request(path)).status == "skipped" and parser.calls == calls + 1

