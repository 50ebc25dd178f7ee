"""`forage eval evidence` on a tiny BEIR folder: the real Forager (ForageStep), MiniLM, LanceStore and the
relevance check; the judge is a function LLM. Scored by the qrels alone."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.steps.evaluation.evidence import (
    QueryOutcome,
    answer_floor_sweep,
    coverage_at,
    evaluate_evidence,
    held_out_documents,
    split_answerable,
)
from actors.steps.schemas import BatchVerdict, DeepDiveBatchVerdict, DocumentGist, Reformulation, RelevanceGate
from infra.errors import ConfigError
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from tests.tiny_beir import QUERIES, write_beir


def yes_man(messages, schema):
    """A weak judge: every passage answers with a method; other steps answered plainly."""
    if issubclass(schema, (BatchVerdict, DeepDiveBatchVerdict)):
        user = messages[-1]["content"]
        numbers = sorted({int(n) for n in re.findall(r"<<<PASSAGE (\d+)\n", user)})
        return {"verdicts": [{"passage": n, "tag": "answers", "kind": "method", "motive": "It answers."}
                             for n in numbers]}
    if schema is DocumentGist:
        return {"summary": "A study."}
    if schema is RelevanceGate:
        return {"continue_search": False, "reason": "Enough."}
    if schema is Reformulation:
        return {"query": "another query"}
    raise AssertionError(schema.__name__)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny")


def test_half_the_queries_are_made_unanswerable_by_seed() -> None:
    qids = ["q1", "q2", "q3", "q4"]
    assert split_answerable(qids, 0) == split_answerable(qids, 0) and len(split_answerable(qids, 0)) == 2
    assert any(split_answerable(qids, s) != split_answerable(qids, 0) for s in range(1, 10))
    qrels = {"q1": {"d1": 2, "d9": 1}, "q2": {"d4": 1, "d5": 0}}
    assert held_out_documents(qrels, {"q1", "q2"}) == {"d1", "d9", "d4"}  # grade 0 is not relevant


def test_coverage_at_an_answer_floor_follows_the_foragers_rule() -> None:
    verdicts = [("answers", "method", 0.5), ("answers", "background", 0.7), ("interesting", None, 0.2)]
    # at 0.8 every passage is below the floor: the answers count as interesting ones, and no interesting passage
    # under the floor stands as related evidence
    assert [coverage_at(verdicts, f) for f in (0.4, 0.6, 0.8)] == [1.0, 0.75, 0.0]
    assert coverage_at([*verdicts, ("interesting", None, 0.85)], 0.8) == 0.5
    assert coverage_at([("interesting", None, None)], 0.8) == 0.5  # no similarity (the check off): the judge's word
    assert coverage_at([("unrelated", None, 0.9)], 0.1) == 0.0
    # an answer the run's retrieval signals did not confirm counts at no floor
    assert coverage_at([("answers", "method", 0.7, False), ("answers", "method", 0.5, True)], 0.6) == 0.5
    assert coverage_at([("answers", "method", 0.7, False), ("answers", "method", 0.5, True)], 0.43) == 1.0
    outcomes = [QueryOutcome("a", True, 1.0, True, True, [], 1, 0, 1.0, 0, [("answers", "result", 0.6)]),
                QueryOutcome("u", False, 1.0, False, False, [], 1, 0, 1.0, 0, [("answers", "result", 0.45)])]
    sweep = {row["answer_floor"]: row for row in answer_floor_sweep(outcomes)}
    assert sweep[0.43]["false_coverage"] == 1.0 and sweep[0.5]["false_coverage"] == 0.0
    assert sweep[0.5]["answered_answerable"] == 1.0 and sweep[0.65]["answered_answerable"] == 0.0


def test_the_check_lowers_false_coverage_of_a_yes_man_judge(tiny: Path, minilm) -> None:
    """The judge's word alone gives every requirement coverage 1.0, the unanswerable ones too; the relevance
    check takes it away where the store holds nothing close, and the figures come from the qrels only."""
    settings = Settings.load().updated(forage={"max_deep_dives": 0, "min_papers": 0})
    out = evaluate_evidence(settings, tiny, n_queries=4, seed=1, llm=FunctionLLM(yes_man), embedder=minilm)
    assert out["n_queries"] == 3 and out["answerable"] + out["unanswerable"] == 3  # three judged test queries
    judge, checked = out["modes"]["judge"], out["modes"]["checked"]
    assert judge["false_coverage"] == 1.0 and judge["coverage_unanswerable"] == 1.0
    assert checked["false_coverage"] < judge["false_coverage"]
    assert checked["llm_calls"] < judge["llm_calls"]  # passages far from the requirement are never shown
    for mode in ("judge", "checked"):
        rows = out["queries"][mode]
        assert len(rows) == 3 and all(set(r["evidence"]) <= {f"d{i}" for i in range(1, 11)} for r in rows)
        relevant = {"q1": {"d1", "d9"}, "q2": {"d4"}, "q3": {"d8"}}  # TEST_QRELS
        for r in rows:  # an unanswerable query's documents were never in the store
            assert r["answerable"] or not set(r["evidence"]) & relevant[r["qid"]]
    assert [row["answer_floor"] for row in out["answer_floor_sweep"]][0] == 0.43


def test_cli_prints_the_table_and_writes_json(tiny: Path, tmp_path: Path, monkeypatch) -> None:
    import infra.llm
    from gateway.cli import app

    monkeypatch.setattr(infra.llm, "build_llm", lambda settings: FunctionLLM(yes_man))
    out = tmp_path / "evidence.json"
    result = CliRunner().invoke(app, ["eval", "evidence", "--beir", str(tiny), "--queries", "3", "--mode", "checked",
                                      "--out", str(out)], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "false coverage" in result.output and "checked" in result.output
    data = json.loads(out.read_text())
    assert "reliability" in result.output and "ECE" in result.output and "share answerable" in result.output
    assert list(data["reliability"]) == ["checked"] and "ece" in data["modes"]["checked"]
    assert sum(r["n"] for r in data["reliability"]["checked"]) == data["n_queries"]
    assert list(data["modes"]) == ["checked"] and set(QUERIES) >= {r["qid"] for r in data["queries"]["checked"]}
    bad = CliRunner().invoke(app, ["eval", "evidence", "--beir", str(tmp_path / "none")])
    assert bad.exit_code == 2 and "error" in bad.output
    simulated = CliRunner().invoke(app, ["eval", "evidence", "--beir", str(tiny), "--queries", "3", "--mode",
                                         "checked", "--judge", "simulated:0.8,0.2,3"], env={"COLUMNS": "250"})
    assert simulated.exit_code == 0, simulated.output
    assert "simulated:0.8,0.2,3" in simulated.output and "judge tpr" in simulated.output
    assert "TPR 0.8, FPR 0.2" in simulated.output
    for bad_judge, bad_store in (("simulated:2,0", None), (None, tmp_path / "no-store")):
        options = ["--judge", bad_judge] if bad_judge else ["--store", str(bad_store)]
        bad = CliRunner().invoke(app, ["eval", "evidence", "--beir", str(tiny), "--queries", "3", *options])
        assert bad.exit_code == 2 and "error" in bad.output


def judge_prompt(requirement: str, passages: list[tuple[str, str]]) -> list[dict]:
    """The Forager's judging prompt for these (title, text) passages, as judging.BatchJudge words it."""
    from actors.steps.text import block

    shown = [f"[{n}] Document: {title}\nSection: Abstract\n{block(f'PASSAGE {n}', text)}"
             for n, (title, text) in enumerate(passages, start=1)]
    return [{"role": "system", "content": "You judge."},
            {"role": "user", "content": f"Requirement: {requirement}\n\n" + "\n\n".join(shown) + "\n\nFor each."}]


