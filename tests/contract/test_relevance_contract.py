"""The relevance port's contract, run on every implementation: the store's own similarity (MiniLM vectors and
sentence windows in LanceDB), the chunk text embedded again (MiniLM) and a sentence-transformers CrossEncoder. The
passages are stored through the product's text ingestion, so each is a real chunk with its vectors. No
cross-encoder weights can be downloaded here, so the test builds a small one locally (a 1-layer BERT with a random
head, MiniLM's own WordPiece vocabulary) and loads it by folder, as a researcher's machine loads
`cross-encoder/ms-marco-MiniLM-L6-v2` from its cache: the contract is about the port (shape, order, determinism,
empty input, a clear error), not about this model's judgement."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from infra.errors import ConfigError
from infra.rerank import CrossEncoderReranker, EmbeddingSimilarity, Relevance, StoreSimilarity, build_relevance
from infra.settings import Settings
from infra.store.base import ChunkFilter, ChunkRecord
from tests.minilm import PRECISIONS, score_tolerance, shared_minilm

QUERY = "How does chlorophyll convert light energy into chemical energy?"
TEXTS = ["Chlorophyll in photosystem II absorbs photons. The light reactions produce ATP and NADPH.",
         "Sourdough bread rises because yeasts ferment the flour's sugars.",
         "Leaves of sun-exposed plants hold more chlorophyll per area than shade leaves do."]


@pytest.fixture(scope="module", params=PRECISIONS)
def minilm(request):
    """The MiniLM embedder under each precision (tests/minilm.py): a host of either kind must pass this module."""
    return shared_minilm(request.param)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory, minilm):
    """(settings, LanceDB store, chunks in TEXTS order): each text stored as a one-chunk document by the ingestion."""
    from actors.steps.ingest.documents import TextDocument
    from actors.steps.ingest.step import IngestStep
    from infra.store import build_store

    settings = Settings.load().updated(store={"path": tmp_path_factory.mktemp("relevance") / "store"})
    store = build_store(settings)
    docs = [TextDocument(key=f"test:relevance:{i}", title=f"Passage {i}", text=text) for i, text in enumerate(TEXTS)]
    results = IngestStep(settings, store, minilm).ingest_texts("relevance-contract", docs)
    chunks: list[ChunkRecord] = []
    for result in results:
        assert result.status == "stored" and result.doc_id
        (chunk,) = store.chunks(ChunkFilter(doc_ids=(result.doc_id,)))
        chunks.append(chunk)
    return settings, store, chunks


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import BertConfig, BertForSequenceClassification

    from infra.embed.minilm import model_path

    folder = tmp_path_factory.mktemp("cross-encoder") / "tiny"
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(model_path() / name, folder / name)
    return folder


@pytest.fixture(params=["store", "similarity", "cross-encoder"])
def relevance(request, minilm, tiny_cross_encoder, library) -> Relevance:
    if request.param == "store":
        return StoreSimilarity(library[1], minilm, (0.52, 0.41), 1.0)
    if request.param == "similarity":
        return EmbeddingSimilarity(minilm, (0.43, 0.33), 0.95)
    return CrossEncoderReranker(str(tiny_cross_encoder), (0.5, 0.05))


def test_one_finite_score_per_chunk_in_order_and_deterministic(relevance: Relevance, library, minilm) -> None:
    chunks, tolerance = library[2], score_tolerance(minilm)
    assert isinstance(relevance, Relevance)
    scores = relevance.score(QUERY, chunks)
    assert len(scores) == len(chunks) and all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert relevance.score(QUERY, chunks) == pytest.approx(scores)
    assert relevance.score(QUERY, chunks[::-1]) == pytest.approx(scores[::-1], abs=tolerance)  # a chunk's score is its own
    assert relevance.score(QUERY, [chunks[1]]) == pytest.approx([scores[1]], abs=tolerance)
    assert relevance.score(QUERY, []) == []
    answer, topic = relevance.floors
    assert topic <= answer and relevance.name
    assert relevance.confirmation is None or relevance.confirmation > 0


@pytest.mark.parametrize("kind", ["store", "similarity"])
def test_similarity_ranks_the_on_topic_passage_first(kind: str, minilm, library) -> None:
    relevance = (StoreSimilarity(library[1], minilm, (0.52, 0.41)) if kind == "store"
                 else EmbeddingSimilarity(minilm, (0.43, 0.33)))
    scores = relevance.score(QUERY, library[2])
    assert scores[0] == max(scores) and scores[1] < relevance.floors[1] < scores[0]


def test_the_store_signal_is_the_vector_searchs_score_and_embeds_only_the_query(minilm, library) -> None:
    """The store's score of a chunk is what its vector search gives it (the best of the chunk's vector and its
    sentence windows), read without embedding a passage; a chunk no longer stored scores below every floor."""
    _, store, chunks = library
    calls: list[int] = []

    class Counting:
        name, dim = minilm.name, minilm.dim

        def embed(self, texts):
            calls.append(len(texts))
            return minilm.embed(texts)

    relevance = StoreSimilarity(store, Counting(), (0.52, 0.41))
    scores = relevance.score(QUERY, chunks)
    relevance.score(QUERY, chunks[:1])
    assert calls == [1]  # the query, once
    searched = {h.chunk.chunk_id: h.score for h in store.vector(minilm.embed([QUERY])[0], len(chunks))}
    assert scores == pytest.approx([searched[c.chunk_id] for c in chunks], abs=score_tolerance(minilm))
    gone = chunks[0].model_copy(update={"chunk_id": "deleted:0"})
    assert relevance.score(QUERY, [gone, chunks[1]]) == pytest.approx([-1.0, scores[1]])


def test_cross_encoder_scores_are_probabilities(tiny_cross_encoder: Path, library) -> None:
    scores = CrossEncoderReranker(str(tiny_cross_encoder), (0.5, 0.05)).score(QUERY, library[2])
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_a_reranker_that_cannot_be_loaded_is_said_and_similarity_checks_instead(tmp_path: Path, minilm,
                                                                               library) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="cannot be loaded"):
        CrossEncoderReranker(str(missing), (0.5, 0.05)).score(QUERY, library[2])
    settings = Settings.load().updated(forage={"reranker": str(missing)})
    relevance, problem = build_relevance(settings, minilm, library[1])
    assert isinstance(relevance, StoreSimilarity) and problem and "checking with embedding similarity" in problem
    relevance, problem = build_relevance(settings, minilm)
    assert isinstance(relevance, EmbeddingSimilarity) and problem


def test_the_signal_follows_the_store_and_the_setting(minilm, library) -> None:
    """'auto': the store's score with MiniLM and a store that keeps sentence windows, each signal with its own
    floors and confirmation; the text's without a store, without windows, or when set."""
    settings, store = library[0], library[1]
    chosen, none = build_relevance(settings, minilm, store)
    assert isinstance(chosen, StoreSimilarity) and none is None
    assert (chosen.floors, chosen.confirmation) == (settings.similarity_floors("store"),
                                                     settings.answer_confirmation("store"))
    assert settings.similarity_floors("store") != settings.similarity_floors("text")
    text, _ = build_relevance(settings, minilm)
    assert isinstance(text, EmbeddingSimilarity)
    assert text.floors == settings.similarity_floors("text")
    assert text.confirmation == settings.answer_confirmation("text")
    for changed in ({"forage": {"relevance_signal": "text"}}, {"embed": {"window_sentences": 0}}):
        assert isinstance(build_relevance(settings.updated(**changed), minilm, store)[0], EmbeddingSimilarity)
    assert settings.relevance_signal(store_keeps_windows=False) == "text"
    assert settings.updated(forage={"relevance_signal": "store"}).relevance_signal(False) == "store"
    own = settings.updated(forage={"answer_similarity": 0.6, "topic_similarity": 0.5, "answer_confirmation": 0})
    chosen, _ = build_relevance(own, minilm, store)
    assert chosen.floors == (0.6, 0.5) and chosen.confirmation is None  # set values win; 0 turns confirmation off


def test_a_configured_reranker_is_the_foragers_signal(tiny_cross_encoder: Path, minilm, library) -> None:
    settings = Settings.load().updated(forage={"reranker": str(tiny_cross_encoder), "rerank_answer": 0.6,
                                               "rerank_topic": 0.1})
    relevance, problem = build_relevance(settings, minilm, library[1])
    assert problem is None and isinstance(relevance, CrossEncoderReranker) and relevance.floors == (0.6, 0.1)
    assert relevance.confirmation is None  # its own scale: answers count without the word-share confirmation
