"""Measured retrieval quality on a BEIR-format dataset, through Forage's own ingestion and store.

Three parts, usable on their own:

* **Metrics** (no I/O, no Forage types): nDCG@k, Recall@k, P@k and MRR@k per query, and their mean
  over the judged queries of a split (:func:`evaluate_rankings`). Definitions follow trec_eval /
  BEIR (pytrec_eval): graded gains ``rel`` (not ``2**rel - 1``), discount ``log2(rank + 1)``, the
  ideal ranking from the qrels; a document counts as relevant for Recall / P / MRR when its grade
  is > 0; P@k divides by k even when fewer documents were retrieved. Deviations, on purpose: a
  judged query with no ranking scores 0 (trec_eval ``-c``; pytrec_eval would drop it), queries
  without any document graded > 0 cannot be scored and are left out (and counted), a document
  repeated in a ranking counts once, at its first rank.
* **BEIR folders** (:func:`load_beir`, :meth:`BeirDataset.qrels`): ``corpus.jsonl`` (``_id``,
  ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``), ``qrels/<split>.tsv`` (header
  ``query-id corpus-id score``). Bad or missing files raise :class:`ConfigError` naming the file and line.
* **The run** (:func:`load_corpus`, :func:`run_split`, :func:`tune_fusion`): the corpus goes through
  :meth:`IngestStep.ingest_texts` (outline → chunks → context line → batched embeddings →
  ``store.upsert_document`` per document); each query retrieves chunks with the store's BM25,
  vector or hybrid search, and chunks become documents by their best score (MaxP). A BEIR corpus id
  is the document's key (``beir:<dataset>:<id>``); the doc_id → corpus ids map comes from the ingest
  results (two corpus entries with identical title and text share one stored document).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Literal

from infra.embed.base import Embedder
from infra.errors import ConfigError, ForageError
from infra.settings import Settings
from infra.store.base import DocumentRecord, Hit, Store
from infra.store.fusion import Fusion, fuse
from infra.store.lancedb import LanceStore
from messages.status import Stage

Mode = Literal["bm25", "dense", "hybrid"]
MODES: tuple[Mode, ...] = ("bm25", "dense", "hybrid")
FUSIONS: tuple[Fusion, ...] = ("relative_score", "rrf")
TUNE_ALPHAS: tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PRECISION_AT = 5

Ranking = Sequence[str]
Qrels = Mapping[str, Mapping[str, int]]


# ---------------------------------------------------------------------------------------- metrics

def _unique(ranking: Iterable[str]) -> list[str]:
    """The ranking with repeated documents removed (first rank kept)."""
    return list(dict.fromkeys(ranking))


def dcg(gains: Iterable[float]) -> float:
    """Discounted cumulative gain: sum of gain / log2(rank + 1), ranks from 1."""
    return sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1))


def ndcg_at_k(ranking: Ranking, rels: Mapping[str, int], k: int) -> float:
    """nDCG@k with graded gains ``rel`` (grades <= 0 give nothing); 0 when nothing is relevant."""
    ideal = dcg(sorted((r for r in rels.values() if r > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg(max(rels.get(doc, 0), 0) for doc in _unique(ranking)[:k]) / ideal


def recall_at_k(ranking: Ranking, rels: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (grade > 0) found in the top k."""
    relevant = {doc for doc, r in rels.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(_unique(ranking)[:k])) / len(relevant)


def precision_at_k(ranking: Ranking, rels: Mapping[str, int], k: int) -> float:
    """Relevant documents in the top k, divided by k (also when fewer were retrieved)."""
    return sum(1 for doc in _unique(ranking)[:k] if rels.get(doc, 0) > 0) / k


def mrr_at_k(ranking: Ranking, rels: Mapping[str, int], k: int) -> float:
    """1 / rank of the first relevant document within the top k, else 0."""
    for rank, doc in enumerate(_unique(ranking)[:k], start=1):
        if rels.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def metric_names(k: int) -> tuple[str, str, str, str]:
    """Names of the reported metrics: ndcg@k, recall@k, p@5 (p@k when k < 5), mrr@k."""
    return f"ndcg@{k}", f"recall@{k}", f"p@{min(PRECISION_AT, k)}", f"mrr@{k}"


