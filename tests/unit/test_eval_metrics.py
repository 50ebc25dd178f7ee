"""Retrieval metrics on hand-computed examples (trec_eval / BEIR definitions), BEIR file reading,
and chunk hits → document rankings (MaxP, ties)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from actors.steps.evaluation.retrieval import (
    evaluate_rankings,
    judged_queries,
    load_beir,
    metric_names,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    rank_documents,
    read_qrels,
    recall_at_k,
    score_query,
)
from infra.errors import ConfigError
from infra.store.base import ChunkRecord, Hit

LOG2_3 = math.log2(3)
LOG2_5 = math.log2(5)


def test_graded_ndcg_uses_linear_gains_and_log2_discount() -> None:
    rels = {"a": 2, "b": 1, "c": 0}
    ranking = ["c", "a", "x", "b"]  # c judged not relevant, x not judged
    dcg = 0 / 1 + 2 / LOG2_3 + 0 / 2 + 1 / LOG2_5
    ideal = 2 / 1 + 1 / LOG2_3
    assert ndcg_at_k(ranking, rels, 10) == pytest.approx(dcg / ideal)
    assert ndcg_at_k(ranking, rels, 10) == pytest.approx(0.643322, abs=1e-6)
    # swapping the two relevant documents: gain 1 first, then gain 2 (2**rel - 1 would give another value)
    assert ndcg_at_k(["b", "a"], rels, 10) == pytest.approx((1 + 2 / LOG2_3) / ideal)
    assert ndcg_at_k(["a", "b"], rels, 10) == pytest.approx(1.0)


def test_ndcg_cut_at_k_uses_the_ideal_cut_at_k_too() -> None:
    rels = {"a": 1, "b": 1, "c": 1}
    # top 2 holds one relevant doc at rank 2; ideal top 2 holds two
    assert ndcg_at_k(["x", "a", "b"], rels, 2) == pytest.approx((1 / LOG2_3) / (1 + 1 / LOG2_3))


def test_recall_precision_mrr() -> None:
    rels = {"a": 2, "b": 1, "c": 0}
    ranking = ["c", "a", "x", "b"]
    assert recall_at_k(ranking, rels, 10) == 1.0
    assert recall_at_k(ranking, rels, 2) == 0.5
    assert precision_at_k(ranking, rels, 5) == pytest.approx(2 / 5)  # divides by k although 4 were retrieved
    assert precision_at_k(ranking, rels, 1) == 0.0
    assert mrr_at_k(ranking, rels, 10) == 0.5
    assert mrr_at_k([f"x{i}" for i in range(10)] + ["a"], rels, 10) == 0.0  # relevant at rank 11: outside the cut


def test_a_query_without_relevant_documents_scores_zero() -> None:
    assert ndcg_at_k(["a"], {"a": 0}, 10) == 0.0
    assert recall_at_k(["a"], {"a": 0}, 10) == 0.0


def test_repeated_documents_count_once_at_their_first_rank() -> None:
    rels = {"a": 1, "b": 1}
    assert ndcg_at_k(["a", "a", "b"], rels, 10) == pytest.approx(1.0)
    assert precision_at_k(["a", "a", "a", "a", "a"], rels, 5) == pytest.approx(1 / 5)
    assert mrr_at_k(["x", "x", "b"], rels, 10) == pytest.approx(1 / 2)


def test_metric_names_follow_k() -> None:
    assert metric_names(10) == ("ndcg@10", "recall@10", "p@5", "mrr@10")
    assert metric_names(3) == ("ndcg@3", "recall@3", "p@3", "mrr@3")
    assert set(score_query(["a"], {"a": 1}, 3)) == set(metric_names(3))


def test_mean_over_judged_queries_missing_rankings_score_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    rankings = {"q1": ["a"], "q9": ["a", "b"]}  # q2 has no ranking; q9 is not judged
    out = evaluate_rankings(rankings, qrels, k=10)
    assert out["n_queries"] == 2 and out["n_unjudged"] == 1
    assert out["ndcg@10"] == pytest.approx(0.5)
    assert out["recall@10"] == pytest.approx(0.5)
    assert out["p@5"] == pytest.approx((1 / 5 + 0) / 2)
    assert out["mrr@10"] == pytest.approx(0.5)
    assert judged_queries(qrels) == ["q1", "q2"]
    with pytest.raises(ValueError, match="k must be"):
        evaluate_rankings(rankings, qrels, k=0)


def hit(doc_id: str, ordinal: int, score: float) -> Hit:
    chunk = ChunkRecord(chunk_id=f"{doc_id}:{ordinal:05d}", doc_id=doc_id, ordinal=ordinal, text="t",
                        section_path="Abstract", char_start=0, char_end=1, token_count=1)
    return Hit(chunk=chunk, score=score)


def test_chunks_become_documents_by_their_best_chunk() -> None:
    hits = [hit("D1", 0, 0.9), hit("D2", 1, 0.8), hit("D1", 1, 0.7), hit("D3", 0, 0.5), hit("other", 0, 0.4)]
    corpus_ids = {"D1": ["10"], "D2": ["20"], "D3": ["30"]}  # 'other' is not in the corpus: ignored
    assert rank_documents(hits, corpus_ids, 10) == ["10", "20", "30"]
    assert rank_documents(hits, corpus_ids, 2) == ["10", "20"]


def test_ties_keep_the_order_of_first_appearance_and_shared_documents_rank_each_id() -> None:
    hits = [hit("D2", 0, 0.5), hit("D1", 0, 0.5), hit("D3", 0, 0.5)]
    assert rank_documents(hits, {"D1": ["1"], "D2": ["2"], "D3": ["3"]}, 10) == ["2", "1", "3"]
    # two corpus entries with identical content are one stored document: both are ranked, in id order
    assert rank_documents([hit("D1", 0, 0.9), hit("D2", 0, 0.1)], {"D1": ["a", "b"], "D2": ["c"]}, 10) == \
        ["a", "b", "c"]


def test_read_qrels_header_crlf_and_grades(tmp_path: Path) -> None:
    path = tmp_path / "test.tsv"
    path.write_bytes(b"query-id\tcorpus-id\tscore\r\n1\t31715818\t1\r\n1\t99\t2\r\n3\t14717500\t0\r\n\r\n")
    assert read_qrels(path) == {"1": {"31715818": 1, "99": 2}, "3": {"14717500": 0}}


@pytest.mark.parametrize("body,message", [
    ("query-id\tcorpus-id\tscore\n1\t2\n", "line 2: expected 3 tab-separated columns"),
    ("query-id\tcorpus-id\tscore\n1\t2\thigh\n", "line 2: score 'high' is not an integer"),
    ("query-id\tcorpus-id\tscore\n", "holds no judgements"),
])
def test_bad_qrels_name_the_line(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "test.tsv"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        read_qrels(path)


def write_beir(folder: Path, corpus: list[dict], queries: list[dict], qrels: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels").mkdir(exist_ok=True)
    for split, body in qrels.items():
        (folder / "qrels" / f"{split}.tsv").write_text(body)
    return folder


def test_load_beir_and_its_errors(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "mini", [{"_id": "d1", "title": "T", "text": "x"}, {"_id": 2, "text": "y"}],
                        [{"_id": "q1", "text": "question"}],
                        {"test": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tgone\t1\n"})
    data = load_beir(folder)
    assert data.name == "mini" and data.corpus == {"d1": ("T", "x"), "2": ("", "y")}
    assert data.queries == {"q1": "question"} and data.splits() == ["test"]
    qrels = data.qrels("test")
    assert qrels == {"q1": {"d1": 1, "gone": 1}} and data.missing_documents(qrels) == 1
    with pytest.raises(ConfigError, match=r"no qrels for split 'dev'.*splits found: test"):
        data.qrels("dev")
    with pytest.raises(ConfigError, match="BEIR folder not found"):
        load_beir(tmp_path / "nope")

    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq7\td1\t1\n")
    with pytest.raises(ConfigError, match="1 query id.*not in queries.jsonl.*q7"):
        data.qrels("train")
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n{"_id": "d1", "text": "y"}\n')
    with pytest.raises(ConfigError, match="line 2: corpus id 'd1' appears twice"):
        load_beir(folder)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\nnot json\n')
    with pytest.raises(ConfigError, match="corpus.jsonl line 2: not JSON"):
        load_beir(folder)
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "title": "no text"}\n')
    with pytest.raises(ConfigError, match="line 1: 'text' must be a string"):
        load_beir(folder)
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(ConfigError, match="corpus.jsonl is missing"):
        load_beir(folder)
