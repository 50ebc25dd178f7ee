"""Comparison artifacts: contribution records under a schema, set-aware passes, the computed gap matrix."""

from __future__ import annotations

import asyncio
import itertools
import random

from test_write_step import A, B, C, embedder, store  # noqa: F401  (fixtures)

from actors.steps.write.compare import ComparisonStep, contribution_schema, gap_matrix
from actors.steps.schemas import ContributionDraft, DifferenceDraft, OverlapDraft
from infra.errors import LLMOutputError
from infra.llm.fakes import ScriptedLLM
from infra.settings import Settings
from messages.write import ContributionRecord, SourceRef

PROBLEMS = ("prediction", "mechanism", "measurement")
METHODS = ("trial", "experiment", "model")


def rec(n: int, plabel: str | None, mlabel: str | None, **text: str) -> ContributionRecord:
    return ContributionRecord(n=n, doc_id=f"d{n}", title=f"Paper {n}", problem_label=plabel, method_label=mlabel,
                              **text)


RECORDS = [rec(1, "mechanism", "experiment"), rec(2, "prediction", "model"), rec(3, "mechanism", "experiment"),
           rec(4, "measurement", "trial"), rec(5, "not a label", "model"), rec(6, None, None)]


def test_gap_matrix_cells_and_empty_cells():
    m = gap_matrix(RECORDS, PROBLEMS, METHODS)
    assert m.cells == (((), (), (2,)), ((), (1, 3), ()), ((4,), (), ()))
    assert m.unlabelled == (5, 6)
    assert m.empty == [("prediction", "trial"), ("prediction", "experiment"), ("mechanism", "trial"),
                       ("mechanism", "model"), ("measurement", "experiment"), ("measurement", "model")]


def test_gap_matrix_is_deterministic_and_order_independent():
    first = gap_matrix(RECORDS, PROBLEMS, METHODS)
    for perm in itertools.permutations(RECORDS):
        assert gap_matrix(perm, PROBLEMS, METHODS) == first
    shuffled = RECORDS[:]
    random.Random(7).shuffle(shuffled)
    assert gap_matrix(shuffled, PROBLEMS, METHODS).model_dump_json() == first.model_dump_json()


def test_compliance_needs_all_four_fields():
    full = dict(problem="p", method="m", contribution="c", novelty="n")
    assert rec(1, None, None, **full).compliant
    for field in full:
        assert not rec(1, None, None, **{**full, field: "  "}).compliant


def test_the_label_schema_only_allows_the_taxonomy():
    schema = contribution_schema(PROBLEMS, METHODS)
    js = schema.model_json_schema()
    assert js["properties"]["problem_label"]["enum"] == list(PROBLEMS)
    assert js["properties"]["method_label"]["enum"] == list(METHODS)
    assert schema.__name__ == "ContributionDraft" and issubclass(schema, ContributionDraft)


# each paper's record in its own words (the comparison keeps only fields its paper's text holds)
OWN = {"A": ("How chlorophyll in photosystem II absorbs photons.", "The light reactions split water.",
             "The light reactions produce ATP and NADPH.", "It is the first to show the reactions split water."),
       "B": ("Leaves of sun-exposed plants and shade leaves.", "Chlorophyll per area was measured at noon.",
             "Sun leaves hold more chlorophyll per area than shade leaves.",
             "It is the first to measure young leaves in midsummer."),
       "C": ("How the Calvin cycle fixes carbon dioxide.", "The cycle uses ATP and NADPH.",
             "The Calvin cycle fixes carbon dioxide into sugars.", "It is the first to follow carbon into sugars.")}


def record(problem: str, method: str, novelty: str | None = None, paper: str = "A") -> dict:
    p, m, c, n = OWN[paper]
    return {"problem": p, "method": m, "contribution": c, "novelty": n if novelty is None else novelty,
            "problem_label": problem, "method_label": method}


def sources():
    return [SourceRef(n=i, doc_id=d[0].doc_id, title=d[0].title, year=d[0].year) for i, d in enumerate((A, B, C), start=1)]


def run_compare(store, llm):
    settings = Settings.load().updated(write={"problem_labels": PROBLEMS, "method_labels": METHODS})
    return asyncio.run(ComparisonStep(settings, store, llm).compare(sources(), {A[0].doc_id: "About light."}))


