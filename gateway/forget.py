"""Forgetting runs: ``forage forget RUN`` and the retention setting (``run.retention_days``).

What Forage keeps about a run, and where:

* ``runs/<run_id>/`` — everything written for the run: run.json (query, requirements, search
  strings, documents, coverage), events.jsonl, report.md / report.json / evidence.jsonl, charts,
  exports, the egress ledger (egress.jsonl). Forgetting removes the whole folder.
* the shared store (LanceDB folder) — the documents the run ingested. They are the library, not the
  run: they stay unless ``documents=True``, and then only the documents this run brought in
  (``status == "stored"`` in its run.json) that no other run in the same runs folder used
  (stored or skipped). Their PDFs in ``search.papers_dir`` (downloads) go with them; files in the
  user's own library folder are never touched. LanceDB keeps deleted rows in older table versions
  until they are cleaned up, so the store is compacted and its old versions dropped afterwards —
  nothing of a forgotten document stays on disk in the store folder. The contextual-retrieval cache
  beside the store (``<store>.contexts.jsonl``, :func:`actors.steps.ingest.contextual.cache_path`) holds
  LLM-written sentences about the documents' chunks: their entries are removed too (the file is
  rewritten without them, atomically, under the cache's lock), before the documents leave the store.
* the run's Zotero collection (``Forage <run_id>``) when ``zotero=True``: the collection is
  deleted; the items in it stay in the user's Zotero library (they may be filed elsewhere too).

The run folder goes last, so a failure half-way (store locked, Zotero unreachable) leaves run.json
in place and ``forget`` can simply be run again.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.steps.run.rundir import RUN_ID, RunDir, find_run_dir
from infra.errors import ForageError
from infra.settings import Settings
from messages.run_state import DocumentEntry, RunState

DAY_S = 86_400.0


@dataclass
class ForgetReport:
    run_id: str
    run_dir: str
    files_removed: int = 0
    documents_deleted: list[str] = field(default_factory=list)
    documents_kept: dict[str, str] = field(default_factory=dict)  # doc_id -> why it stays
    papers_removed: list[str] = field(default_factory=list)
    contexts_removed: int = 0  # entries dropped from the contextual-retrieval cache
    zotero: str | None = None


def _read_state(rundir: RunDir) -> RunState | None:
    try:
        return rundir.load_state()
    except (OSError, ValueError):
        return None  # the run folder still goes; its documents cannot be told apart


def documents_stored_by(state: RunState | None) -> dict[str, DocumentEntry]:
    """doc_id -> ingest record, for the documents this run put into the store (not those it found there)."""
    if state is None:
        return {}
    return {d.doc_id: d for d in state.documents.values() if d.status == "stored" and d.doc_id}


def documents_used_elsewhere(runs_dir: Path, run_id: str) -> dict[str, str]:
    """doc_id -> the other run that stored or used it (any run in ``runs_dir`` but ``run_id``)."""
    used: dict[str, str] = {}
    for path in sorted(Path(runs_dir).glob("*/run.json")):
        if path.parent.name == run_id:
            continue
        try:
            state = RunState.load(path)
        except OSError:
            continue
        except ValueError:  # not a run's state as this Forage knows it: its documents still count as used
            doc_ids = _doc_ids_in(path)
        else:
            doc_ids = state.stored_doc_ids() if state is not None else []
        for doc_id in doc_ids:
            used.setdefault(doc_id, path.parent.name)
    return used


def _doc_ids_in(path: Path) -> list[str]:
    """The documents a run.json that is JSON but not a RunState names: deleting a paper another run may still
    cite is worse than keeping one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    docs = data.get("documents") if isinstance(data, dict) else None
    return [str(e["doc_id"]) for e in (docs.values() if isinstance(docs, dict) else ())
            if isinstance(e, dict) and e.get("doc_id") and e.get("status") in ("stored", "skipped")]


