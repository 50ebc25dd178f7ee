"""The embedding port. Sync and CPU/GPU bound; the chunker uses its tokenizer for token windows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, runtime_checkable


def unit_vector(vector: list[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector as it is): what every server-side embedder returns."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0 when either is zero)."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int
    max_tokens: int  # what the model reads; longer input is truncated by the model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalized vectors, one per text, in order."""
        ...

    def check(self) -> None:
        """Raise LLMUnavailable with one clear sentence if the model cannot be used (a server down or without it)."""
        ...

    def warm(self) -> None:
        """Load what the first call would (an in-process model's weights), so a caller's timeout counts its own
        work; nothing for a model behind a server."""
        ...

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character (start, end) of every token of ``text`` under this model's own tokenizer,
        without special tokens. Used to cut token windows at exact character offsets."""
        ...