def test_scripted_records_overlaps_differences_and_compliance(store):
    llm = ScriptedLLM({
        ContributionDraft: [record("mechanism", "experiment"), record("mechanism", "experiment", novelty="", paper="B"),
                            record("prediction", "model", paper="C")],
        OverlapDraft: [{"overlaps": [{"papers": [2, 1, 9], "element": "method", "shared": "chlorophyll assays"},
                                     {"papers": [3, 99], "element": "dataset", "shared": "nothing real"}]}],
        DifferenceDraft: [{"differences": [{"paper": 3, "distinct": "Only it models sugar synthesis rates."},
                                           {"paper": 1, "distinct": "Only it looks at the light reactions."},
                                           {"paper": 1, "distinct": "A second claim for paper one here."}]}]})
    comparison = run_compare(store, llm)
    llm.assert_exhausted()
    assert [r.n for r in comparison.records] == [1, 2, 3]
    assert comparison.compliant == 2 and comparison.llm_calls == 5
    assert [(o.papers, o.element) for o in comparison.overlaps] == [((1, 2), "method")]
    assert [(d.n, d.distinct) for d in comparison.differences] == [
        (1, "Only it looks at the light reactions."), (3, "Only it models sugar synthesis rates.")]
    assert comparison.matrix.cells[1][1] == (1, 2) and comparison.matrix.cells[0][2] == (3,)
    # the record prompt shows the paper, its abstract or text, the evidence and the taxonomy
    first = llm.calls_log[0].last_user_message
    assert first.startswith(f"Paper [1]: {A[0].title} (2020)") and "About light." in first
    assert "Problem labels: prediction; mechanism; measurement" in first
    # the set-aware passes see every record at once
    overlap_prompt = next(c for c in llm.calls_log if c.schema == "OverlapDraft").last_user_message
    assert all(f"[{n}] " in overlap_prompt for n in (1, 2, 3))


def test_a_label_outside_the_taxonomy_fails_validation_and_the_record_stays_empty(store):
    bad = record("astrology", "experiment")
    llm = ScriptedLLM({ContributionDraft: [bad, bad, bad, record("mechanism", "trial", paper="B"),
                                           record("mechanism", "trial", paper="C")],
                       OverlapDraft: [LLMOutputError("no valid OverlapDraft")],
                       DifferenceDraft: [{"differences": []}]})
    comparison = run_compare(store, llm)
    assert comparison.records[0].problem == "" and not comparison.records[0].compliant
    assert comparison.compliant == 2 and comparison.matrix.unlabelled == (1,)
    assert comparison.failed_steps == ("record [1]: LLMOutputError; left empty",
                                       "overlap pass: LLMOutputError; no overlaps listed")


def test_a_record_about_another_paper_is_left_empty_and_said(store):
    """Seen with the embedded model: the TraceMonkey paper's record described the sepsis paper's method."""
    llm = ScriptedLLM({ContributionDraft: [record("mechanism", "experiment"), record("mechanism", "trial", paper="B"),
                                           record("prediction", "model", paper="A")],  # paper 3's record is A's
                       OverlapDraft: [{"overlaps": []}], DifferenceDraft: [{"differences": []}]})
    comparison = run_compare(store, llm)
    third = comparison.records[2]
    assert (third.problem, third.method, third.contribution, third.novelty) == ("", "", "", "")
    assert third.problem_label == "prediction"  # the labels are a choice among the taxonomy's, not a claim
    assert comparison.records[0].method == "The light reactions split water." and comparison.compliant == 2
    assert "record [3]: problem, method, contribution, novelty not found in the paper's own text; left empty" \
        in comparison.failed_steps


def test_record_text_drops_what_a_weak_model_echoes_or_loops():
    from actors.steps.write.compare import record_text

    echoes = ["Light Reactions of Photosynthesis", *PROBLEMS, "Prediction or Forecasting"]
    assert record_text("Method, Experiment, Procedure, Experiment, Experiment, Method, Experiment, Procedure, "
                       "Experiment, Method", echoes) == ""
    assert record_text("Light Reactions of Photosynthesis (2020)", echoes) == ""
    assert record_text("Prediction or forecasting.", echoes) == ""
    assert record_text("2022-01-01T00:00:00Z", echoes) == ""
    kept = "Chlorophyll content was measured in sun and shade leaves."
    assert record_text(kept, echoes) == kept


def test_an_overlap_that_names_only_its_element_is_dropped(store):
    llm = ScriptedLLM({
        ContributionDraft: [record("mechanism", "experiment")] * 3,
        OverlapDraft: [{"overlaps": [{"papers": [1, 2, 3], "element": "problem", "shared": "problem"},
                                     {"papers": [1, 3], "element": "method", "shared": "ATP assays"}]}],
        DifferenceDraft: [{"differences": [{"paper": 2, "distinct": "Notes on [Leaf] *Energy*"}]}]})
    comparison = run_compare(store, llm)
    assert [(o.papers, o.shared) for o in comparison.overlaps] == [((1, 3), "ATP assays")]
    assert comparison.differences == ()  # the title echoed is no difference