def test_a_simulated_judge_answers_from_the_qrels_at_its_rates() -> None:
    """A perfect judge answers exactly the relevant documents' passages; (0.8, 0.2) over many passages answers
    about 80 % of relevant and 20 % of other ones, the same verdict every time for the same passage and seed."""
    import asyncio

    from test_eval_retrieval import CORPUS

    from actors.steps.evaluation.simulated import SimulatedJudge, parse_judge
    from actors.steps.schemas import batch_schema

    corpus = {cid: (title, text) for cid, title, text in CORPUS}
    qrels = {"q1": {"d1": 2, "d9": 1, "d2": 0}}
    prompt = judge_prompt(QUERIES["q1"], [(corpus[c][0], corpus[c][1]) for c in ("d2", "d1", "d9", "d5")])
    perfect = SimulatedJudge(corpus, QUERIES, qrels, *parse_judge("simulated:1,0"))
    verdicts = asyncio.run(perfect.structured(prompt, batch_schema(4))).verdicts
    assert [(v.passage, v.tag) for v in verdicts] == [(1, "unrelated"), (2, "answers"), (3, "answers"),
                                                      (4, "unrelated")]
    assert perfect.calls == 1

    # many passages: sentences of the documents, each judged on its own
    judge = SimulatedJudge(corpus, QUERIES, qrels, *parse_judge("simulated:0.8,0.2,7"))
    words = {cid: text.split() for cid, (_, text) in corpus.items()}
    drawn = {True: [], False: []}
    for cid, ws in words.items():
        for start in range(len(ws) - 6):
            text = " ".join(ws[start:start + 6])
            drawn[cid in ("d1", "d9")].append(judge.answers("q1", cid, text))
            assert judge.answers("q1", cid, text) == drawn[cid in ("d1", "d9")][-1]  # deterministic
    tpr, fpr = sum(drawn[True]) / len(drawn[True]), sum(drawn[False]) / len(drawn[False])
    assert 0.6 < tpr < 0.95 and 0.1 < fpr < 0.3, (tpr, fpr)
    other_seed = SimulatedJudge(corpus, QUERIES, qrels, 0.8, 0.2, 8)
    assert any(other_seed.answers("q1", "d5", f"passage {n}") != judge.answers("q1", "d5", f"passage {n}")
               for n in range(20))


