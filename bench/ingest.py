"""Ingestion throughput: the 16 shared PDFs through the Ingestor pool, next to parsing and embedding alone.

    .venv/bin/python bench/ingest.py                       # ../shared/data/pdfs, pools of 1 and 2 Ingestors
    .venv/bin/python bench/ingest.py --limit 4 --pools 1   # a quick look

One local Ray (loopback only, as Forage starts it). Measured in the same run:

* **alone**: one Ray task with an Ingestor's CPU reservation (so the same thread limits as an Ingestor)
  parses every PDF one after the other with the configured parser (PyMuPDF here), then chunks them
  (timed apart) and embeds all chunks and their sentence windows (``embed.window_sentences``, as an Ingestor
  writing to LanceDB does) in batches of ``embed.batch_size`` (MiniLM here), nothing stored.
* **pipeline, N Ingestors**: a fresh LanceDB folder, N Ingestor actors created and warmed up (store,
  embedder, parser loaded), then :meth:`actors.ray_crew.RayCrew.ingest` of all PDFs: parse, chunk,
  embed, store, one document per Ingestor at a time, as a research run does.

Printed: documents, pages, chunks; parse and embed seconds alone (pages/s, chunks/s); for each pool the
pipeline's wall time, pages/s, chunks/s and its ratio to parse + embed alone. The goal (issue 4):
pipeline wall ≤ 1.25 × (parse + embed); the rest is overhead (chunking, store writes, Ray).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from infra.settings import Settings  # noqa: E402

GOAL = 1.25


def measure_alone(settings: Settings, paths: list[str]) -> dict:
    """Parse every PDF, then chunk, then embed all chunks; each phase timed on its own. No store writes."""
    from actors.steps.ingest.documents import file_sha256
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from messages.search import Candidate

    parser = build_parser(settings)
    embedder = build_embedder(settings)
    embedder.embed(["warm up the model"])  # loaded before the clock starts, as a ready Ingestor has it
    step = IngestStep(settings, store=None, embedder=embedder, parser=parser)  # type: ignore[arg-type]
    # what an Ingestor writing to the LanceDB store embeds: the chunks and their sentence windows
    step.indexer.window_sentences = settings.embed.window_sentences if settings.store.backend == "lancedb" else 0
    parsed = []
    t = time.perf_counter()
    for p in paths:
        parsed.append(parser.parse(Path(p)))
    parse_s = time.perf_counter() - t
    t = time.perf_counter()
    inputs: list[str] = []
    n_chunks = 0
    for p, doc in zip(paths, parsed, strict=True):
        path = Path(p)
        prepared = step.prepare_parsed(file_sha256(path), Candidate(key=f"file:{path}", path=str(path)), path, doc)
        inputs += prepared.inputs
        n_chunks += len(prepared.chunks)
    chunk_s = time.perf_counter() - t
    batch = settings.embed.batch_size
    t = time.perf_counter()
    for start in range(0, len(inputs), batch):
        embedder.embed(inputs[start:start + batch])
    embed_s = time.perf_counter() - t
    return {"pages": sum(d.n_pages for d in parsed), "chunks": n_chunks, "inputs": len(inputs), "parse_s": parse_s,
            "chunk_s": chunk_s, "embed_s": embed_s, "threads": _threads()}


def _threads() -> int:
    try:
        import torch

        return int(torch.get_num_threads())
    except ImportError:
        return 0


async def pipeline(settings: Settings, paths: list[str]) -> tuple[float, float, list]:
    """(seconds to create and warm the pool, wall seconds of the ingest, results)."""
    from actors.ray_crew import RayCrew
    from messages.ingest import IngestRequest
    from messages.search import Candidate

    crew = RayCrew(settings, "bench-ingest", None, reserve=("ingestor",))  # the pool alone, as reserved in a run
    t = time.perf_counter()
    await crew.start_ingestors()
    warm_s = time.perf_counter() - t
    requests = [IngestRequest(run_id="bench-ingest", candidate=Candidate(key=f"file:{p}", path=p)) for p in paths]
    t = time.perf_counter()
    results = await crew.ingest(requests)
    wall = time.perf_counter() - t
    await crew.close()  # its Ingestors and their reservation
    return warm_s, wall, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pdfs", type=Path, default=REPO.parent / "shared" / "data" / "pdfs")
    ap.add_argument("--limit", type=int, default=0, help="Only the first N PDFs (by name); 0: all.")
    ap.add_argument("--pools", type=int, nargs="+", default=[1, 2], help="Ingestor pool sizes to run.")
    args = ap.parse_args()

    paths = sorted(str(p) for p in args.pdfs.glob("*.pdf"))
    if args.limit:
        paths = paths[:args.limit]
    if not paths:
        raise SystemExit(f"no PDFs in {args.pdfs}")

    import ray

    from actors.options import options_for
    from infra.ray_runtime import start_ray

    work = Path(tempfile.mkdtemp(prefix="forage-bench-ingest-"))
    base = Settings.load(ingest={"parser": "pymupdf", "timeout_s": 3600},
                         run={"runs_dir": str(work / "runs")}, store={"path": str(work / "unused")})
    start_ray(num_cpus=os.cpu_count() or 2, quiet=True)
    try:
        cpus = options_for("ingestor", base, cluster_gpus=0)["num_cpus"]
        alone = ray.get(ray.remote(measure_alone).options(num_cpus=cpus).remote(base, paths))
        docs, pages, chunks = len(paths), alone["pages"], alone["chunks"]
        parse_s, embed_s = alone["parse_s"], alone["embed_s"]
        bound = parse_s + embed_s
        print(f"machine: {os.cpu_count()} cores; parser pymupdf, embedder {base.embed.backend} "
              f"(batch {base.embed.batch_size}, {alone['threads']} torch threads in a task with an Ingestor's "
              f"{cpus} CPU reservation)")
        print(f"documents {docs}, pages {pages}, chunks {chunks}, sentence windows {alone['inputs'] - chunks} "
              f"(embed.window_sentences {base.embed.window_sentences})")
        print(f"alone:    parse {parse_s:7.1f} s ({pages / parse_s:5.2f} pages/s)   chunk {alone['chunk_s']:5.1f} s   "
              f"embed {embed_s:6.1f} s ({chunks / embed_s:6.1f} chunks/s, {alone['inputs'] / embed_s:6.1f} "
              f"texts/s)   parse + embed {bound:7.1f} s")
        for pool in args.pools:
            store = work / f"store-{pool}"
            settings = base.updated(ingest={"pool_size": pool}, store={"path": str(store)})
            warm_s, wall, results = asyncio.run(pipeline(settings, paths))
            stored = sum(r.status == "stored" for r in results)
            failed = [(Path(r.path or r.key).name, r.reason) for r in results if r.status == "failed"]
            print(f"pipeline: {pool} Ingestor{'s' if pool > 1 else ' '} wall {wall:7.1f} s "
                  f"({pages / wall:5.2f} pages/s, {chunks / wall:6.1f} chunks/s)   "
                  f"wall / (parse + embed) = {wall / bound:4.2f} (goal ≤ {GOAL})   "
                  f"{stored}/{docs} stored, pool warm-up {warm_s:.1f} s, "
                  f"inside the Ingestors {sum(r.seconds for r in results):.1f} s")
            for name, reason in failed:
                print(f"          failed: {name}: {reason}")
            shutil.rmtree(store, ignore_errors=True)
    finally:
        ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