def score_query(ranking: Ranking, rels: Mapping[str, int], k: int) -> dict[str, float]:
    """Every reported metric for one query."""
    ndcg, recall, precision, mrr = metric_names(k)
    return {ndcg: ndcg_at_k(ranking, rels, k), recall: recall_at_k(ranking, rels, k),
            precision: precision_at_k(ranking, rels, min(PRECISION_AT, k)), mrr: mrr_at_k(ranking, rels, k)}


def judged_queries(qrels: Qrels) -> list[str]:
    """Query ids with at least one document graded > 0, in qrels order (the ones that can be scored)."""
    return [qid for qid, rels in qrels.items() if any(r > 0 for r in rels.values())]


def evaluate_rankings(rankings: Mapping[str, Ranking], qrels: Qrels, k: int = 10) -> dict[str, float]:
    """Mean of each metric over the judged queries; a judged query with no ranking scores 0.

    Rankings of queries absent from the qrels are ignored. Also returns ``n_queries`` (judged
    queries averaged over) and ``n_unjudged`` (queries in the qrels with nothing graded > 0).
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    judged = judged_queries(qrels)
    names = metric_names(k)
    totals = dict.fromkeys(names, 0.0)
    for qid in judged:
        for name, value in score_query(rankings.get(qid, ()), qrels[qid], k).items():
            totals[name] += value
    n = len(judged)
    out = {name: (totals[name] / n if n else 0.0) for name in names}
    out["n_queries"] = n
    out["n_unjudged"] = len(qrels) - n
    return out


def rank_documents(hits: Sequence[Hit], corpus_ids: Mapping[str, Sequence[str]], k: int) -> list[str]:
    """Chunk hits (best first) → the top ``k`` corpus ids, each scored by its best chunk (MaxP).

    Equal scores keep the order in which the documents first appear among the hits (the store
    already breaks its own ties deterministically). Chunks of documents not in ``corpus_ids`` are
    ignored; a stored document shared by several corpus ids ranks each of them, in id order.
    """
    best: dict[str, tuple[float, int]] = {}
    for position, hit in enumerate(hits):
        for cid in corpus_ids.get(hit.chunk.doc_id, ()):
            if cid not in best or hit.score > best[cid][0]:
                best[cid] = (hit.score, best[cid][1] if cid in best else position)
    return sorted(best, key=lambda cid: (-best[cid][0], best[cid][1]))[:k]


# ---------------------------------------------------------------------------------------- BEIR folders

@dataclass(frozen=True)
class BeirDataset:
    """A BEIR folder read into memory: corpus id → (title, text), query id → text."""

    folder: Path
    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]

    @property
    def name(self) -> str:
        return self.folder.name

    def splits(self) -> list[str]:
        """Splits with a qrels file."""
        return sorted(p.stem for p in (self.folder / "qrels").glob("*.tsv"))

    def qrels(self, split: str) -> dict[str, dict[str, int]]:
        """query id → {corpus id: grade} of ``qrels/<split>.tsv``; every query must be in queries.jsonl."""
        path = self.folder / "qrels" / f"{split}.tsv"
        if not path.is_file():
            found = ", ".join(self.splits()) or "none"
            raise ConfigError(f"no qrels for split {split!r}: {path} is missing (splits found: {found})")
        qrels = read_qrels(path)
        unknown = [qid for qid in qrels if qid not in self.queries]
        if unknown:
            raise ConfigError(f"{path}: {len(unknown)} query id(s) are not in queries.jsonl "
                              f"(first: {', '.join(unknown[:3])})")
        return qrels

    def missing_documents(self, qrels: Qrels) -> int:
        """Judged (query, document) pairs whose document is not in the corpus (they can never be found)."""
        return sum(1 for rels in qrels.values() for cid in rels if cid not in self.corpus)


def _jsonl(path: Path) -> Iterable[tuple[int, dict]]:
    if not path.is_file():
        raise ConfigError(f"{path.name} is missing: expected {path}")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path.name} line {number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or "_id" not in row:
                raise ConfigError(f"{path.name} line {number}: an object with an '_id' is expected")
            yield number, row


def _text_field(path: Path, number: int, row: dict, name: str, required: bool) -> str:
    value = row.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"{path.name} line {number}: {name!r} must be a string")
    return value


def read_corpus(path: Path) -> dict[str, tuple[str, str]]:
    """corpus id → (title, text); ``title`` may be missing (empty), ``text`` may not."""
    corpus: dict[str, tuple[str, str]] = {}
    for number, row in _jsonl(path):
        cid = str(row["_id"])
        if cid in corpus:
            raise ConfigError(f"{path.name} line {number}: corpus id {cid!r} appears twice")
        corpus[cid] = (_text_field(path, number, row, "title", False), _text_field(path, number, row, "text", True))
    if not corpus:
        raise ConfigError(f"{path} holds no documents")
    return corpus


def read_queries(path: Path) -> dict[str, str]:
    """query id → text."""
    queries: dict[str, str] = {}
    for number, row in _jsonl(path):
        queries[str(row["_id"])] = _text_field(path, number, row, "text", True)
    if not queries:
        raise ConfigError(f"{path} holds no queries")
    return queries


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """A BEIR qrels TSV (header ``query-id corpus-id score``; CRLF line ends are fine) → query id → {doc: grade}."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as handle:
        rows = csv.reader(handle, delimiter="\t")
        for number, row in enumerate(rows, start=1):
            if not row or not "".join(row).strip():
                continue
            if len(row) != 3:
                raise ConfigError(f"{path.name} line {number}: expected 3 tab-separated columns "
                                  f"(query-id, corpus-id, score), got {len(row)}")
            qid, cid, grade = (cell.strip() for cell in row)
            if number == 1 and not grade.lstrip("-").isdigit():
                continue  # the header
            try:
                value = int(grade)
            except ValueError:
                raise ConfigError(f"{path.name} line {number}: score {grade!r} is not an integer") from None
            qrels.setdefault(qid, {})[cid] = value
    if not qrels:
        raise ConfigError(f"{path} holds no judgements")
    return qrels


