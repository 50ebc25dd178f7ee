"""The relevance port: how close a passage is to a requirement, by a signal the LLM judge cannot influence.

``score(query, chunks) -> list[float]`` (one score per stored chunk, in order, higher is closer), ``floors``
(answer, topic) and ``confirmation``: the Forager shows the judge only passages at or above the topic floor, counts
an "answers" only at or above the answer floor and, where ``confirmation`` is set, only once similarity + 0.4 x
word share reaches it (actors/steps/forage/step.py; docs/evidence.md). Three implementations:

* :class:`StoreSimilarity` (the default with MiniLM and a LanceDB store): the score the store's own vector search
  gives the chunk — the best cosine of its vector (title and section line, then the text) and its sentence windows'
  (:meth:`Store.similarity`) — read from the stored vectors: nothing is embedded but the requirement;
* :class:`EmbeddingSimilarity`: the cosine of the requirement's and the chunk text's embeddings, the text embedded
  again for the check (MiniLM in-process, or the Ollama embedder): for a store without sentence windows (Weaviate) or
  an embedder whose store scores are not calibrated;
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
from infra.store.base import ChunkRecord, Store


@runtime_checkable
class Relevance(Protocol):
    name: str
    floors: tuple[float, float]  # (answer, topic)
    confirmation: float | None  # least similarity + 0.4 x word share of a confirmed answer; None: no confirmation
    # (intercept, slope, penalty): P(answers | similarity + 0.4 x word share) fitted on SciFact train
    # (Settings.answer_curve); None: not calibrated (forage/credit.py then gives the judge no relief)
    curve: tuple[float, float, float] | None
    # P(the library answers | the shown passages' scores) (Settings.coverage_prior); None: not calibrated (coverage
    # is then the ledger's ladder)
    prior: tuple[float, float, float] | None

    def score(self, query: str, chunks: Sequence[ChunkRecord]) -> list[float]:
        """One score per chunk, in order; higher is closer to ``query``."""
        ...


class QueryVector:
    """The query's embedding, kept for the next call with the same query (a Forager scores many batches for one
    requirement)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._query: tuple[str, list[float]] | None = None

    def __call__(self, query: str) -> list[float]:
        if self._query is None or self._query[0] != query:
            self._query = (query, list(self.embedder.embed([query])[0]))
        return self._query[1]


class _Similarity:
    """What both embedding similarities hold: their floors and confirmation, a name after the embedder, and the
    query's vector (embedded once per query)."""

    kind: str

    def __init__(self, embedder: Embedder, floors: tuple[float, float], confirmation: float | None = None,
                 curve: tuple[float, float, float] | None = None, *,
                 prior: tuple[float, float, float] | None = None) -> None:
        self.floors = floors
        self.confirmation = confirmation
        self.curve = curve
        self.prior = prior if curve is not None else None
        self.name = f"{self.kind}:{getattr(embedder, 'name', type(embedder).__name__)}"
        self.query_vector = QueryVector(embedder)


class EmbeddingSimilarity(_Similarity):
    """Cosine similarity of the query's and each chunk text's embedding (one embedder call per ``score``)."""

    kind = "similarity"

    def __init__(self, embedder: Embedder, floors: tuple[float, float], confirmation: float | None = None,
                 curve: tuple[float, float, float] | None = None, *,
                 prior: tuple[float, float, float] | None = None) -> None:
        super().__init__(embedder, floors, confirmation, curve, prior=prior)
        self.embedder = embedder

    def score(self, query: str, chunks: Sequence[ChunkRecord]) -> list[float]:
        if not chunks:
            return []
        q = self.query_vector(query)
        qn = math.sqrt(sum(x * x for x in q)) or 1.0
        out = []
        for v in self.embedder.embed([c.text for c in chunks]):
            vn = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append(sum(a * b for a, b in zip(q, v, strict=True)) / (qn * vn))
        return out


class StoreSimilarity(_Similarity):
    """The store's own vector-search score of each chunk (:meth:`Store.similarity`: its vector or, where the store
    keeps them, its best sentence window): only the query is embedded. A chunk the store no longer holds (deleted
    since it was retrieved) scores -1, below every floor."""

    kind = "store"

    def __init__(self, store: Store, embedder: Embedder, floors: tuple[float, float],
                 confirmation: float | None = None, curve: tuple[float, float, float] | None = None, *,
                 prior: tuple[float, float, float] | None = None) -> None:
        super().__init__(embedder, floors, confirmation, curve, prior=prior)
        self.store = store

    def score(self, query: str, chunks: Sequence[ChunkRecord]) -> list[float]:
        if not chunks:
            return []
        found = self.store.similarity(self.query_vector(query), [c.chunk_id for c in chunks])
        return [found.get(c.chunk_id, -1.0) for c in chunks]


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder, loaded on first use (on the CPU unless ``device``)."""

    def __init__(self, model: str, floors: tuple[float, float], *, device: str = "cpu", batch_size: int = 16) -> None:
        self.model = model
        self.floors = floors
        self.device = device
        self.batch_size = batch_size
        self.name = f"cross-encoder:{model}"
        self.confirmation: float | None = None  # on its own scale: the word-share confirmation is not calibrated for it
        self.curve: tuple[float, float, float] | None = None
        self.prior: tuple[float, float, float] | None = None
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

    def score(self, query: str, chunks: Sequence[ChunkRecord]) -> list[float]:
        if not chunks:
            return []
        scores = self.load().predict([(query, c.text) for c in chunks], batch_size=self.batch_size,
                                     show_progress_bar=False)
        return [float(s) for s in scores]


def build_relevance(settings: Settings, embedder: Embedder, store: Store | None = None) -> tuple[Relevance, str | None]:
    """The run's relevance signal and, when the configured reranker could not be loaded, why (the check then uses
    similarity). Similarity is the store's own score when ``store`` is given and :meth:`Settings.relevance_signal`
    picks it for that store, else the chunk text embedded again; each with its floors and confirmation."""
    signal = settings.relevance_signal(store is not None and store.keeps_windows)
    similarity: Relevance
    if signal == "store" and store is not None:
        similarity = StoreSimilarity(store, embedder, settings.similarity_floors("store"),
                                     settings.answer_confirmation("store"), settings.answer_curve("store"),
                                     prior=settings.coverage_prior("store"))
    else:
        similarity = EmbeddingSimilarity(embedder, settings.similarity_floors("text"),
                                         settings.answer_confirmation("text"), settings.answer_curve("text"),
                                         prior=settings.coverage_prior("text"))
    model = settings.forage.reranker
    if not model:
        return similarity, None
    reranker = CrossEncoderReranker(model, (settings.forage.rerank_answer, settings.forage.rerank_topic))
    try:
        reranker.load()
    except ConfigError as exc:
        return similarity, f"{exc}; checking with embedding similarity instead"
    return reranker, None
