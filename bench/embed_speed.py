"""MiniLM embedding speed on this CPU, float32 against bfloat16, on the chunks Forage really embeds.

    .venv/bin/python bench/embed_speed.py                  # 4 shared PDFs' chunks, 1 and 2 threads
    .venv/bin/python bench/embed_speed.py --pdfs 16 --threads 1

The chunk inputs (context line + 256-token window, as the ingest step builds them) of the first ``--pdfs``
shared PDFs are embedded with ``embed.batch_size`` per call, by a fresh embedder per setting and thread count
(the model loaded and warmed before the clock starts; the best of ``--repeat`` passes). Printed per thread count:
chunks/s as before (float32, ``embed.batch_size`` texts per forward pass), in float32 and in bfloat16 with
``CPU_BATCH`` texts per pass (what MiniLM does now), the speed-up over before, and how far the bfloat16 vectors
are from the float32 ones (cosine: minimum and mean). ``embed.precision='auto'`` resolves to what the last line
says. On a CPU without native bfloat16 (AVX2 only), where bfloat16 is emulated about 6x slower than float32,
bfloat16 is timed once on the first ``--emulated-sample`` chunks (48), not on all of them ``--repeat`` times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from infra.settings import Settings  # noqa: E402


def chunk_inputs(settings: Settings, paths: list[Path]) -> list[str]:
    from actors.steps.ingest.documents import file_sha256
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from messages.search import Candidate

    parser = build_parser(settings)
    step = IngestStep(settings, store=None, embedder=build_embedder(settings), parser=parser)  # type: ignore[arg-type]
    inputs: list[str] = []
    for path in paths:
        prepared = step.prepare_parsed(file_sha256(path), Candidate(key=f"file:{path}", path=str(path)), path,
                                       parser.parse(path))
        inputs += prepared.inputs
    return inputs


def measure(inputs: list[str], precision: str, threads: int, batch_size: int, repeat: int,
            model_batch: int | None = None) -> tuple[float, list]:
    from infra.embed.minilm import MiniLMEmbedder

    embedder = MiniLMEmbedder(batch_size=batch_size, threads=threads, precision=precision,  # type: ignore[arg-type]
                              model_batch=model_batch)
    embedder.embed(inputs[:batch_size])  # load and warm
    best, vectors = 0.0, []
    for _ in range(repeat):
        t = time.perf_counter()
        vectors = embedder.embed(inputs)
        best = max(best, len(inputs) / (time.perf_counter() - t))
    return best, vectors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pdfs", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=REPO.parent / "shared" / "data" / "pdfs")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--emulated-sample", type=int, default=48,
                    help="on a CPU without native bfloat16 (where 'auto' takes float32 and bfloat16 runs ~6x slower), "
                         "bfloat16 is timed once on this many chunks only")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import numpy as np

    from infra.embed.minilm import CPU_BATCH, resolve_precision

    settings = Settings.load()
    paths = sorted(args.dir.glob("*.pdf"))[: args.pdfs]
    inputs = chunk_inputs(settings, paths)
    print(f"{len(inputs)} chunks of {len(paths)} PDFs; batch {settings.embed.batch_size}")
    native = resolve_precision("auto") == "bf16"
    sample = inputs if native else inputs[: args.emulated_sample]
    rows = []
    for threads in args.threads:
        before, v32 = measure(inputs, "fp32", threads, settings.embed.batch_size, args.repeat,
                              model_batch=settings.embed.batch_size)
        fp32, _ = measure(inputs, "fp32", threads, settings.embed.batch_size, args.repeat)
        bf16, v16 = measure(sample, "bf16", threads, settings.embed.batch_size, args.repeat if native else 1)
        cos = (np.asarray(v32[: len(v16)]) * np.asarray(v16)).sum(axis=1)
        row = {"threads": threads, "before_fp32_batch64_chunks_s": round(before, 1), "fp32_chunks_s": round(fp32, 1),
               "bf16_chunks_s": round(bf16, 1), "bf16_chunks": len(sample), "speedup": round(bf16 / before, 2),
               "cosine_min": round(float(cos.min()), 6), "cosine_mean": round(float(cos.mean()), 6)}
        rows.append(row)
        print(f"threads {threads}: before (float32, {settings.embed.batch_size} per pass) {before:.1f} chunks/s; "
              f"float32 {fp32:.1f}, bfloat16 {bf16:.1f} chunks/s ({CPU_BATCH} per pass"
              f"{'' if native else f'; emulated, once on {len(sample)} chunks'}); bfloat16 {bf16 / before:.2f}x "
              f"before; cosine bf16 vs fp32 min {cos.min():.6f}, mean {cos.mean():.6f}")
    auto = resolve_precision("auto")
    print(f"embed.precision='auto' here: {auto}")
    if args.out:
        args.out.write_text(json.dumps({"chunks": len(inputs), "pdfs": len(paths), "auto": auto, "rows": rows},
                                       indent=2) + "\n")


if __name__ == "__main__":
    main()
