"""One MiniLM embedder per test process and precision: the model (about 3-5 s to load on a busy 2-core machine) is
loaded once, at the first ``embed``, and serves every test that embeds with it (the ``minilm`` fixture of
tests/conftest.py, and helpers that are not fixtures, such as tests/finished_run.py).

The precision follows ``FORAGE_EMBED__PRECISION`` as a run's would (default ``auto``: bf16 on a CPU with native
bfloat16, fp32 elsewhere), so the suite can be run under either on any host. Tests that compare scores across code
paths (one text against a batch, a stored vector against a fresh one) use :func:`score_tolerance`: the same text
embedded in batches of different padding gives vectors equal to float32 rounding in fp32, but in bf16 each matmul
keeps 8 significant bits (relative error up to 2**-9, about 0.002), and cosines of the normalized vectors move by
up to a few 1e-4 (0.0004 seen on an AVX512-BF16 host), so 2e-3 bounds it with room."""

from __future__ import annotations

import functools
import os
from typing import Any

PRECISIONS = ("fp32", "bf16")


def configured_precision() -> str:
    """The precision the suite runs under: FORAGE_EMBED__PRECISION, else 'auto' (as a run resolves it)."""
    return os.environ.get("FORAGE_EMBED__PRECISION", "auto")


@functools.cache
def shared_minilm(precision: str | None = None) -> Any:
    from infra.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder(precision=precision or configured_precision())  # type: ignore[arg-type]


def resolved(embedder: Any) -> str:
    """'fp32' or 'bf16': what ``embedder`` computes in on this host."""
    from infra.embed.minilm import resolve_precision

    return resolve_precision(embedder.precision, "cpu")


def score_tolerance(embedder: Any) -> float:
    """How far one text's similarity may move between code paths (batching, stored vs fresh) at the embedder's
    precision: float32 rounding, or bfloat16's 8-bit mantissa (module docstring)."""
    return 2e-3 if resolved(embedder) == "bf16" else 1e-5


def assert_clear_of(scores: Any, floors: Any, tolerance: float) -> None:
    """Every score sits farther than ``tolerance`` from every floor, so no verdict a floor decides can flip between
    code paths or hosts (a test whose passages sat on a floor would test rounding, not behaviour)."""
    close = [(round(s, 4), f) for s in scores for f in floors if f is not None and abs(s - f) <= tolerance]
    assert not close, f"scores within {tolerance} of a floor: {close}"