def load_beir(folder: Path) -> BeirDataset:
    """Read ``corpus.jsonl`` and ``queries.jsonl`` of a BEIR folder (qrels are read per split)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"BEIR folder not found: {folder}")
    return BeirDataset(folder=folder.resolve(), corpus=read_corpus(folder / "corpus.jsonl"),
                       queries=read_queries(folder / "queries.jsonl"))


# ---------------------------------------------------------------------------------------- the run

@dataclass
class LoadReport:
    """What loading the corpus into the store did, and how long each part took."""

    n_docs: int = 0
    stored: int = 0
    skipped: int = 0
    failed: int = 0
    n_chunks: int = 0
    seconds: float = 0.0
    chunk_s: float = 0.0
    embed_s: float = 0.0
    store_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    corpus_ids: dict[str, list[str]] = field(default_factory=dict)  # doc_id → corpus ids

    def summary(self) -> dict[str, object]:
        return {"n_docs": self.n_docs, "stored": self.stored, "skipped": self.skipped, "failed": self.failed,
                "n_chunks": self.n_chunks, "failures": self.failures[:10]}


def document_key(dataset: str, corpus_id: str) -> str:
    """The store key of a BEIR document."""
    return f"beir:{dataset}:{corpus_id}"


def stored_corpus_ids(documents: Iterable[DocumentRecord]) -> dict[str, list[str]]:
    """doc_id → [corpus id] of the BEIR documents among a store's ``documents`` (keys written by
    :func:`document_key`): what :func:`rank_documents` reads, for a store loaded earlier and kept."""
    keys = {d.doc_id: d.key.split(":", 2) for d in documents}
    return {doc_id: [parts[2]] for doc_id, parts in keys.items() if len(parts) == 3 and parts[0] == "beir"}


def load_corpus(settings: Settings, store: Store, embedder: Embedder, dataset: BeirDataset, *,
                batch_docs: int = 256, run_id: str = "eval",
                progress: Callable[[int, int, float], None] | None = None) -> LoadReport:
    """Store every corpus document through :meth:`IngestStep.ingest_texts`, ``batch_docs`` per call
    (their chunks embedded together, each document upserted on its own).

    Documents already stored with the same content are skipped (a reused store loads nothing
    twice). Raises :class:`ForageError` when no document at all could be stored.
    """
    from actors.steps.ingest.documents import TextDocument
    from actors.steps.ingest.step import IngestStep

    if batch_docs < 1:
        raise ConfigError(f"batch_docs must be at least 1, got {batch_docs}")
    timings = _TimingEmit()
    step = IngestStep(settings, store, embedder, emit=timings)
    report = LoadReport(n_docs=len(dataset.corpus))
    started = perf_counter()
    items = list(dataset.corpus.items())
    for start in range(0, len(items), batch_docs):
        chunk = items[start:start + batch_docs]
        batch = [TextDocument(key=document_key(dataset.name, cid), title=title, text=text,
                              origin=f"{dataset.name}:{cid}") for cid, (title, text) in chunk]
        for (cid, _), result in zip(chunk, step.ingest_texts(run_id, batch), strict=True):
            if result.status == "failed":
                report.failed += 1
                report.failures.append(f"{cid}: {result.reason}")
                continue
            report.stored += result.status == "stored"
            report.skipped += result.status == "skipped"
            report.n_chunks += result.n_chunks if result.status == "stored" else 0
            assert result.doc_id is not None
            report.corpus_ids.setdefault(result.doc_id, []).append(cid)
        if progress is not None:
            progress(start + len(chunk), len(items), perf_counter() - started)
    report.seconds = perf_counter() - started
    report.chunk_s, report.embed_s, report.store_s = (timings.totals[n] for n in ("chunk_s", "embed_s", "store_s"))
    if report.stored + report.skipped == 0:
        raise ForageError(f"no document of {dataset.name} could be stored; first failure: {report.failures[0]}",
                          retryable=False)
    for ids in report.corpus_ids.values():
        ids.sort()
    return report


class _TimingEmit:
    """An Emit that sums the timing fields of ingest events (chunk_s, embed_s, store_s)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {"chunk_s": 0.0, "embed_s": 0.0, "store_s": 0.0}

    def __call__(self, stage: Stage, kind: str, message: str = "", *, iteration: int | None = None,
                 requirement_id: str | None = None, **payload: Any) -> None:
        for name in self.totals:
            if isinstance(payload.get(name), (int, float)):
                self.totals[name] += float(payload[name])


