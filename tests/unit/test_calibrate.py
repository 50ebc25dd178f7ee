"""`forage calibrate`: the configured model's judging rates measured on a labelled BEIR set with the Forager's own
judging prompt, kept per model in the user's config, and used by its runs (actors/steps/evaluation/calibrate.py,
infra/judges.py). The judges are simulated ones answering from qrels (known rates) and function LLMs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.steps.evaluation.calibrate import labelled_passages, measure_judge
from actors.steps.evaluation.retrieval import load_beir
from actors.steps.evaluation.simulated import SimulatedJudge
from actors.steps.schemas import BatchVerdict
from infra.errors import ConfigError
from infra.judges import judges_file, keep_rates
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from tests.tiny_beir import QUERIES, write_beir


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny")


def judge_from(tiny: Path, qrels: dict, tpr: float, fpr: float) -> SimulatedJudge:
    data = load_beir(tiny)
    return SimulatedJudge(data.corpus, QUERIES, qrels, tpr, fpr)


def yes_man(messages, schema):
    assert issubclass(schema, BatchVerdict), schema.__name__  # calibrating asks only the judging prompt
    numbers = sorted({int(n) for n in re.findall(r"<<<PASSAGE (\d+)\n", messages[-1]["content"])})
    return {"verdicts": [{"passage": n, "tag": "answers", "kind": "result", "motive": "It answers."} for n in numbers]}


def test_the_labelled_passages_are_the_relevant_documents_and_the_nearest_others(tiny: Path) -> None:
    data = load_beir(tiny)
    qrels = data.qrels("test")
    shown = labelled_passages(data, qrels, ["q1", "q2"], near=3)
    assert sorted(c for c, rel in shown["q1"] if rel) == ["d1", "d9"]
    assert sorted(c for c, rel in shown["q2"] if rel) == ["d4"]
    assert all(sum(not rel for _, rel in passages) == 3 for passages in shown.values())
    assert labelled_passages(data, qrels, ["q1"], near=3) == {"q1": shown["q1"]}  # the same every time


def test_calibrate_measures_a_judges_known_rates(tiny: Path) -> None:
    """The test split shows 4 relevant passages (q1: d1, d9; q2: d4; q3: d8) and 3 near others per query. A perfect
    judge measures (1, 0), a judge answering everything (1, 1), a contrary one (0, 1), and one that knows only q1's
    d1 answers q1 calls one of the four relevant passages an answer and no other: (0.25, 0)."""
    settings = Settings.load(llm={"backend": "ollama", "model": "judge-m"})
    full = load_beir(tiny).qrels("test")
    cases = [(judge_from(tiny, full, 1.0, 0.0), 1.0, 0.0), (FunctionLLM(yes_man), 1.0, 1.0),
             (judge_from(tiny, full, 0.0, 1.0), 0.0, 1.0), (judge_from(tiny, {"q1": {"d1": 1}}, 1.0, 0.0), 0.25, 0.0)]
    for llm, tpr, fpr in cases:
        out = measure_judge(settings, tiny, n_queries=3, split="test", llm=llm)
        assert (out["tpr"], out["fpr"]) == (tpr, fpr)
        assert (out["relevant"], out["other"], out["unjudged"], out["queries"]) == (4, 9, 0, 3)
        assert out["key"] == "ollama:judge-m" and out["labelled_set"] == "tiny:test"
    assert llm.calls == 3  # one batch per query: the Forager's batches of judge_batch passages


def test_calibrate_says_what_is_wrong(tiny: Path) -> None:
    settings = Settings.load()
    with pytest.raises(ConfigError, match="split 'dev'"):
        measure_judge(settings, tiny, split="dev", llm=FunctionLLM(yes_man))
    with pytest.raises(ConfigError, match="not found"):
        measure_judge(settings, tiny.parent / "none", llm=FunctionLLM(yes_man))

    def mute(messages, schema):
        return {"verdicts": []}

    with pytest.raises(ConfigError, match="no valid verdict"):
        measure_judge(settings, tiny, split="test", n_queries=2, llm=FunctionLLM(mute))


def test_kept_rates_are_the_models_own_and_a_bad_file_is_an_error() -> None:
    path = judges_file()
    keep_rates("ollama:a", {"tpr": 0.9, "fpr": 0.1, "calibrated": "2026-11-28"})
    keep_rates("ollama:b", {"tpr": 0.7, "fpr": 0.3})
    assert Settings.load(llm={"backend": "ollama", "model": "a"}).judge_rates() == (0.9, 0.1)
    assert Settings.load(llm={"backend": "ollama", "model": "b"}).judge_rates() == (0.7, 0.3)
    assert Settings.load(llm={"backend": "ollama", "model": "c"}).judge_rates() == (1.0, 1.0)  # uncalibrated
    told = Settings.load(llm={"backend": "ollama", "model": "a"}, forage={"judge_tpr": 0.6, "judge_fpr": 0.4})
    assert told.judge_rates() == (0.6, 0.4)  # settings still win
    # what the report's Scope says of the judge: its key, where its rates come from, the rates
    assert (Settings.load(llm={"backend": "ollama", "model": "a"}).judge_summary()
            == "ollama:a, calibrated 2026-11-28 on a labelled set: TPR 0.90, FPR 0.10")
    assert told.judge_summary() == "ollama:a, rates set by forage.judge_tpr / judge_fpr: TPR 0.60, FPR 0.40"
    assert Settings.load(llm={"backend": "ollama", "model": "c"}).judge_summary() == (
        "ollama:c, not calibrated (forage calibrate measures it): its 'answers' count only where the retrieval "
        "signals confirm them")
    # the packaged embedded model comes measured (it called every passage an answer); another GGUF does not
    packaged = Settings.load(llm={"backend": "embedded"})
    assert packaged.judge_rates() == (1.0, 1.0)
    assert packaged.judge_summary() == (
        "embedded:smollm2-135m, calibrated 2026-11-29 on beir-scifact:train (20 queries: 20 relevant passages, 60 "
        "others): TPR 1.00, FPR 1.00; it calls other passages answers as often as answering ones, so its 'answers' "
        "count only where the retrieval signals confirm them")
    other = Settings.load(llm={"backend": "embedded", "gguf_path": "/models/qwen2.5-0.5b-instruct-q4.gguf"})
    assert other.judge_calibration() is None and "not calibrated" in other.judge_summary()
    keep_rates("embedded:smollm2-135m", {"tpr": 0.8, "fpr": 0.5, "calibrated": "2026-12-01"})
    assert packaged.judge_rates() == (0.8, 0.5)  # the researcher's own calibration of it wins
    kept = path.read_text()
    try:
        path.write_text("{not json")
        with pytest.raises(ConfigError, match="judges.json"):
            Settings.load(llm={"backend": "ollama", "model": "a"}).judge_rates()
        path.write_text(json.dumps({"ollama:a": {"tpr": 2, "fpr": 0.1}}))
        with pytest.raises(ConfigError, match="from 0 to 1"):
            Settings.load(llm={"backend": "ollama", "model": "a"}).judge_rates()
    finally:
        path.write_text(kept)
    for key in ("ollama:a", "ollama:b"):  # leave the session's config as it was
        data = json.loads(path.read_text())
        data.pop(key)
        path.write_text(json.dumps(data))


def test_the_cli_keeps_the_rates_and_a_run_of_that_model_credits_by_them(tiny: Path, monkeypatch) -> None:
    """`forage calibrate --llm ollama --model M` with a perfect judge keeps (1, 0) for M; a Forager of M then keeps
    an 'answers' the check would overrule for an uncalibrated model (the store signal's calibration curve)."""
    import actors.steps.evaluation.calibrate as calibrate
    from actors.steps.forage.step import ForageStep
    from gateway.cli import app
    from infra.rerank import EmbeddingSimilarity
    from infra.store.base import ChunkRecord
    from messages.plan import Requirement
    from messages.forage import ChunkJudgement

    full = load_beir(tiny).qrels("test")
    monkeypatch.setattr(calibrate, "build_llm", lambda settings: judge_from(tiny, full, 1.0, 0.0))
    result = CliRunner().invoke(app, ["calibrate", "--llm", "ollama", "--model", "perfect-m", "--beir", str(tiny),
                                      "--split", "test", "--queries", "3"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "TPR 1.00" in result.output and "FPR 0.00" in result.output and "ollama:perfect-m" in result.output
    assert json.loads(judges_file().read_text())["ollama:perfect-m"]["tpr"] == 1.0
    bad = CliRunner().invoke(app, ["calibrate", "--beir", str(tiny / "none")])
    assert bad.exit_code == 2 and "error" in bad.output

    base = Settings.load(embed={"backend": "minilm"})
    curve = base.answer_curve("store")
    assert curve is not None

    def step(model: str) -> ForageStep:
        settings = base.updated(llm={"backend": "ollama", "model": model})
        signal = EmbeddingSimilarity(None, settings.similarity_floors("store"),  # type: ignore[arg-type]
                                     settings.answer_confirmation("store"), curve)
        return ForageStep(settings, store=None, embedder=None, llm=FunctionLLM(yes_man), relevance=signal)  # type: ignore[arg-type]

    calibrated, uncalibrated = step("perfect-m"), step("never-calibrated")
    assert (calibrated.check.credit.tpr, calibrated.check.credit.fpr) == (1.0, 0.0)
    assert calibrated.check.answer_floor < uncalibrated.check.answer_floor
    between = (calibrated.check.answer_floor + uncalibrated.check.answer_floor) / 2
    chunk = ChunkRecord(chunk_id="d:0", doc_id="d", ordinal=0, text="aspirin heart attack", section_path="Results",
                        char_start=0, char_end=20, token_count=3)
    verdict = ChunkJudgement(chunk_id="d:0", doc_id="d", tag="answers", stage="start", kind="result", motive="Yes.")
    requirement = Requirement(id="R1", text="Does aspirin prevent heart attacks?")
    assert calibrated.check.checked(verdict, between, chunk, requirement).tag == "answers"
    assert uncalibrated.check.checked(verdict, between, chunk, requirement).tag == "interesting"


def test_the_shipped_labelled_set_is_whole_and_the_default_of_forage_calibrate(monkeypatch, tmp_path: Path) -> None:
    """The set Forage ships (actors/steps/evaluation/labelled, its SOURCE.md): 19 questions on 13 papers, every one
    with answering passages in its corpus and three near others to judge; `forage calibrate` without --beir judges
    its questions (split test), here with a simulated perfect judge."""
    import actors.steps.evaluation.calibrate as calibrate
    from gateway.cli import app

    data = load_beir(calibrate.LABELLED_SET)
    qrels = data.qrels("test")
    assert len(data.queries) == len(qrels) == 19 and len({title for title, _ in data.corpus.values()}) == 13
    for qid, rels in qrels.items():
        assert rels and all(c in data.corpus for c in rels), qid
    shown = labelled_passages(data, qrels, list(qrels)[:5], near=3)
    assert all(sum(not rel for _, rel in passages) == 3 for passages in shown.values())
    monkeypatch.setattr(calibrate, "build_llm",
                        lambda settings: SimulatedJudge(data.corpus, data.queries, qrels, 1.0, 0.0))
    result = CliRunner().invoke(app, ["calibrate", "--llm", "ollama", "--model", "shipped-m", "--queries", "4",
                                      "--no-save"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "TPR 1.00" in result.output and "FPR 0.00" in result.output and "labelled:test" in result.output