def test_a_simulated_judge_tells_overlapping_passages_of_one_paper_apart() -> None:
    """Passages of one paper overlap (a chunk's window runs into the next): a shown passage is the one that starts
    with its text, not a relevant neighbour that also holds it."""
    from actors.steps.evaluation.simulated import SimulatedJudge

    head = "the detector was calibrated with cosmic muons before the run began and"
    corpus = {"p:0": ("One paper", f"Earlier text of the paper. {head} its response was stable"),
              "p:1": ("One paper", f"{head} its response"),
              "p:2": ("One paper", "The mass is 125.09 GeV, measured with both experiments combined.")}
    judge = SimulatedJudge(corpus, {"q": "What is the mass?"}, {"q": {"p:0": 1, "p:2": 1}}, 1.0, 0.0, 0)
    assert judge.document("One paper", corpus["p:1"][1]) == "p:1"
    assert judge.document("One paper", corpus["p:0"][1]) == "p:0"
    assert judge.document("One paper", "Earlier text of the paper. the detector") == "p:0"  # held only


def test_a_simulated_judge_refuses_what_it_cannot_read() -> None:
    import asyncio

    from actors.steps.evaluation.simulated import SimulatedJudge, parse_judge
    from actors.steps.schemas import batch_schema
    from infra.errors import ConfigError, LLMOutputError

    for bad in ("simulated:1", "simulated:a,b", "oracle:1,0", "simulated:1.2,0"):
        with pytest.raises(ConfigError, match="--judge"):
            parse_judge(bad)
    judge = SimulatedJudge({"d1": ("A title", "Some text.")}, {"q1": "A query"}, {"q1": {"d1": 1}}, 1.0, 0.0)
    with pytest.raises(ValueError, match="none of the dataset's queries"):
        asyncio.run(judge.structured(judge_prompt("Another query", [("A title", "Some text.")]), batch_schema(1)))
    with pytest.raises(ValueError, match="no document"):
        asyncio.run(judge.structured(judge_prompt("A query", [("Unknown", "Other text.")]), batch_schema(1)))
    from actors.steps.schemas import OverviewDraft

    with pytest.raises(LLMOutputError, match="OverviewDraft"):
        asyncio.run(judge.structured([{"role": "user", "content": "Write."}], OverviewDraft))


