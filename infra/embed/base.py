"""The embedding port. Sync and CPU/GPU bound; the chunker uses its tokenizer for token windows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


def unit_vector(vector: list[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector as it is): what every server-side embedder returns."""
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors (0 when either is zero)."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


@dataclass(frozen=True, slots=True)
class Windowed:
    """A text to embed with windows of its own (a chunk and its sentence windows): each window is a (start, end)
    character span of ``text``; the first ``lead`` characters (its context line) belong to every window."""

    text: str
    lead: int = 0
    windows: tuple[tuple[int, int], ...] = ()

    def window_texts(self) -> list[str]:
        """Each window as a text of its own: the lead, then the window's words (whitespace normalised)."""
        return [self.text[:self.lead] + " ".join(self.text[start:end].split()) for start, end in self.windows]


class _Embeds(Protocol):
    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


def separate_inputs(items: Sequence[Windowed]) -> list[str]:
    """Every text a model reads for ``items`` when each window is a text of its own: the items' texts, then their
    windows' (in the order :meth:`Embedder.embed_windowed` returns vectors)."""
    return [item.text for item in items] + [text for item in items for text in item.window_texts()]


def embed_each(embedder: _Embeds, items: Sequence[Windowed]) -> list[list[float]]:
    """:meth:`Embedder.embed_windowed` for a model behind a server, which returns no token embeddings: every
    window is embedded as a text of its own (a forward pass each)."""
    return embedder.embed(separate_inputs(items))


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int
    max_tokens: int  # what the model reads; longer input is truncated by the model
    #: whether :meth:`embed_windowed` pools windows from their text's forward pass (else each is a text of its own)
    windows_pooled: bool

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalized vectors, one per text, in order."""
        ...

    def embed_windowed(self, items: Sequence[Windowed]) -> list[list[float]]:
        """Unit-normalized vectors: one per item's text, in order, then one per window of each item, in order: each
        window embedded as a text of its own (:func:`embed_each`), or, where ``windows_pooled``, pooled from its
        item's one forward pass ("late chunking", an in-process model only)."""
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