def _store_settings(settings: Settings, state: RunState | None) -> Settings:
    """``settings`` with the store (and embedder) the run recorded in run.json."""
    changes: dict[str, dict[str, Any]] = {}
    if state is not None and state.store_path:
        changes["store"] = {"path": Path(state.store_path)}
    embedder = state.settings.embedder if state is not None and state.settings else None
    if embedder in ("minilm", "ollama"):
        changes["embed"] = {"backend": embedder}
    return settings.updated(**changes) if changes else settings


def _store_for(settings: Settings, state: RunState | None) -> Any:
    from infra.store import build_store

    return build_store(_store_settings(settings, state))


def context_keys(store: Any, doc_ids: Sequence[str]) -> tuple[set[str], set[str]]:
    """(chunk hashes, context sentences) of the documents' chunks, as the contextual-retrieval cache keys
    and holds them: :func:`actors.steps.ingest.contextual.chunk_hash` from the stored title, abstract, section
    path and text, and the context each chunk got (which also finds entries written under an older
    prompt version, whose hashes differ)."""
    from actors.steps.ingest.contextual import chunk_hash
    from infra.store.base import ChunkFilter

    hashes: set[str] = set()
    contexts: set[str] = set()
    for doc_id in doc_ids:
        doc = store.get_document(doc_id)
        if doc is None:
            continue
        chunks = store.chunks(ChunkFilter(doc_ids=(doc_id,), exclude_kinds=()),
                              limit=max(doc.n_chunks, store.count_chunks(doc_id)))
        for chunk in chunks:
            hashes.add(chunk_hash(doc.title, doc.abstract or "", chunk))
            if chunk.context:
                contexts.add(chunk.context)
    return hashes, contexts


def drop_cached_contexts(cache: Path, hashes: set[str], contexts: set[str]) -> int:
    """Rewrite the context cache without the entries whose hash is in ``hashes`` or whose context is in
    ``contexts``; returns how many were dropped. Atomic (temp file + rename) and under the lock its
    writers append under, so no append is lost; lines that do not parse go too (they cost one LLM call
    at most). No file, nothing to do."""
    from filelock import FileLock

    from actors.steps.run.rundir import atomic_write

    if not (hashes or contexts) or not cache.exists():
        return 0
    with FileLock(str(cache) + ".lock", timeout=60):
        kept: list[str] = []
        dropped = 0
        for line in cache.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                keep = str(entry["h"]) not in hashes and str(entry["c"]) not in contexts
            except (ValueError, KeyError, TypeError):
                keep = False
            if keep:
                kept.append(line)
            else:
                dropped += 1
        if dropped:
            atomic_write(cache, "".join(f"{line}\n" for line in kept))  # 0600, like the run files
    return dropped


def purge_deleted(store: Any) -> None:
    """Make deletions physical (:meth:`infra.store.base.Store.purge_deleted`): LanceDB keeps deleted rows in older
    table versions and their values in indexes folded forward since."""
    store.purge_deleted()


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.expanduser().resolve())
    except ValueError:
        return False
    return True


def _delete_documents(settings: Settings, rundir: RunDir, state: RunState | None, report: ForgetReport,
                      store: Any | None) -> None:
    from actors.steps.ingest.contextual import cache_path

    mine = documents_stored_by(state)
    if not mine:
        return
    elsewhere = documents_used_elsewhere(rundir.path.parent, rundir.run_id)
    store = store if store is not None else _store_for(settings, state)
    papers = settings.search.papers_dir
    for doc_id in sorted(mine):
        if doc_id in elsewhere:
            report.documents_kept[doc_id] = f"used by run {elsewhere[doc_id]}"
    going = sorted(d for d in mine if d not in elsewhere)
    # the cached contexts first: they are found through the stored chunks, so a failure here leaves the
    # documents in the store for the next `forget` to find
    report.contexts_removed = drop_cached_contexts(cache_path(_store_settings(settings, state)),
                                                   *context_keys(store, going))
    for doc_id in going:
        entry = mine[doc_id]
        store.delete_document(doc_id)
        report.documents_deleted.append(doc_id)
        path = entry.path
        if path and _inside(Path(path), papers) and Path(path).is_file():
            Path(path).unlink()
            report.papers_removed.append(str(path))
    if report.documents_deleted:
        purge_deleted(store)