def test_the_bench_with_a_simulated_judge_measures_the_pipeline_and_the_judges_rates(tiny: Path, minilm) -> None:
    """The whole pipeline on the tiny set with simulated judges: the perfect judge's rates are measured back
    from its recorded verdicts (1 and 0), it covers every answerable requirement and no unanswerable one; the
    check is told its rates."""
    settings = Settings.load().updated(forage={"min_papers": 0})
    out = evaluate_evidence(settings, tiny, n_queries=4, seed=1, embedder=minilm, judge="simulated:1,0")
    assert out["llm"] == "simulated:1,0,0" and out["judge_rates_told"] == [1.0, 0.0]
    judge = out["modes"]["judge"]  # every retrieved passage is shown: relevant and other ones
    assert judge["judge_tpr"] == 1.0 and judge["judge_fpr"] == 0.0
    assert judge["judged_relevant"] >= 1 and judge["judged_other"] >= 1
    figures = out["modes"]["checked"]
    assert figures["judge_tpr"] == 1.0 and figures["judged_relevant"] >= 1
    # told the judge is perfect, the check credits its answers the signal alone would not confirm (q3: "Staying
    # awake all night harms memory", answered by the sleep-deprivation abstract at similarity 0.7 and few shared words)
    assert figures["false_coverage"] == 0.0 and figures["answered_answerable"] == 1.0
    told_nothing = evaluate_evidence(settings.updated(forage={"judge_tpr": 1.0, "judge_fpr": 1.0}), tiny, n_queries=4,
                                     seed=1, embedder=minilm, judge="simulated:1,0", modes=("checked",))
    assert told_nothing["judge_rates_told"] == [1.0, 1.0]
    # told its word carries nothing, the same verdicts leave the signal's own estimate: the answerable requirements'
    # coverage is lower, the unanswerable ones' no higher (here nothing is shown for them: 0)
    nothing = told_nothing["modes"]["checked"]
    assert nothing["coverage_answerable"] < figures["coverage_answerable"]
    assert nothing["coverage_unanswerable"] >= figures["coverage_unanswerable"]


def nobody_answers(messages, schema):
    """A judge that finds nothing: every passage unrelated; other steps answered plainly."""
    if issubclass(schema, (BatchVerdict, DeepDiveBatchVerdict)):
        numbers = sorted({int(n) for n in re.findall(r"<<<PASSAGE (\d+)\n", messages[-1]["content"])})
        return {"verdicts": [{"passage": n, "tag": "unrelated", "kind": "background", "motive": "No."}
                             for n in numbers]}
    return yes_man(messages, schema)


def test_a_requirement_is_foraged_as_a_run_iterates_it(tiny: Path, minilm) -> None:
    """As in a run over a fixed library: a requirement answered in its first iteration stops there; one the judge
    finds nothing for goes on to passages it was not shown (never one twice) until an iteration brings nothing new or
    the cap; ``iterations=1`` is the first iteration alone."""
    settings = Settings.load().updated(forage={"min_papers": 0, "bm25_k": 2, "vector_k": 2, "paper_k": 1,
                                               "max_deep_dives": 0})
    answered = evaluate_evidence(settings, tiny, n_queries=4, seed=1, llm=FunctionLLM(yes_man), embedder=minilm,
                                 modes=("judge",))
    assert answered["max_iterations"] == settings.run.max_iterations
    assert all(r["coverage"] == 1.0 and r["iterations"] == 1 for r in answered["queries"]["judge"])
    deeper = evaluate_evidence(settings, tiny, n_queries=4, seed=1, llm=FunctionLLM(nobody_answers),
                               embedder=minilm, modes=("judge",), iterations=3)
    once = evaluate_evidence(settings, tiny, n_queries=4, seed=1, llm=FunctionLLM(nobody_answers),
                             embedder=minilm, modes=("judge",), iterations=1)
    for many, one in zip(deeper["queries"]["judge"], once["queries"]["judge"], strict=True):
        assert one["iterations"] == 1 and 1 < many["iterations"] <= 3 and many["coverage"] == 0.0
        assert len(many["judged"]) > len(one["judged"])  # later iterations showed passages the first did not
    assert deeper["modes"]["judge"]["iterations"] > 1
    with pytest.raises(ConfigError, match="--iterations"):
        evaluate_evidence(settings, tiny, n_queries=4, llm=FunctionLLM(yes_man), embedder=minilm, iterations=0)


