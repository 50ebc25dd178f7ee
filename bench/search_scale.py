"""Search at library scale: LanceDB stores of 10k, 100k (and 1M) chunks, flat vs an ANN vector index.

    FORAGE_INGEST__CACHE_DIR=… .venv/bin/python bench/search_scale.py                  # 10k and 100k
    FORAGE_INGEST__CACHE_DIR=… .venv/bin/python bench/search_scale.py --sizes 1000000  # a lab library
    .venv/bin/python bench/search_scale.py --index IVF_HNSW_SQ,IVF_PQ --search "default;ef=200;refine=4"
    .venv/bin/python bench/search_scale.py --sizes 1000000 --keep /data/scale --reuse ...   # measure a kept store again
    .venv/bin/python bench/search_scale.py --seed-store /tmp/scifact  # seed from `forage eval retrieval --store`

The texts and vectors are real where they can be: the 5,183 SciFact abstracts are chunked and embedded by the
product's own ingestion (MiniLM; the ingest cache makes a second run free), and their chunks are repeated to the
size asked, each copy with a word of variation in its text (so BM25 sees distinct rows) and its vector moved by
small Gaussian noise and normalised again (so the vectors keep the real clusters without being duplicates). The
queries are the SciFact test claims, embedded by the same model. Each chunk's sentence-window vectors
(embed.window_sentences) are copied with it, moved by the same noise.

Per size it prints: the load time (documents written through ``upsert_documents`` in batches, then the store's own
``optimize``: BM25 index), the exact (flat) vector / BM25 / hybrid latency p50 and p95 over the queries (top 20),
the index build time (``LanceStore.build_vector_index``), the same latencies with the index, and **recall@20** of
the indexed vector and hybrid searches against the flat ones (the share of the flat top 20 found), for each index
type of ``--index`` and each search-time setting of ``--search`` (HNSW ``ef``, re-rank ``refine`` factor, IVF
``nprobes``). A filtered
search (the query's own top document excluded by ``doc_ids``) checks that filters stay exact with the index.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from infra.settings import Settings  # noqa: E402

K = 20


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000


def seed_corpus(beir: Path, cache: Path | None, seed_store: Path | None = None
                ) -> tuple[list, list, list[str], np.ndarray]:
    """(documents, their chunks, the test claims, their vectors) from SciFact through the product's ingestion (or
    read from ``seed_store``, a store that `forage eval retrieval --store` loaded); each chunk comes with its vector
    and its sentence-window vectors (embed.window_sentences)."""
    from actors.steps.evaluation.retrieval import load_beir, load_corpus
    from infra.embed import build_embedder
    from infra.store import build_store

    dataset = load_beir(beir)
    with tempfile.TemporaryDirectory(prefix="forage-scale-seed-") as tmp:
        settings = Settings.load().updated(store={"path": seed_store or Path(tmp) / "store"},
                                           ingest={"cache_dir": cache} if cache else {})
        store, embedder = build_store(settings), build_embedder(settings)
        t = time.perf_counter()
        if seed_store is None:
            load_corpus(settings, store, embedder, dataset)
            print(f"seed: {len(dataset.corpus)} SciFact abstracts ingested in {time.perf_counter() - t:.1f}s")
        exported = [(d, cs, vs, store.windows_of(d.doc_id) or [[] for _ in cs])
                    for d, cs, vs in store.export_documents()]
        claims = [dataset.queries[q] for q in sorted(dataset.qrels("test"))]
        vectors = np.asarray(embedder.embed(claims), dtype=np.float32)
    return [d for d, *_ in exported], [(c, np.asarray(v, dtype=np.float32), np.asarray(w, dtype=np.float32))
                                       for _, cs, vs, ws in exported
                                       for c, v, w in zip(cs, vs, ws, strict=True)], claims, vectors


def build(path: Path, size: int, docs: list, chunks: list, rng: np.random.Generator) -> tuple[object, float]:
    """A LanceStore of ``size`` chunks: the seed chunks repeated, texts and vectors varied (see the docstring)."""
    from infra.store.base import DocumentRecord
    from infra.store.lancedb import LanceStore

    store = LanceStore(path, dim=384, auto_optimize_rows=None)
    by_doc: dict[str, list] = {}
    for chunk, vector, windows in chunks:
        by_doc.setdefault(chunk.doc_id, []).append((chunk, vector, windows))
    seeds = [(d, by_doc[d.doc_id]) for d in docs if d.doc_id in by_doc]
    started = time.perf_counter()
    written, copy, batch = 0, 0, []
    while written < size:
        for doc, items in seeds:
            if written >= size:
                break
            doc_id = f"{copy:04d}{doc.doc_id[4:]}"
            new_doc = DocumentRecord.model_validate({**doc.model_dump(), "doc_id": doc_id,
                                                     "key": f"{doc.key}#copy{copy}"})
            new_chunks, vectors, windows = [], [], []
            for chunk, vector, own_windows in items[: size - written]:
                text = chunk.text if copy == 0 else f"{chunk.text} variant{copy}"
                new_chunks.append(chunk.model_copy(update={"doc_id": doc_id, "text": text,
                                                           "chunk_id": f"{doc_id[:16]}:{chunk.ordinal}"}))
                moved = vector if copy == 0 else vector + rng.normal(0, 0.02, vector.shape).astype(np.float32)
                vectors.append(moved / np.linalg.norm(moved))
                if copy and len(own_windows):
                    own_windows = own_windows + rng.normal(0, 0.02, own_windows.shape).astype(np.float32)
                windows.append(own_windows)
            batch.append((new_doc, new_chunks, vectors, windows))
            written += len(new_chunks)
            if len(batch) >= 500:
                store.upsert_documents(batch)
                batch = []
        copy += 1
    if batch:
        store.upsert_documents(batch)
    store.optimize()
    return store, time.perf_counter() - started


def measure(store, claims: list[str], vectors: np.ndarray, alpha: float) -> dict:  # noqa: ANN001
    """p50/p95 (ms) of vector, BM25 and hybrid top-K over the queries, and what each returned."""
    out: dict = {}
    for name, call in (("vector", lambda c, v: store.vector(v, K)), ("bm25", lambda c, v: store.bm25(c, K)),
                       ("hybrid", lambda c, v: store.hybrid(c, v, K, alpha))):
        call(claims[0], vectors[0])  # warm: tables opened, indexes in the page cache
        times, results = [], []
        for claim, vector in zip(claims, vectors, strict=True):
            t = time.perf_counter()
            hits = call(claim, vector)
            times.append(time.perf_counter() - t)
            results.append([h.chunk.chunk_id for h in hits])
        p50, p95 = percentiles(times)
        out[name] = {"p50_ms": round(p50, 1), "p95_ms": round(p95, 1), "results": results}
    return out


def recall(exact: list[list[str]], approx: list[list[str]]) -> float:
    return round(sum(len(set(a) & set(e)) / max(1, len(e)) for e, a in zip(exact, approx, strict=True))
                 / max(1, len(exact)), 4)


def search_configs(text: str) -> list[dict[str, int]]:
    """'default;ef=100;ef=200,refine=2' → [{}, {'ef': 100}, {'ef': 200, 'refine': 2}] (store ann_* settings)."""
    configs = []
    for part in text.split(";"):
        part = part.strip()
        config: dict[str, int] = {}
        if part and part != "default":
            for item in part.split(","):
                name, _, value = item.partition("=")
                if name.strip() not in ("ef", "refine", "nprobes"):
                    raise SystemExit(f"unknown search setting {name!r}: use ef, refine or nprobes")
                config[name.strip()] = int(value)
        configs.append(config)
    return configs


def configured(store, config: dict[str, int]) -> str:  # noqa: ANN001
    """Set the store's search-time ANN settings (the product's defaults where ``config`` names none; refine=0: no
    re-rank); a label for them."""
    defaults = Settings().store
    store.ann_ef = config.get("ef", defaults.ann_ef)
    store.ann_refine = config.get("refine", defaults.ann_refine) or None
    store.ann_nprobes = config.get("nprobes", defaults.ann_nprobes)
    return ",".join(f"{k}={v}" for k, v in config.items()) or "default"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=REPO.parent / "shared" / "data" / "beir-scifact")
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="build the stores under this folder and keep them")
    ap.add_argument("--seed-store", type=Path,
                    help="read the seed chunks (vectors and window vectors) from this SciFact store, one that "
                         "`forage eval retrieval --store` loaded, instead of ingesting the abstracts again")
    ap.add_argument("--reuse", action="store_true",
                    help="with --keep: use a kept store of the size asked for (and its index when of the type "
                         "asked for) instead of building it again")
    ap.add_argument("--index", default="IVF_HNSW_SQ", help="index types to build in turn: IVF_HNSW_SQ,IVF_PQ")
    ap.add_argument("--search", default="default",
                    help="search-time settings measured on each index, ';'-separated: "
                         "'default;ef=100;ef=200,refine=2' (ef: HNSW list, refine: re-rank factor, 0 for none, "
                         "nprobes); 'default' is the product's settings")
    args = ap.parse_args()
    if args.reuse and not args.keep:
        ap.error("--reuse needs --keep DIR")
    configs = search_configs(args.search)
    kinds = [k.strip().upper() for k in args.index.split(",") if k.strip()]

    settings = Settings.load()
    cache = settings.ingest.cache_dir
    docs, chunks, claims, vectors = seed_corpus(args.beir, cache, args.seed_store)
    claims, vectors = claims[: args.queries], vectors[: args.queries]
    print(f"seed: {len(docs)} documents, {len(chunks)} chunks ({sum(len(w) for *_, w in chunks)} sentence windows); "
          f"{len(claims)} queries; top {K}")
    rng = np.random.default_rng(0)
    random.seed(0)
    rows = []
    root = args.keep or Path(tempfile.mkdtemp(prefix="forage-scale-"))
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            from infra.store.lancedb import LanceStore

            path = root / f"store-{size}"
            store = LanceStore(path, dim=384, auto_optimize_rows=None) if args.reuse and path.exists() else None
            if store is not None and store.count_chunks() == size:
                load_s = None
                print(f"\n{size:,} chunks: reusing {path}")
            else:
                shutil.rmtree(path, ignore_errors=True)
                store, load_s = build(path, size, docs, chunks, rng)
            cached = path.with_name(f"{path.name}.flat-{len(claims)}.json")  # a kept store's exact results
            if load_s is None and cached.exists():
                flat = json.loads(cached.read_text())
                print(f"exact results and timings read from {cached}")
            else:
                store.exact_vector = True  # the reference: every row scanned, even where a kept store has an index
                flat = measure(store, claims, vectors, settings.store.hybrid_alpha)
                store.exact_vector = False
                if args.keep:
                    cached.write_text(json.dumps(flat))
            print(f"\n{store.count_chunks():,} chunks" + (f": loaded in {load_s:.1f}s" if load_s else " (reused)"))
            print(f"{'':30} {'vector p50/p95 ms':>18} {'bm25 p50/p95':>14} {'hybrid p50/p95':>16} "
                  f"{'recall@20 vector / hybrid':>26}")
            line = "{:30} {:>8} / {:<8} {:>6} / {:<6} {:>7} / {:<7} {:>12} / {:<12}"
            print(line.format("flat (exact scan)", flat["vector"]["p50_ms"], flat["vector"]["p95_ms"],
                              flat["bm25"]["p50_ms"], flat["bm25"]["p95_ms"], flat["hybrid"]["p50_ms"],
                              flat["hybrid"]["p95_ms"], 1.0, 1.0))
            row = {"chunks": store.count_chunks(), "load_s": None if load_s is None else round(load_s, 1),
                   "flat": {k: {m: v[m] for m in ("p50_ms", "p95_ms")} for k, v in flat.items()}, "indexes": []}
            for kind in kinds:
                current = store.vector_index()
                store.vector_index_type = kind
                if args.reuse and current is not None and current.get("type") == kind:
                    index, build_s = current, None
                else:
                    t = time.perf_counter()
                    index = store.build_vector_index(force=True)
                    build_s = time.perf_counter() - t
                print(f"index {index}" + (f" built in {build_s:.1f}s" if build_s is not None else " (reused)"))
                entry = {"index": index, "build_s": None if build_s is None else round(build_s, 1), "search": []}
                for config in configs:
                    label = configured(store, config)
                    ann = measure(store, claims, vectors, settings.store.hybrid_alpha)
                    recall_v = recall(flat["vector"]["results"], ann["vector"]["results"])
                    recall_h = recall(flat["hybrid"]["results"], ann["hybrid"]["results"])
                    print(line.format(f"{kind} {label}", ann["vector"]["p50_ms"], ann["vector"]["p95_ms"],
                                      ann["bm25"]["p50_ms"], ann["bm25"]["p95_ms"], ann["hybrid"]["p50_ms"],
                                      ann["hybrid"]["p95_ms"], recall_v, recall_h))
                    entry["search"].append({"settings": label, **{k: {m: v[m] for m in ("p50_ms", "p95_ms")}
                                                                  for k, v in ann.items()},
                                            "recall_at_20_vector": recall_v, "recall_at_20_hybrid": recall_h})
                configured(store, {})
                # filters stay exact with the index: each query's own best document excluded
                from infra.store import ChunkFilter

                leaks = 0
                for vector, top in zip(vectors[:50], flat["vector"]["results"][:50], strict=True):
                    banned = top[0].split(":")[0] if top else ""
                    keep = [d for d in store.document_ids(ChunkFilter()) if not d.startswith(banned)][:2000]
                    hits = store.vector(vector, K, ChunkFilter(doc_ids=tuple(keep)))
                    leaks += sum(h.chunk.doc_id not in set(keep) for h in hits)
                entry["filtered_results_outside_filter"] = leaks
                print(f"results outside a doc_ids filter: {leaks}")
                row["indexes"].append(entry)
            rows.append(row)
            if not args.keep:
                shutil.rmtree(path, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.out:
        args.out.write_text(json.dumps({"k": K, "queries": len(claims), "sizes": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
