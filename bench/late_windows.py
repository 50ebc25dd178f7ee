"""Sentence-window vectors from the chunk's own forward pass ("late chunking", issue 48) against the chunk vectors
alone, on a BEIR set's dense side, offline (no store):

    .venv/bin/python bench/late_windows.py                          # SciFact test, every pooling below
    .venv/bin/python bench/late_windows.py --split train --limit-docs 2000

Each corpus document is cut as the ingest step cuts it (outline → token-window chunks → context line; the sentence
windows as spans of the chunk's string) and read by MiniLM once per chunk; a window's vector is the mean of that
pass's token embeddings over:

* ``span``: the window's own tokens;
* ``lead+span``: the context line's tokens and the window's;
* ``cls+lead+span+sep``: as the window would be read as a text of its own ([CLS], lead, window, [SEP]; what
  ``MiniLMEmbedder.embed_windowed`` ships);
* ``chunk-mix β``: β × span + (1 − β) × the chunk's own vector.

A chunk scores the best of its own cosine and its windows' (the store's rule, docs/retrieval.md), a document its best
chunk; nDCG@10 over the split's queries, against every chunk and document (exhaustive, so the store's candidate
pool plays no part). ``--separate N`` also embeds the windows of the first N documents as texts of their own (what
the ingest step did before) for a like-for-like sample. Prints one row per pooling.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from actors.steps.evaluation.retrieval import evaluate_rankings, load_beir  # noqa: E402
from actors.steps.ingest.documents import text_markdown  # noqa: E402
from actors.steps.ingest.step import IngestStep  # noqa: E402
from infra.embed.minilm import MiniLMEmbedder  # noqa: E402
from infra.settings import Settings  # noqa: E402

SHARED = REPO.parent / "shared" / "data"


class _NoStore:
    """Enough of a store for :meth:`IngestStep._prepare` (it reads nothing) with windows kept."""

    keeps_windows = True


def prepared(step: IngestStep, corpus: dict) -> list[tuple[str, list]]:
    """(corpus id, the chunks' Windowed items) per document, cut as the ingest step cuts them."""
    out = []
    for cid, (title, text) in corpus.items():
        markdown = text_markdown(title, text)
        item = step.indexer.prepare(cid, cid, markdown, outline_title=title or None, title=title or None,
                             fallback_title=cid, page_spans=(), authors=(), year=None, parser="text", flags=(),
                             origin=cid)
        out.append((cid, item.items))
    return out


def unit(v: np.ndarray) -> np.ndarray:
    return v / max(float(np.linalg.norm(v)), 1e-12)


POOLINGS = ("span", "lead+span", "cls+lead+span+sep", "chunk-mix 0.5", "chunk-mix 0.75")


def poolings(item, tokens, offsets) -> dict[str, list[np.ndarray]]:
    """Each pooling's window vectors for one chunk (a window its pass did not reach: the chunk's own vector)."""
    t = tokens.numpy()
    own = unit(t.mean(axis=0))
    special = [k for k, (a, b) in enumerate(offsets) if a == b]
    lead = [k for k, (a, b) in enumerate(offsets) if a < b and b <= item.lead]
    out: dict[str, list[np.ndarray]] = {name: [] for name in POOLINGS}
    for first, last in item.windows:
        inside = [k for k, (a, b) in enumerate(offsets) if a < b and a < last and b > first and a >= item.lead]
        if not inside:  # every pooling gets the chunk's own vector, so the lists stay aligned with the windows
            for vectors in out.values():
                vectors.append(own)
            continue
        span = unit(t[inside].mean(axis=0))
        rows = {"span": span, "lead+span": unit(t[lead + inside].mean(axis=0)),
                "cls+lead+span+sep": unit(t[special + lead + inside].mean(axis=0))}
        for beta in (0.5, 0.75):
            rows[f"chunk-mix {beta}"] = unit(beta * span + (1 - beta) * own)
        for name, vector in rows.items():
            out[name].append(vector)
    return out


def rank(query_vecs: np.ndarray, chunk_vecs: np.ndarray, chunk_doc: np.ndarray, window_vecs: np.ndarray | None,
         window_chunk: np.ndarray, n_docs: int, qids: list[str], doc_ids: list[str]) -> dict:
    """Top 10 documents per query: chunk score = max(own, its windows), document = its best chunk."""
    chunk_scores = query_vecs @ chunk_vecs.T
    if window_vecs is not None and len(window_vecs):
        window_scores = query_vecs @ window_vecs.T
        np.maximum.at(chunk_scores.T, window_chunk, window_scores.T)
    doc_scores = np.full((len(query_vecs), n_docs), -np.inf, dtype=np.float32)
    np.maximum.at(doc_scores.T, chunk_doc, chunk_scores.T)
    top = np.argsort(-doc_scores, axis=1)[:, :10]
    return {q: [doc_ids[d] for d in top[i]] for i, q in enumerate(qids)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--beir", type=Path, default=SHARED / "beir-scifact")
    ap.add_argument("--split", default="test")
    ap.add_argument("--limit-docs", type=int, default=0, help="only the first N corpus documents (0: all)")
    ap.add_argument("--separate", type=int, default=0, help="also embed the windows of the first N documents as "
                    "texts of their own and score that sample every way")
    args = ap.parse_args()
    dataset = load_beir(args.beir)
    corpus = dict(list(dataset.corpus.items())[:args.limit_docs or None])
    settings = Settings.load()
    embedder = MiniLMEmbedder(precision=settings.embed.precision)
    step = IngestStep(settings, _NoStore(), embedder)  # type: ignore[arg-type]
    docs = prepared(step, corpus)
    items = [(d, item) for d, (_, chunks) in enumerate(docs) for item in chunks]
    print(f"{len(docs)} documents, {len(items)} chunks, {sum(len(i.windows) for _, i in items)} windows")
    started = time.perf_counter()
    states = embedder.token_states([item.text for _, item in items])
    print(f"one pass per chunk: {time.perf_counter() - started:.1f} s")
    chunk_vecs = np.stack([unit(t.numpy().mean(axis=0)) for t, _ in states]).astype(np.float32)
    chunk_doc = np.array([d for d, _ in items])
    windows: dict[str, list[np.ndarray]] = {}
    window_chunk: list[int] = []
    for c, ((_, item), (tokens, offsets)) in enumerate(zip(items, states, strict=True)):
        for name, vectors in poolings(item, tokens, offsets).items():
            windows.setdefault(name, []).extend(vectors)  # every pooling, every window: aligned with window_chunk
        window_chunk.extend([c] * len(item.windows))
    qrels = {q: rels for q, rels in dataset.qrels(args.split).items() if any(d in corpus for d in rels)}
    qids = sorted(qrels)
    query_vecs = np.array(embedder.embed([dataset.queries[q] for q in qids]), dtype=np.float32)
    doc_ids = [cid for cid, _ in docs]
    wc = np.array(window_chunk, dtype=np.int64)
    rows = {"chunks alone": None, **{name: np.stack(v).astype(np.float32) for name, v in windows.items()}}
    if args.separate:
        sample = [(c, item) for c, (d, item) in enumerate(items) if d < args.separate]
        texts = [t for _, item in sample for t in item.window_texts()]
        started = time.perf_counter()
        separate = np.array(embedder.embed(texts), dtype=np.float32)
        print(f"separate windows of the first {args.separate} documents: {len(texts)} passes, "
              f"{time.perf_counter() - started:.1f} s")
        in_sample = np.array([d < args.separate for d, _ in items])
        keep = np.array([in_sample[c] for c in window_chunk])
        sample_docs = {doc_ids[d] for d in range(min(args.separate, len(doc_ids)))}
        sample_qids = [q for q in qids if any(d in sample_docs for d in qrels[q])]
        sq = query_vecs[[qids.index(q) for q in sample_qids]]
        chunk_mask = in_sample
        print(f"sample: {len(sample_qids)} queries over {len(sample_docs)} documents")
        for name, vecs in [("separate (before)", separate), *((n, v[keep]) for n, v in rows.items() if v is not None),
                           ("chunks alone", None)]:
            ranking = rank(sq, chunk_vecs[chunk_mask], chunk_doc[chunk_mask], vecs,
                           np.searchsorted(np.flatnonzero(chunk_mask), wc[keep]), len(doc_ids), sample_qids, doc_ids)
            m = evaluate_rankings(ranking, {q: qrels[q] for q in sample_qids})
            print(f"  sample {name:22s} nDCG@10 {m['ndcg@10']:.4f}  recall@10 {m['recall@10']:.4f}")
    for name, vecs in rows.items():
        ranking = rank(query_vecs, chunk_vecs, chunk_doc, vecs, wc, len(doc_ids), qids, doc_ids)
        m = evaluate_rankings(ranking, qrels)
        print(f"{name:22s} dense nDCG@10 {m['ndcg@10']:.4f}  recall@10 {m['recall@10']:.4f}  ({len(qids)} queries)")


if __name__ == "__main__":
    main()