@dataclass
class ModeResult:
    metrics: dict[str, float]
    ms_per_query: float
    rankings: dict[str, list[str]]


@dataclass
class SplitResult:
    split: str
    n_queries: int
    query_embed_ms: float
    modes: dict[str, ModeResult]
    missing_documents: int = 0


def select_queries(qrels: Qrels, limit: int | None) -> list[str]:
    """The judged queries of a split, in qrels order, the first ``limit`` of them when given."""
    judged = judged_queries(qrels)
    return judged if limit is None else judged[:max(0, limit)]


def embed_queries(embedder: Embedder, dataset: BeirDataset, qids: Sequence[str]) -> tuple[dict[str, list[float]], float]:
    """Query vectors (one batched embedder call) and the time per query in ms."""
    started = perf_counter()
    vectors = embedder.embed([dataset.queries[q] for q in qids]) if qids else []
    ms = 1000 * (perf_counter() - started) / max(1, len(qids))
    return dict(zip(qids, vectors)), ms


def search(store: LanceStore, mode: Mode, query: str, vector: Sequence[float], n_chunks: int,
           alpha: float, fusion: Fusion) -> list[Hit]:
    """The store's own BM25, vector or hybrid search for ``n_chunks`` chunks."""
    if mode == "bm25":
        return store.bm25(query, n_chunks)
    if mode == "dense":
        return store.vector(vector, n_chunks)
    if mode == "hybrid":
        return store.hybrid(query, vector, n_chunks, alpha, fusion=fusion)
    raise ConfigError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")