def test_a_kept_store_is_copied_and_the_held_out_documents_left_out_of_the_copy(tiny: Path, tmp_path: Path,
                                                                                minilm) -> None:
    from actors.steps.evaluation.retrieval import load_beir, load_corpus
    from infra.store import build_store

    kept = tmp_path / "kept"
    settings = Settings.load().updated(store={"path": kept}, forage={"min_papers": 0})
    load_corpus(settings, build_store(settings), minilm, load_beir(tiny))
    out = evaluate_evidence(settings, tiny, n_queries=4, seed=1, embedder=minilm, judge="simulated:1,1",
                            modes=("judge",), base_store=kept)
    assert out["held_out_documents"] >= 1 and out["n_docs"] == 10 - out["held_out_documents"]
    relevant = {"q1": {"d1", "d9"}, "q2": {"d4"}, "q3": {"d8"}}  # TEST_QRELS
    rows = out["queries"]["judge"]
    assert any(not r["answerable"] for r in rows)
    for r in rows:  # a yes-man cites whatever it is shown: an unanswerable query's documents were not there
        assert r["answerable"] or not set(r["evidence"]) & relevant[r["qid"]]
    assert len(build_store(settings).list_documents()) == 10  # the kept store itself is untouched


def _row(answerable: bool, coverage: float) -> QueryOutcome:
    return QueryOutcome("q", answerable, coverage, False, False, [], 1, 0, 1.0, 0)


def test_the_reliability_table_bins_requirements_by_coverage_with_their_share_answerable() -> None:
    """Hand-made rows: coverage 1.0 on two answerable and one unanswerable requirement, 0.5 on one of each, 0 on
    two unanswerable ones; the ECE is the requirement-weighted gap between a bin's coverage and its share answerable."""
    from actors.steps.evaluation.evidence import ModeSummary, expected_calibration_error, reliability

    rows = [_row(True, 1.0), _row(True, 1.0), _row(False, 1.0), _row(True, 0.5), _row(False, 0.5),
            _row(False, 0.0), _row(False, 0.0)]
    table = reliability(rows)
    assert table == [{"bin": 0.0, "n": 2.0, "mean_coverage": 0.0, "answerable": 0.0},
                     {"bin": 0.5, "n": 2.0, "mean_coverage": 0.5, "answerable": 0.5},
                     {"bin": 1.0, "n": 3.0, "mean_coverage": 1.0, "answerable": 0.6667}]
    assert expected_calibration_error(table) == pytest.approx(round(3 * (1 - 0.6667) / 7, 4))
    # 0.75 sits in the 0.75 bin, 0.74 in the 0.5 bin: a bin holds its lower edge, not its upper one
    assert [r["bin"] for r in reliability([_row(True, 0.75), _row(False, 0.74)])] == [0.5, 0.75]
    # perfectly calibrated: answerable at 1.0, unanswerable at 0; a coverage that says nothing (0.5 everywhere, half
    # answerable) is calibrated too, but the worst is a confident wrong one
    assert expected_calibration_error(reliability([_row(True, 1.0), _row(False, 0.0)])) == 0.0
    assert expected_calibration_error(reliability([_row(True, 0.5), _row(False, 0.5)])) == 0.0
    assert expected_calibration_error(reliability([_row(False, 1.0), _row(True, 0.0)])) == 1.0
    assert math.isnan(expected_calibration_error(reliability([])))
    summary = ModeSummary("checked", rows)
    assert summary.figures()["ece"] == expected_calibration_error(table)
