"""`forage library migrate`: LanceDB -> LanceDB for real; LanceDB <-> Weaviate when WEAVIATE_URL is set."""

from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord
from infra.store.lancedb import LanceStore
from infra.store.meta import LibraryMeta

runner = CliRunner()


def said(result: object) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(getattr(result, "output").split())


def _vec(seed: str, dim: int) -> list[float]:
    raw = [((int(hashlib.sha256(f"{seed}:{i}".encode()).hexdigest()[:8], 16) % 2001) - 1000) / 1000
           for i in range(dim)]
    norm = math.sqrt(sum(v * v for v in raw))
    return [v / norm for v in raw]


def _fill(store: LanceStore, n_docs: int, dim: int) -> dict[str, int]:
    counts = {}
    for d in range(n_docs):
        doc_id = hashlib.sha256(f"doc{d}".encode()).hexdigest()
        n = 1 + d % 4
        chunks = [ChunkRecord(chunk_id=f"{doc_id[:16]}:{i}", doc_id=doc_id, ordinal=i, text=f"paper {d} part {i}",
                              section_path="Methods" if i else "Abstract", char_start=i * 20, char_end=i * 20 + 15,
                              token_count=4, pages=(1,)) for i in range(n)]
        doc = DocumentRecord(doc_id=doc_id, key=f"file:/lib/{d}.pdf", title=f"Paper {d}", year=2000 + d,
                             authors=("A. Author",), markdown=f"# Paper {d}", parser="test", origin=f"{d}.pdf")
        windows = [[_vec(f"{c.chunk_id}/{w}", dim) for w in range(i % 3)] for i, c in enumerate(chunks)]
        store.upsert_document(doc, chunks, [_vec(c.chunk_id, dim) for c in chunks], windows)
        counts[doc_id] = n
    return counts


@pytest.fixture(autouse=True)
def _settings_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORAGE_RUN__RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("FORAGE_STORE__PATH", str(tmp_path / "configured"))


def _same_library(a: LanceStore, b: LanceStore) -> None:
    assert b.list_documents() == a.list_documents()
    everything = ChunkFilter(exclude_kinds=())
    assert b.chunks(everything, limit=1000) == a.chunks(everything, limit=1000)
    for (doc, chunks, vectors), (doc2, chunks2, vectors2) in zip(a.export_documents(), b.export_documents(),
                                                                 strict=True):
        assert (doc, chunks) == (doc2, chunks2)
        assert np.allclose(np.asarray(vectors2), np.asarray(vectors), atol=1e-6)
        if a.keeps_windows and b.keeps_windows:  # the window vectors come along
            windows, windows2 = a.windows_of(doc.doc_id), b.windows_of(doc.doc_id)
            assert windows and [len(w) for w in windows2] == [len(w) for w in windows]
            assert all(np.allclose(w2, w, atol=1e-6) for w, w2 in zip(windows, windows2) if w)


def test_migrate_lancedb_to_lancedb_copies_everything_in_batches(tmp_path: Path) -> None:
    src = LanceStore(tmp_path / "a", dim=384, embed_model="minilm:all-minilm-l6-v2")
    counts = _fill(src, 7, 384)
    result = runner.invoke(app, ["library", "migrate", "--to", "lancedb", "--from", "lancedb",
                                 "--from-path", str(tmp_path / "a"), "--to-path", str(tmp_path / "b"),
                                 "--batch", "3"])
    assert result.exit_code == 0, result.output
    assert "copied 7 documents and 16 chunks in 3 batches" in said(result) and "verified" in said(result)
    dst = LanceStore(tmp_path / "b", dim=384)
    _same_library(src, dst)
    assert {d.doc_id: dst.count_chunks(d.doc_id) for d in dst.list_documents()} == counts
    assert dst.library_meta() == LibraryMeta(embed_model="minilm:all-minilm-l6-v2", dim=384)
    # again: overwritten, not duplicated
    again = runner.invoke(app, ["library", "migrate", "--to", "lancedb", "--from-path", str(tmp_path / "a"),
                                "--to-path", str(tmp_path / "b")])
    assert again.exit_code == 0, again.output
    assert dst.count_chunks() == sum(counts.values()) and len(dst.list_documents()) == 7