def run_split(store: LanceStore, embedder: Embedder, dataset: BeirDataset, split: str, qrels: Qrels,
              corpus_ids: Mapping[str, Sequence[str]], *, modes: Sequence[Mode] = MODES, k: int = 10,
              n_chunks: int = 40, alpha: float = 0.75, fusion: Fusion = "relative_score",
              limit_queries: int | None = None) -> SplitResult:
    """Every judged query of the split through each mode; metrics over the same queries."""
    if n_chunks < k:
        raise ConfigError(f"chunks per query ({n_chunks}) must be at least k ({k})")
    qids = select_queries(qrels, limit_queries)
    if not qids:
        raise ConfigError(f"split {split!r} has no query with a relevant document to evaluate")
    vectors, embed_ms = embed_queries(embedder, dataset, qids)
    chosen = {q: qrels[q] for q in qids}
    results: dict[str, ModeResult] = {}
    for mode in modes:
        rankings: dict[str, list[str]] = {}
        started = perf_counter()
        for q in qids:
            hits = search(store, mode, dataset.queries[q], vectors[q], n_chunks, alpha, fusion)
            rankings[q] = rank_documents(hits, corpus_ids, k)
        ms = 1000 * (perf_counter() - started) / len(qids)
        results[mode] = ModeResult(evaluate_rankings(rankings, chosen, k), ms, rankings)
    return SplitResult(split, len(qids), embed_ms, results, dataset.missing_documents(chosen))


@dataclass(frozen=True)
class TunePoint:
    alpha: float
    fusion: Fusion
    metrics: dict[str, float]


def tune_fusion(store: LanceStore, embedder: Embedder, dataset: BeirDataset, qrels: Qrels,
                corpus_ids: Mapping[str, Sequence[str]], *, k: int = 10, n_chunks: int = 40,
                alphas: Sequence[float] = TUNE_ALPHAS, fusions: Sequence[Fusion] = FUSIONS,
                limit_queries: int | None = None) -> list[TunePoint]:
    """Grid search of (alpha, fusion) for hybrid search, best nDCG@k first.

    Each query's BM25 and vector candidate lists are fetched once (the sizes ``store.hybrid`` uses:
    ``n_chunks * store.hybrid_candidates`` per side) and fused for every grid point with the
    store's own :func:`~infra.store.fusion.fuse` — the same result ``store.hybrid`` returns.
    """
    qids = select_queries(qrels, limit_queries)
    if not qids:
        raise ConfigError("the tuning split has no query with a relevant document")
    vectors, _ = embed_queries(embedder, dataset, qids)
    pool = n_chunks * store.hybrid_candidates
    sides = {q: (store.bm25(dataset.queries[q], pool), store.vector(vectors[q], pool)) for q in qids}
    chosen = {q: qrels[q] for q in qids}
    points = []
    for fusion in fusions:
        for alpha in alphas:
            rankings = {q: rank_documents(fuse(lexical, semantic, alpha, n_chunks, fusion), corpus_ids, k)
                        for q, (lexical, semantic) in sides.items()}
            points.append(TunePoint(alpha, fusion, evaluate_rankings(rankings, chosen, k)))
    ndcg = metric_names(k)[0]
    return sorted(points, key=lambda p: (-p.metrics[ndcg], p.fusion, p.alpha))


# ---------------------------------------------------------------------------------------- the whole command

def _mode_json(result: ModeResult) -> dict[str, float]:
    return {name: round(value, 4) if isinstance(value, float) else value for name, value in result.metrics.items()
            if name not in ("n_queries", "n_unjudged")}


