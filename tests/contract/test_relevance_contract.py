"""The relevance port's contract, run on every implementation: embedding similarity (MiniLM) and a
sentence-transformers CrossEncoder. No cross-encoder weights can be downloaded here, so the test builds a small
one locally (a 1-layer BERT with a random head, MiniLM's own WordPiece vocabulary) and loads it by folder, as a
researcher's machine loads `cross-encoder/ms-marco-MiniLM-L6-v2` from its cache: the contract is about the
port (shape, order, determinism, empty input, a clear error), not about this model's judgement."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from infra.errors import ConfigError
from infra.rerank import CrossEncoderReranker, EmbeddingSimilarity, Relevance, build_relevance
from infra.settings import Settings

QUERY = "How does chlorophyll convert light energy into chemical energy?"
TEXTS = ["Chlorophyll in photosystem II absorbs photons and the light reactions produce ATP and NADPH.",
         "Sourdough bread rises because yeasts ferment the flour's sugars.",
         "",
         "Leaves of sun-exposed plants hold more chlorophyll per area than shade leaves do."]


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


@pytest.fixture(params=["similarity", "cross-encoder"])
def relevance(request, minilm, tiny_cross_encoder) -> Relevance:
    if request.param == "similarity":
        return EmbeddingSimilarity(minilm, (0.43, 0.33))
    return CrossEncoderReranker(str(tiny_cross_encoder), (0.5, 0.05))


def test_one_finite_score_per_text_in_order_and_deterministic(relevance: Relevance) -> None:
    assert isinstance(relevance, Relevance)
    scores = relevance.score(QUERY, TEXTS)
    assert len(scores) == len(TEXTS) and all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert relevance.score(QUERY, TEXTS) == pytest.approx(scores)
    assert relevance.score(QUERY, TEXTS[::-1]) == pytest.approx(scores[::-1])  # a text's score is its own
    assert relevance.score(QUERY, [TEXTS[1]]) == pytest.approx([scores[1]], abs=1e-5)
    assert relevance.score(QUERY, []) == []
    answer, topic = relevance.floors
    assert topic <= answer and relevance.name


def test_embedding_similarity_ranks_the_on_topic_passage_first(minilm) -> None:
    scores = EmbeddingSimilarity(minilm, (0.43, 0.33)).score(QUERY, TEXTS)
    assert scores[0] == max(scores) and scores[1] < 0.33 < scores[0]


def test_cross_encoder_scores_are_probabilities(tiny_cross_encoder: Path) -> None:
    scores = CrossEncoderReranker(str(tiny_cross_encoder), (0.5, 0.05)).score(QUERY, TEXTS)
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_a_reranker_that_cannot_be_loaded_is_said_and_similarity_checks_instead(tmp_path: Path, minilm) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ConfigError, match="cannot be loaded"):
        CrossEncoderReranker(str(missing), (0.5, 0.05)).score(QUERY, TEXTS)
    settings = Settings.load().updated(forage={"reranker": str(missing)})
    relevance, problem = build_relevance(settings, minilm)
    assert isinstance(relevance, EmbeddingSimilarity) and problem and "checking with embedding similarity" in problem
    configured, none = build_relevance(Settings.load(), minilm)
    assert isinstance(configured, EmbeddingSimilarity) and none is None


def test_a_configured_reranker_is_the_foragers_signal(tiny_cross_encoder: Path, minilm) -> None:
    settings = Settings.load().updated(forage={"reranker": str(tiny_cross_encoder), "rerank_answer": 0.6,
                                               "rerank_topic": 0.1})
    relevance, problem = build_relevance(settings, minilm)
    assert problem is None and isinstance(relevance, CrossEncoderReranker) and relevance.floors == (0.6, 0.1)