def _delete_zotero_collection(settings: Settings, run_id: str) -> str:
    """Delete the run's Zotero collection ('Forage <run_id>'); the items stay in the library."""
    from infra.net import Egress, EgressLedger
    from infra.sources.zotero import ZoteroLibrary
    from infra.sources.zotero_records import ZoteroError, describe_error

    name = f"Forage {run_id}"
    with ZoteroLibrary(settings.zotero, Egress(settings.net, EgressLedger())) as library:
        collection = library.find_collection(name)
        if collection is None:
            return f"no Zotero collection {name!r}"
        try:
            library._write(lambda: library.zot.delete_collection(collection))  # noqa: SLF001 - its 429 policy
        except Exception as exc:  # noqa: BLE001 - one clear error; the run folder stays for a retry
            reason, retryable = describe_error(exc, writing=True)
            raise ZoteroError(f"deleting Zotero collection {name!r}: {reason}", retryable=retryable) from exc
    return f"deleted Zotero collection {name!r}"


def forget_run(settings: Settings, run_id: str, *, documents: bool = False, zotero: bool = False,
               store: Any | None = None) -> ForgetReport:
    """Delete everything Forage wrote for ``run_id`` (see the module docstring).

    ``store``: the store to delete documents from (default: the one recorded in run.json).
    Raises ForageError when there is no such run.
    """
    rundir = find_run_dir(settings.run.runs_dir, run_id)
    if not rundir.path.is_dir():
        raise ForageError(f"no run {run_id!r} in {rundir.path.parent}", retryable=False)
    run_id = rundir.run_id  # the whole id, when a prefix named it
    state = _read_state(rundir)
    report = ForgetReport(run_id=run_id, run_dir=str(rundir.path))
    if documents:
        _delete_documents(settings, rundir, state, report, store)
    if zotero:
        report.zotero = _delete_zotero_collection(settings, run_id)
    report.files_removed = sum(1 for p in rundir.path.rglob("*") if not p.is_dir())
    shutil.rmtree(rundir.path)
    return report


def last_activity(path: Path) -> float:
    """The newest modification time of the run folder or anything in it (seconds since the epoch)."""
    times = [path.stat().st_mtime]
    for p in path.rglob("*"):
        try:
            times.append(p.stat().st_mtime)
        except OSError:
            continue
    return max(times)


def expired_runs(runs_dir: Path, days: int, now: float | None = None) -> list[str]:
    """Runs in ``runs_dir`` whose last activity is more than ``days`` days ago."""
    now = time.time() if now is None else now
    folder = Path(runs_dir).expanduser()
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(p for p in folder.iterdir() if p.is_dir() and RUN_ID.match(p.name)):
        if not (path / "run.json").exists() and not (path / "events.jsonl").exists():
            continue  # not a run folder
        if now - last_activity(path) > days * DAY_S:
            out.append(path.name)
    return out


def forget_expired(settings: Settings, now: float | None = None, days: int | None = None) -> list[ForgetReport]:
    """Forget every run older than ``run.retention_days`` (or ``days``); nothing when retention is off.
    Documents stay in the shared library."""
    days = settings.run.retention_days if days is None else days
    if days is None:
        return []
    return [forget_run(settings, run_id) for run_id in expired_runs(settings.run.runs_dir, days, now)]


def apply_retention(settings: Settings, say: Callable[[str], None] = lambda _: None) -> list[ForgetReport]:
    """The retention sweep run at the start of ``forage research`` and ``forage demo``."""
    gone = forget_expired(settings)
    if gone:
        say(f"retention: forgot {len(gone)} run(s) older than {settings.run.retention_days} days: "
            + ", ".join(r.run_id for r in gone))
    return gone