def evaluate_retrieval(settings: Settings, folder: Path, *, modes: Sequence[Mode] = MODES, k: int = 10,
                       alpha: float | None = None, fusion: Fusion | None = None, split: str = "test",
                       store_path: Path | None = None, n_chunks: int | None = None,
                       limit_queries: int | None = None, tune: bool = False, tune_split: str = "train",
                       tune_limit: int | None = None, batch_docs: int = 256,
                       progress: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """Load the BEIR folder into a store (a temporary one unless ``store_path``), evaluate the split
    per mode and, with ``tune``, grid-search hybrid fusion on ``tune_split`` (its first ``tune_limit``
    judged queries when given) and evaluate the best setting on ``split`` too. Returns the
    JSON-ready results. Timings: the model is loaded (``model_load_s``) before the corpus load is
    timed, so ``load_s`` is chunking, embedding and storing only.

    All input is checked (folder, files, splits, numbers) before anything is embedded.
    """
    import tempfile

    from infra.embed import build_embedder
    from infra.store import build_store

    alpha = settings.store.hybrid_alpha if alpha is None else alpha
    fusion = settings.store.hybrid_fusion if fusion is None else fusion
    n_chunks = 4 * k if n_chunks is None else n_chunks
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}")
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha must be within [0, 1], got {alpha}")
    if fusion not in FUSIONS:
        raise ConfigError(f"unknown fusion {fusion!r}; use one of {', '.join(FUSIONS)}")
    if n_chunks < k:
        raise ConfigError(f"chunks per query ({n_chunks}) must be at least k ({k})")
    for name, limit in (("--limit-queries", limit_queries), ("--tune-limit", tune_limit)):
        if limit is not None and limit < 1:
            raise ConfigError(f"{name} must be at least 1, got {limit}")
    dataset = load_beir(folder)
    qrels = dataset.qrels(split)
    tune_qrels = dataset.qrels(tune_split) if tune else None

    with tempfile.TemporaryDirectory(prefix="forage-eval-") as tmp:
        path = Path(store_path).expanduser() if store_path is not None else Path(tmp) / "store"
        run_settings = settings.updated(store={"path": path})
        store = build_store(run_settings)
        if not isinstance(store, LanceStore):
            raise ConfigError(f"eval retrieval needs the LanceDB store (hybrid fusion options); got {store.name}")
        embedder = build_embedder(run_settings)
        started = perf_counter()
        embedder.embed(["load the model"])
        model_load_s = perf_counter() - started
        report = load_corpus(run_settings, store, embedder, dataset, batch_docs=batch_docs, progress=progress)
        started = perf_counter()
        if report.stored:
            store.optimize()  # fold the new chunks into the BM25 index: searches then read the index only
        index_s = perf_counter() - started
        result = run_split(store, embedder, dataset, split, qrels, report.corpus_ids, modes=modes, k=k,
                           n_chunks=n_chunks, alpha=alpha, fusion=fusion, limit_queries=limit_queries)
        out: dict[str, Any] = {
            "dataset": dataset.name, "folder": str(dataset.folder), "split": split, "k": k, "alpha": alpha,
            "fusion": fusion, "chunks_per_query": n_chunks, "embedder": embedder.name,
            "store": str(path) if store_path is not None else None,
            "n_queries": result.n_queries, "n_docs": len(dataset.corpus), "n_chunks": store.count_chunks(),
            "qrels_docs_missing_from_corpus": result.missing_documents,
            "load": report.summary(),
            "metrics": {mode: _mode_json(r) for mode, r in result.modes.items()},
            "timings": {
                "model_load_s": round(model_load_s, 2), "load_s": round(report.seconds, 2),
                "chunk_s": round(report.chunk_s, 2),
                "embed_s": round(report.embed_s, 2), "store_s": round(report.store_s, 2),
                "index_s": round(index_s, 2), "query_embed_ms": round(result.query_embed_ms, 2),
                "per_query_ms": {mode: round(r.ms_per_query, 2) for mode, r in result.modes.items()},
            },
        }
        if tune_qrels is not None:
            points = tune_fusion(store, embedder, dataset, tune_qrels, report.corpus_ids, k=k, n_chunks=n_chunks,
                                 limit_queries=tune_limit)
            best = points[0]
            check = run_split(store, embedder, dataset, split, qrels, report.corpus_ids, modes=("hybrid",), k=k,
                              n_chunks=n_chunks, alpha=best.alpha, fusion=best.fusion, limit_queries=limit_queries)
            metric = metric_names(k)[0]
            out["tune"] = {
                "split": tune_split, "n_queries": int(best.metrics["n_queries"]), "metric": metric,
                "grid": [{"alpha": p.alpha, "fusion": p.fusion, metric: round(p.metrics[metric], 4)} for p in points],
                "best": {"alpha": best.alpha, "fusion": best.fusion, metric: round(best.metrics[metric], 4)},
                split: _mode_json(check.modes["hybrid"]),
            }
    return out
