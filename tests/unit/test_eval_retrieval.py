"""`forage eval retrieval` end to end (typer's CliRunner) on a tiny BEIR folder: the real MiniLM
embedder, a real LanceStore, the corpus loaded through IngestStep.ingest_texts. Bad input is
refused with one sentence and exit code 2 before anything is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.steps.evaluation.retrieval import (
    document_key,
    load_beir,
    load_corpus,
    run_split,
    stored_corpus_ids,
    tune_fusion,
)
from gateway.cli import app
from infra.embed.minilm import MiniLMEmbedder
from infra.settings import Settings
from infra.store.lancedb import LanceStore
from tests.tiny_beir import CORPUS, write_beir

runner = CliRunner()

def invoke(*args: str):
    result = runner.invoke(app, ["eval", "retrieval", *args])
    return result, " ".join(result.output.split())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny")


@pytest.fixture(scope="module")
def first_run(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    work = tmp_path_factory.mktemp("eval")
    result, out = invoke("--beir", str(tiny), "--k", "3", "--store", str(work / "store"),
                         "--out", str(work / "results.json"), "--tune")
    assert result.exit_code == 0, out
    return json.loads((work / "results.json").read_text()), out, work / "store"


NAMES = {"ndcg@3", "recall@3", "p@3", "mrr@3"}


@pytest.mark.slow
def test_results_json_and_table(first_run) -> None:
    data, out, store = first_run
    assert (data["dataset"], data["split"], data["k"], data["fusion"]) == ("tiny", "test", 3, "relative_score")
    assert data["alpha"] == Settings.load().store.hybrid_alpha and data["chunks_per_query"] == 12
    assert data["embedder"] == "all-MiniLM-L6-v2" and data["store"] == str(store)
    assert (data["n_queries"], data["n_docs"]) == (3, 10) and data["n_chunks"] >= 10
    assert data["load"]["stored"] == 10 and data["load"]["failed"] == 0
    assert data["qrels_docs_missing_from_corpus"] == 0
    assert set(data["metrics"]) == {"bm25", "dense", "hybrid"}
    for mode, metrics in data["metrics"].items():
        assert set(metrics) == NAMES
        assert all(0.0 <= v <= 1.0 for v in metrics.values())
        assert metrics["mrr@3"] == 1.0, f"{mode}: an obviously relevant document is not ranked first"
    timings = data["timings"]
    assert {"load_s", "chunk_s", "embed_s", "store_s", "index_s", "query_embed_ms"} <= set(timings)
    assert set(timings["per_query_ms"]) == {"bm25", "dense", "hybrid"}
    for mode in ("bm25", "dense", "hybrid"):
        assert mode in out
    assert "tiny · test · 3 queries" in out


@pytest.mark.slow
def test_tuning_grid_and_best_setting(first_run) -> None:
    data, out, _ = first_run
    tune = data["tune"]
    assert tune["split"] == "train" and tune["n_queries"] == 2 and tune["metric"] == "ndcg@3"
    grid = tune["grid"]
    assert len(grid) == 14 and {p["fusion"] for p in grid} == {"relative_score", "rrf"}
    assert sorted({p["alpha"] for p in grid}) == [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert grid == sorted(grid, key=lambda p: -p["ndcg@3"])
    assert tune["best"] == grid[0]
    assert set(tune["test"]) == NAMES and f"best: alpha={grid[0]['alpha']}" in out


@pytest.mark.slow
def test_tuning_measures_exactly_what_store_hybrid_returns(first_run, tiny: Path) -> None:
    """tune_fusion fuses cached BM25/vector lists; each grid point must score as store.hybrid does."""
    _, _, store_path = first_run
    dataset = load_beir(tiny)
    store = LanceStore(store_path, dim=384)
    embedder = MiniLMEmbedder()
    report = load_corpus(Settings.load(), store, embedder, dataset)  # all known: nothing embedded again
    assert (report.stored, report.skipped, report.n_chunks) == (0, 10, 0)
    qrels = dataset.qrels("test")
    points = tune_fusion(store, embedder, dataset, qrels, report.corpus_ids, k=3, n_chunks=12,
                         alphas=(0.3, 0.9))
    for point in points:
        direct = run_split(store, embedder, dataset, "test", qrels, report.corpus_ids, modes=("hybrid",), k=3,
                           n_chunks=12, alpha=point.alpha, fusion=point.fusion)
        assert direct.modes["hybrid"].metrics == point.metrics


@pytest.mark.slow
def test_a_kept_store_is_reused_without_loading_again(first_run, tiny: Path, tmp_path: Path) -> None:
    data, _, store = first_run
    result, out = invoke("--beir", str(tiny), "--k", "3", "--store", str(store), "--mode", "hybrid",
                         "--out", str(tmp_path / "again.json"))
    assert result.exit_code == 0, out
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["load"]["stored"] == 0 and again["load"]["skipped"] == 10
    assert set(again["metrics"]) == {"hybrid"} and again["metrics"]["hybrid"] == data["metrics"]["hybrid"]


def test_a_kept_stores_documents_map_back_to_their_corpus_ids(first_run) -> None:
    documents = LanceStore(first_run[2], dim=384).list_documents()
    mapped = stored_corpus_ids(documents)
    assert sorted(ids[0] for ids in mapped.values()) == sorted(i for i, _, _ in CORPUS)
    assert all(document_key("tiny", ids[0]) == d.key for d in documents for ids in [mapped[d.doc_id]])
    other = documents[0].model_copy(update={"doc_id": "x", "key": "file:/a:b"})
    assert stored_corpus_ids([other]) == {}  # not a BEIR document


def test_missing_folder(tmp_path: Path) -> None:
    result, out = invoke("--beir", str(tmp_path / "nope"))
    assert result.exit_code == 2 and f"BEIR folder not found: {tmp_path / 'nope'}" in out


def test_missing_qrels_split(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny")
    result, out = invoke("--beir", str(folder), "--split", "dev", "--store", str(tmp_path / "store"))
    assert result.exit_code == 2 and "no qrels for split 'dev'" in out and "splits found: test, train" in out
    assert not (tmp_path / "store").exists()  # refused before anything was loaded


def test_tune_without_a_train_split_is_refused_before_loading(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny", train=False)
    result, out = invoke("--beir", str(folder), "--tune", "--store", str(tmp_path / "store"))
    assert result.exit_code == 2 and "no qrels for split 'train'" in out
    assert not (tmp_path / "store").exists()


def test_missing_corpus_file(tmp_path: Path) -> None:
    folder = write_beir(tmp_path / "tiny")
    (folder / "corpus.jsonl").unlink()
    result, out = invoke("--beir", str(folder))
    assert result.exit_code == 2 and "corpus.jsonl is missing" in out


@pytest.mark.parametrize("args", [("--alpha", "1.5"), ("--mode", "sparse"), ("--fusion", "max"), ("--k", "0"),
                                  ("--chunks", "2")])
def test_bad_options(tmp_path: Path, args: tuple[str, str]) -> None:
    folder = write_beir(tmp_path / "tiny")
    result, out = invoke("--beir", str(folder), *args, "--store", str(tmp_path / "store"))
    assert result.exit_code == 2, out
    assert not (tmp_path / "store").exists()
