"""A lab's library at scale: `forage library add`'s parallel ingestion (actors/steps/ingest/parallel.py) over N PDFs.

    .venv/bin/python bench/library_scale.py                     # 40 PDFs, 1 and 2 parse workers
    .venv/bin/python bench/library_scale.py --n 200 --workers 1 2 4
    .venv/bin/python bench/library_scale.py --parse-only        # parsing alone (no embedder, no store)

The library is made of the shared and pdfs-extra papers, copied with a few bytes appended after the end of each
file (a valid PDF, a new content hash), round after round until N files, so that every file is new to the store.
For each number of workers, in a fresh LanceDB folder with the configured embedder (MiniLM here):

* **parse**: the files through the worker processes alone (pages/s; the speed-up over one worker);
* **ingest**: the whole add — parse in the workers, chunk, embed several documents per call, store — pages/s,
  chunks/s, and the model's inputs per chunk (forward-pass rows per chunk: 1.0 where MiniLM pools each sentence
  window from its chunk's own pass; a chunk plus each of its windows for a model behind a server).

Then a projection for a workstation of ``--cores`` cores and a GPU embedding ``--gpu-texts-per-s`` (1,361 at batch
64 on an H200, issue 48): parse pages/s per core times the cores, against the GPU's texts/s over inputs per page.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pebble import ProcessPool  # noqa: E402

from actors.steps.ingest.parallel import ParallelIngest, parse_file  # noqa: E402
from actors.steps.ingest.step import IngestStep  # noqa: E402
from actors.steps.search.library import file_key  # noqa: E402
from infra.embed import build_embedder  # noqa: E402
from infra.embed.minilm import MiniLMEmbedder  # noqa: E402
from infra.pdf import build_parser  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store.lancedb import LanceStore  # noqa: E402
from messages.search import Candidate  # noqa: E402

SHARED = REPO.parent / "shared" / "data"


def make_library(folder: Path, n: int, sources: list[Path]) -> list[Path]:
    """``n`` distinct PDFs in ``folder``: the source PDFs copied round after round, each copy with its round
    number appended after the end of the file (readers ignore it; the content hash changes)."""
    pdfs = sorted(p for source in sources for p in source.glob("*.pdf"))
    if not pdfs:
        raise SystemExit(f"no PDFs under {', '.join(map(str, sources))}")
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    for i in range(n):
        source = pdfs[i % len(pdfs)]
        target = folder / f"{i // len(pdfs):03d}-{source.name}"
        shutil.copyfile(source, target)
        with target.open("ab") as f:
            f.write(f"\n% copy {i // len(pdfs)}\n".encode())
        made.append(target)
    return made


class CountingEmbedder:
    """The configured embedder, counting the texts its model reads (forward-pass rows): MiniLM counts them itself (a
    window pooled from its chunk's pass reads nothing); a server reads every chunk and every window."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name, self.dim = inner.name, inner.dim
        self._counted = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def texts(self) -> int:
        return self.inner.inputs_read if isinstance(self.inner, MiniLMEmbedder) else self._counted

    def reset(self) -> None:
        if isinstance(self.inner, MiniLMEmbedder):
            self.inner.inputs_read = 0
        self._counted = 0

    def embed(self, texts):
        self._counted += len(texts)
        return self.inner.embed(texts)

    def embed_windowed(self, items):
        self._counted += len(items) + sum(len(item.windows) for item in items)
        return self.inner.embed_windowed(items)


def parse_only(parser, paths: list[Path], workers: int, timeout_s: float) -> tuple[float, int]:
    """Seconds and pages to parse ``paths`` with ``workers`` processes (the worker start included)."""
    started = time.perf_counter()
    pages = 0
    with ProcessPool(max_workers=workers, context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.schedule(parse_file, (parser, str(p), p.name, None), timeout=timeout_s) for p in paths]
        for future in concurrent.futures.as_completed(futures):
            try:
                pages += future.result()[0].n_pages
            except Exception as exc:  # noqa: BLE001 - a broken file is counted out, the bench goes on
                print(f"  skipped: {exc}")
    return time.perf_counter() - started, pages


def ingest(settings: Settings, paths: list[Path], workers: int, store_dir: Path) -> dict:
    parser = build_parser(settings)
    embedder = CountingEmbedder(build_embedder(settings))
    embedder.embed(["warm up"])  # the model's load is not the library's time
    embedder.reset()
    store = LanceStore(store_dir, dim=embedder.dim)
    step = IngestStep(settings, store, embedder, parser)
    candidates = [Candidate(key=file_key(p), source="library", path=str(p), found_by="bench") for p in paths]
    pages = 0

    def progress(state, result) -> None:
        nonlocal pages
        pages = state.pages

    started = time.perf_counter()
    results = ParallelIngest(step, parser, workers, progress=progress).ingest("bench-library", candidates)
    seconds = time.perf_counter() - started
    chunks = sum(r.n_chunks for r in results if r.status == "stored")
    return {"seconds": seconds, "pages": pages, "chunks": chunks, "texts": embedder.texts,
            "stored": sum(r.status == "stored" for r in results), "failed": sum(r.status == "failed" for r in results)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="PDFs in the library")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--sources", type=Path, nargs="+", default=[SHARED / "pdfs", SHARED / "pdfs-extra"])
    ap.add_argument("--parse-only", action="store_true", help="time parsing alone")
    ap.add_argument("--cores", type=int, default=16, help="cores of the projected workstation")
    ap.add_argument("--gpu-texts-per-s", type=float, default=1361.0, help="the projected GPU's embedding rate")
    args = ap.parse_args()
    settings = Settings.load()
    with tempfile.TemporaryDirectory(prefix="forage-library-scale-") as tmp:
        paths = make_library(Path(tmp) / "papers", args.n, args.sources)
        print(f"library: {len(paths)} PDFs from {', '.join(str(s) for s in args.sources)}")
        parse_rates: dict[int, float] = {}
        for workers in args.workers:
            seconds, pages = parse_only(build_parser(settings), paths, workers, settings.ingest.timeout_s)
            parse_rates[workers] = pages / seconds
            print(f"parse  workers={workers}: {pages} pages in {seconds:.1f} s = {pages / seconds:.2f} pages/s "
                  f"({parse_rates[workers] / parse_rates[args.workers[0]]:.2f}x {args.workers[0]} worker)")
        per_core = parse_rates[args.workers[0]] / args.workers[0]
        inputs_per_page = None
        if not args.parse_only:
            for workers in args.workers:
                r = ingest(settings, paths, workers, Path(tmp) / f"store-{workers}")
                inputs_per_page = r["texts"] / r["pages"] if r["pages"] else None
                print(f"ingest workers={workers}: {r['stored']} stored, {r['failed']} failed; {r['pages']} pages, "
                      f"{r['chunks']} chunks in {r['seconds']:.1f} s = {r['pages'] / r['seconds']:.2f} pages/s, "
                      f"{r['chunks'] / r['seconds']:.2f} chunks/s; forward passes per chunk "
                      f"{r['texts'] / max(r['chunks'], 1):.2f}")
        print(f"projection, {args.cores} cores: parsing {per_core * args.cores:.1f} pages/s "
              f"({per_core:.2f} per core, one worker's rate)", end="")
        if inputs_per_page:
            gpu_pages = args.gpu_texts_per_s / inputs_per_page
            print(f"; a GPU at {args.gpu_texts_per_s:,.0f} texts/s embeds {gpu_pages:.1f} pages/s "
                  f"({inputs_per_page:.1f} inputs a page): {min(per_core * args.cores, gpu_pages):.1f} pages/s, "
                  f"{'parsing' if per_core * args.cores < gpu_pages else 'embedding'} bound; 40,000 pages in "
                  f"{40000 / min(per_core * args.cores, gpu_pages) / 60:.0f} min")
        else:
            print()


if __name__ == "__main__":
    main()
