"""Disk full / store write failure during ingestion: the document fails, nothing half-written is
visible, the next document still ingests.

Two ways the environment fails, the code under test (IngestStep and LanceStore) is real:

* a real file-size limit from the operating system (``RLIMIT_FSIZE``, with SIGXFSZ ignored: a write
  past the limit fails with EFBIG, as a full disk fails with ENOSPC) in a child process that
  ingests a small, a large and another small document; LanceDB's own writes hit it;
* the LanceDB registry table refusing its commit with ENOSPC after the chunks were written.
"""

from __future__ import annotations

import errno
import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from actors.steps.ingest.documents import text_markdown
from actors.steps.ingest.step import IngestStep
from infra.settings import Settings
from infra.store.base import ChunkFilter

# slow (whole suite only): a write past the file-size limit with MiniLM, ~11 s
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

SMALL_A = ("Fin regrowth", "Zebrafish regenerate their caudal fins after amputation within two weeks. " * 4)
LARGE = ("Scale atlas", " ".join(f"Scale {i} of the dorsal row has {i % 7} melanophores and a ridge of "
                                 f"height {i % 13} micrometres." for i in range(800)))
SMALL_C = ("Heart repair", "The zebrafish heart regrows after a ventricular resection within sixty days. " * 4)


def doc_id(title: str, text: str) -> str:
    return hashlib.sha256(text_markdown(title, text).encode("utf-8")).hexdigest()


CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.settings import Settings
    from infra.store import build_store

    store_path, limit, docs = sys.argv[1], int(sys.argv[2]), json.loads(sys.stdin.read())
    settings = Settings.load().updated(store={"path": Path(store_path)}, embed={"backend": "minilm"})
    step = IngestStep(settings, build_store(settings), build_embedder(settings))
    step.embedder.embed(["warm up"])  # load the model before the limit applies
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    out = []
    for key, title, text in docs:
        r = step.ingest_text("run-disk", key, title, text)
        out.append({"key": key, "status": r.status, "reason": r.reason, "doc_id": r.doc_id})
    print("RESULTS " + json.dumps(out))
""")


def test_a_write_past_the_os_file_size_limit_fails_one_document_and_leaves_nothing(tmp_path: Path) -> None:
    store_path = tmp_path / "store"
    docs = [["text:a", *SMALL_A], ["text:large", *LARGE], ["text:c", *SMALL_C]]
    proc = subprocess.run([sys.executable, "-c", CHILD, str(store_path), str(64 * 1024)], input=json.dumps(docs),
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS ")), None)
    assert line is not None, proc.stderr[-3000:]
    results = {r["key"]: r for r in json.loads(line[len("RESULTS "):])}
    assert results["text:a"]["status"] == "stored"
    assert results["text:large"]["status"] == "failed"
    reason = results["text:large"]["reason"]
    assert "nothing was registered" in reason and "File too large" in reason, reason  # EFBIG, from Lance
    assert results["text:c"]["status"] == "stored"  # the next document still ingests

    from infra.store import build_store

    store = build_store(Settings.load().updated(store={"path": store_path}, embed={"backend": "minilm"}))
    assert {d.key for d in store.list_documents()} == {"text:a", "text:c"}
    large = doc_id(*LARGE)
    assert store.get_document(large) is None and store.count_chunks(large) == 0
    assert store.count_chunks() == sum(d.n_chunks for d in store.list_documents())  # no orphans


@pytest.fixture
def step(tmp_path: Path) -> IngestStep:
    from infra.embed import build_embedder
    from infra.store import build_store

    settings = Settings.load().updated(store={"path": tmp_path / "store"}, embed={"backend": "minilm"})
    return IngestStep(settings, build_store(settings), build_embedder(settings))


def test_a_registry_commit_refused_for_a_full_disk_removes_the_written_chunks(step, monkeypatch) -> None:
    store = step.store
    assert step.ingest_text("run-disk", "text:a", *SMALL_A).status == "stored"
    documents = store._table("documents", create=True)  # noqa: SLF001 - the table whose disk is "full"
    real_merge = documents.merge_insert
    refused: list[str] = []

    def full_disk(on: str):  # the chunks are committed; the registry row is not
        refused.append(on)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(documents, "merge_insert", full_disk)
    failed = step.ingest_text("run-disk", "text:c", *SMALL_C)
    assert refused and failed.status == "failed"
    assert "No space left on device" in failed.reason and "its chunks were removed" in failed.reason
    gone = doc_id(*SMALL_C)
    assert store.get_document(gone) is None and store.count_chunks(gone) == 0
    assert store.chunks(ChunkFilter(doc_ids=(gone,), exclude_kinds=()), limit=100) == []
    assert [d.key for d in store.list_documents()] == ["text:a"]

    monkeypatch.setattr(documents, "merge_insert", real_merge)  # space again: the same document ingests
    again = step.ingest_text("run-disk", "text:c", *SMALL_C)
    assert again.status == "stored" and store.count_chunks(gone) == again.n_chunks > 0
    assert store.count_chunks() == sum(d.n_chunks for d in store.list_documents())
