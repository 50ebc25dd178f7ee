"""Fuzzing PDF ingestion with mutated copies of real PDFs (seeded, bounded: about a minute).

Each mutant (byte flips, flips inside the content streams, truncation, inserted garbage, a broken
header, a wiped cross-reference table, a slice of another PDF spliced in) goes through the real
IngestStep (PyMuPDF → sections → chunks → MiniLM → LanceDB). Nothing may raise: every document
ends ``stored`` (with all its chunks in the store, slicing its Markdown exactly) or ``failed`` with a
reason (and then nothing of it in the store). At the end the store holds no chunk without its
registered document.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.steps.ingest.step import IngestStep
from infra.settings import Settings
from infra.store.base import ChunkFilter
from messages.ingest import IngestRequest
from messages.search import Candidate

# slow (whole suite only): mutated PDFs through the whole ingest step, ~14 s
pytestmark = pytest.mark.slow

SEED = 20261123
PDFS = ("bosonic_dark_matter_arxiv0908.0054.pdf", "phrase_generation_acl2014.pdf",
        "novelty_paraphrase_arxiv2202.00535v1.pdf")

Mutation = Callable[[bytes, random.Random, bytes], bytes]


def flip(data: bytes, rng: random.Random, _other: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 64)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def flip_streams(data: bytes, rng: random.Random, _other: bytes) -> bytes:
    """Flips only between 'stream' and 'endstream' (compressed page content, fonts, images)."""
    out = bytearray(data)
    starts = [i for i in range(len(data)) if data.startswith(b"stream", i) and not data.startswith(b"stream", i - 3)]
    for start in rng.sample(starts, min(len(starts), 6)):
        end = data.find(b"endstream", start)
        if end > start + 10:
            for _ in range(rng.randint(1, 16)):
                out[rng.randrange(start + 8, end)] ^= 0xFF
    return bytes(out)


def truncate(data: bytes, rng: random.Random, _other: bytes) -> bytes:
    return data[:rng.randrange(16, len(data))]


def insert_garbage(data: bytes, rng: random.Random, _other: bytes) -> bytes:
    at = rng.randrange(len(data))
    return data[:at] + rng.randbytes(rng.randint(1, 8192)) + data[at:]


def break_header(data: bytes, rng: random.Random, _other: bytes) -> bytes:
    return rng.randbytes(8) + data[8:]


def wipe_xref(data: bytes, rng: random.Random, _other: bytes) -> bytes:
    n = min(len(data) // 4, rng.randint(256, 4096))
    return data[:-n] + b"\x00" * n


def splice(data: bytes, rng: random.Random, other: bytes) -> bytes:
    a = rng.randrange(len(other) // 2)
    piece = other[a:a + rng.randint(512, 32_768)]
    at = rng.randrange(len(data))
    return data[:at] + piece + data[at + len(piece) // 2:]


MUTATIONS: tuple[Mutation, ...] = (flip, flip_streams, truncate, insert_garbage, break_header, wipe_xref, splice)


def mutants(pdfs: list[Path], per_pdf: int) -> list[tuple[str, bytes]]:
    rng = random.Random(SEED)
    out = []
    for i, path in enumerate(pdfs):
        data = path.read_bytes()
        other = pdfs[(i + 1) % len(pdfs)].read_bytes()
        for n in range(per_pdf):
            mutation = MUTATIONS[(i + n) % len(MUTATIONS)]
            out.append((f"{path.stem[:20]}-{n:02d}-{mutation.__name__}", mutation(data, rng, other)))
    return out


@pytest.mark.timeout(600)
def test_mutated_pdfs_are_stored_whole_or_failed_with_a_reason(shared_data: Path, tmp_path: Path) -> None:
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.store import build_store

    pdfs = [shared_data / "pdfs" / name for name in PDFS]
    if not all(p.exists() for p in pdfs):
        pytest.skip(f"needs the shared PDFs {PDFS} in {shared_data / 'pdfs'}")
    settings = Settings.load().updated(store={"path": tmp_path / "store"}, embed={"backend": "minilm"},
                                       ingest={"max_pages": 2})
    store = build_store(settings)
    step = IngestStep(settings, store, build_embedder(settings), build_parser(settings))
    folder = tmp_path / "mutants"
    folder.mkdir()
    outcomes: dict[str, int] = {"stored": 0, "failed": 0, "skipped": 0}
    for name, data in mutants(pdfs, per_pdf=7):
        path = folder / f"{name}.pdf"
        path.write_bytes(data)
        doc_id = hashlib.sha256(data).hexdigest()
        result = step.ingest(IngestRequest(run_id="run-fuzz", candidate=Candidate(key=f"file:{path}",
                                                                                  path=str(path))))
        outcomes[result.status] += 1
        if result.status == "failed":
            assert result.reason and result.reason.strip(), name
            assert store.get_document(doc_id) is None and store.count_chunks(doc_id) == 0, name
        else:
            doc = store.get_document(doc_id)
            assert doc is not None and result.doc_id == doc_id, name
            chunks = store.chunks(ChunkFilter(doc_ids=(doc_id,), exclude_kinds=()), limit=10_000)
            assert len(chunks) == doc.n_chunks == store.count_chunks(doc_id) > 0, name
            for chunk in chunks:
                assert doc.markdown[chunk.char_start:chunk.char_end] == chunk.text, (name, chunk.chunk_id)
    registered = store.list_documents()
    assert store.count_chunks() == sum(d.n_chunks for d in registered)  # no orphan chunks
    assert outcomes["stored"] + outcomes["failed"] + outcomes["skipped"] == 21
    assert outcomes["failed"] >= 3  # broken headers/truncations are refused, not half-parsed
    print(f"fuzz outcomes (seed {SEED}): {outcomes}")