def test_migrate_keeps_the_source_embedding_model(tmp_path: Path) -> None:
    """The configured embedder is MiniLM (384); a nomic library (768) migrates as nomic."""
    src = LanceStore(tmp_path / "nomic", dim=768, embed_model="ollama:nomic-embed-text")
    _fill(src, 2, 768)
    result = runner.invoke(app, ["library", "migrate", "--to", "lancedb", "--from-path", str(tmp_path / "nomic"),
                                 "--to-path", str(tmp_path / "copy")])
    assert result.exit_code == 0, result.output
    dst = LanceStore(tmp_path / "copy", dim=768)
    assert dst.library_meta() == LibraryMeta(embed_model="ollama:nomic-embed-text", dim=768)
    _same_library(src, dst)


def test_migrate_refuses_a_target_of_another_model_and_the_same_folder(tmp_path: Path) -> None:
    _fill(LanceStore(tmp_path / "a", dim=384, embed_model="minilm:all-minilm-l6-v2"), 1, 384)
    _fill(LanceStore(tmp_path / "other", dim=384, embed_model="ollama:all-minilm"), 1, 384)
    mixed = runner.invoke(app, ["library", "migrate", "--to", "lancedb", "--from-path", str(tmp_path / "a"),
                                "--to-path", str(tmp_path / "other")])
    assert mixed.exit_code == 2 and "embedded with ollama:all-minilm" in said(mixed)
    same = runner.invoke(app, ["library", "migrate", "--to", "lancedb", "--from-path", str(tmp_path / "a"),
                               "--to-path", str(tmp_path / "a")])
    assert same.exit_code == 2 and "same library" in said(same)
    missing = runner.invoke(app, ["library", "migrate", "--to", "lancedb"])
    assert missing.exit_code == 2 and "--to-path" in said(missing)


def test_migrate_lancedb_to_weaviate_and_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = os.environ.get("WEAVIATE_URL")
    if not url:
        pytest.skip("needs a live Weaviate: set WEAVIATE_URL (and WEAVIATE_GRPC_PORT if not 50051)")
    parts = urlsplit(url)
    monkeypatch.setenv("FORAGE_STORE__WEAVIATE_HOST", parts.hostname or "127.0.0.1")
    monkeypatch.setenv("FORAGE_STORE__WEAVIATE_HTTP_PORT", str(parts.port or 8080))
    monkeypatch.setenv("FORAGE_STORE__WEAVIATE_GRPC_PORT", os.environ.get("WEAVIATE_GRPC_PORT", "50051"))
    library = "Migrate" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]
    src = LanceStore(tmp_path / "a", dim=384, embed_model="minilm:all-minilm-l6-v2")
    _fill(src, 5, 384)
    try:
        there = runner.invoke(app, ["library", "migrate", "--to", "weaviate", "--from", "lancedb",
                                    "--from-path", str(tmp_path / "a"), "--library", library, "--batch", "2"])
        assert there.exit_code == 0, there.output
        back = runner.invoke(app, ["library", "migrate", "--to", "lancedb", "--from", "weaviate",
                                   "--library", library, "--to-path", str(tmp_path / "b")])
        assert back.exit_code == 0, back.output
        _same_library(src, LanceStore(tmp_path / "b", dim=384))
    finally:
        from infra.store.weaviate import WeaviateStore

        with WeaviateStore.from_url(url, library=library,
                                    grpc_port=int(os.environ.get("WEAVIATE_GRPC_PORT", "50051"))) as store:
            for name in (store.chunks_name, store.docs_name):
                store._connect().collections.delete(name)


def test_the_store_folder_is_for_its_owner_only(tmp_path) -> None:
    """A new store folder is 0700; one an older Forage left 0755 is tightened when opened."""
    import os
    import stat

    from infra.store.lancedb import LanceStore

    LanceStore(tmp_path / "new", dim=4)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    os.chmod(old, 0o755)
    LanceStore(old, dim=4)
    assert stat.S_IMODE(os.stat(old).st_mode) == 0o700


def test_forage_processes_create_files_for_their_owner_only(tmp_path) -> None:
    import os
    import stat
    import subprocess
    import sys

    code = ("import os, sys; from infra import privacy; privacy.apply(); "
            "open(sys.argv[1], 'w').write('x'); os.mkdir(sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "f"), str(tmp_path / "d")], check=True,
                   cwd=__import__("pathlib").Path(__file__).resolve().parents[2])
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o700
