"""The relevance port: how close a passage is to a requirement, by a signal the LLM judge cannot influence.

``score(query, texts) -> list[float]`` (one score per text, in order, higher is closer) and ``floors``
(answer, topic): the Forager shows the judge only passages at or above the topic floor and counts an
"answers" only at or above the answer floor (actors/steps/forage/step.py; docs/evidence.md). Two implementations:

* :class:`EmbeddingSimilarity` (the default): cosine similarity of the run's embeddings (MiniLM in-process, or
  the Ollama embedder) — no extra model;
* :class:`CrossEncoderReranker` (``forage.reranker``): a sentence-transformers CrossEncoder by model name or
  local folder, e.g. ``cross-encoder/ms-marco-MiniLM-L6-v2``, fetched once on the researcher's machine by
  sentence-transformers (as Ollama pulls a model; only the model's name is sent) and then read from its
  cache; scores are the model's probabilities (sigmoid). When it cannot be loaded the run says so in an event
  and checks with embedding similarity instead (``build_relevance``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from infra.embed.base import Embedder
from infra.errors import ConfigError
from infra.settings import Settings


@runtime_checkable
class Relevance(Protocol):
    name: str
    floors: tuple[float, float]  # (answer, topic)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One score per text, in order; higher is closer to ``query``."""
        ...


class EmbeddingSimilarity:
    """Cosine similarity of the query's and each text's embedding (one embedder call per ``score``; the
    query's vector is kept for the next call with the same query)."""

    def __init__(self, embedder: Embedder, floors: tuple[float, float]) -> None:
        self.embedder = embedder
        self.floors = floors
        self.name = f"similarity:{getattr(embedder, 'name', type(embedder).__name__)}"
        self._query: tuple[str, list[float]] | None = None

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        if self._query is None or self._query[0] != query:
            self._query = (query, list(self.embedder.embed([query])[0]))
        q = self._query[1]
        qn = math.sqrt(sum(x * x for x in q)) or 1.0
        out = []
        for v in self.embedder.embed(list(texts)):
            vn = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append(sum(a * b for a, b in zip(q, v, strict=True)) / (qn * vn))
        return out


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder, loaded on first use (on the CPU unless ``device``)."""

    def __init__(self, model: str, floors: tuple[float, float], *, device: str = "cpu", batch_size: int = 16) -> None:
        self.model = model
        self.floors = floors
        self.device = device
        self.batch_size = batch_size
        self.name = f"cross-encoder:{model}"
        self._encoder: Any = None
        self._lock = threading.Lock()

    def load(self) -> Any:
        """The model (loaded once). ConfigError naming the model when it cannot be loaded."""
        with self._lock:
            if self._encoder is None:
                try:
                    from sentence_transformers import CrossEncoder

                    self._encoder = CrossEncoder(self.model, device=self.device)
                except Exception as exc:  # noqa: BLE001 — missing, not downloadable, not a cross-encoder
                    raise ConfigError(f"the reranker {self.model!r} cannot be loaded: {type(exc).__name__}: "
                                      f"{' '.join(str(exc).split())[:200]}") from exc
            return self._encoder

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not texts:
            return []
        scores = self.load().predict([(query, t) for t in texts], batch_size=self.batch_size,
                                     show_progress_bar=False)
        return [float(s) for s in scores]


def build_relevance(settings: Settings, embedder: Embedder) -> tuple[Relevance, str | None]:
    """The run's relevance signal and, when the configured reranker could not be loaded, why (the check then
    uses embedding similarity)."""
    similarity = EmbeddingSimilarity(embedder, settings.similarity_floors())
    model = settings.forage.reranker
    if not model:
        return similarity, None
    reranker = CrossEncoderReranker(model, (settings.forage.rerank_answer, settings.forage.rerank_topic))
    try:
        reranker.load()
    except ConfigError as exc:
        return similarity, f"{exc}; checking with embedding similarity instead"
    return reranker, None
