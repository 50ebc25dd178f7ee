"""Comparison artifacts: contribution records under a schema, set-aware passes, the computed gap matrix."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from actors.steps.write.compare import ComparisonStep, contribution_schema, gap_matrix
from actors.steps.schemas import ContributionDraft, DifferenceDraft, OverlapDraft
from infra.errors import LLMOutputError
from infra.llm.fakes import ScriptedLLM
from infra.settings import Settings
from messages.write import ContributionRecord, SourceRef
from tests.leaves import A, B, C, leaf_store


@pytest.fixture(scope="module")
def embedder(minilm):
    return minilm


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    """The three leaf papers (tests/leaves.py), read only."""
    return leaf_store(tmp_path_factory.mktemp("leaves") / "store", embedder)


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


# -- the labels' check against each paper's own text ---------------------------------------------------------------

class WordEmbedder:
    """One dimension per meaning, counted from the words that carry it: a text and a label are similar when they
    share a meaning (a deterministic stand-in for the embedder's similarity)."""

    MEANINGS = (("prediction", "forecast", "predicts"), ("mechanism", "reactions", "split"),
                ("measurement", "measured", "measure"), ("trial", "randomized"), ("experiment", "assay", "absorbs"),
                ("model", "simulated"))

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.embedded = fail, []

    def check(self) -> None:
        """Always usable."""

    def warm(self) -> None:
        """Nothing to load."""

    def embed(self, texts):
        if self.fail:
            raise ConnectionError("embedder down")
        self.embedded += list(texts)
        return [[0.01 + sum(text.lower().count(w) for w in words) for words in self.MEANINGS] for text in texts]


def test_label_check_ranks_the_taxonomy_by_the_papers_text_and_skips_catch_alls():
    from actors.steps.write.compare import LabelCheck, catch_all

    emb = WordEmbedder()
    check = LabelCheck(emb, (*PROBLEMS, "other problem"), (*METHODS, "other method"), top=1)
    text = "The light reactions split water; photosystem II absorbs photons in every assay."
    assert check.ranked(text) == (["mechanism", "prediction", "measurement"], ["experiment", "trial", "model"])
    assert check.unsupported(text, "mechanism", "experiment") == ((), ("mechanism", "experiment"))
    assert check.unsupported(text, "prediction", "experiment") == (("prediction",), ("mechanism", "experiment"))
    assert check.unsupported(text, "other problem", "model") == (("model",), ("mechanism", "experiment"))
    assert check.unsupported(text, None, None)[0] == ()
    # the label phrases are embedded once, catch-alls never
    assert emb.embedded.count("mechanism") == 1 and "other problem" not in emb.embedded
    assert catch_all("Other method") and not catch_all("otherwise") and not catch_all("")
    assert LabelCheck(emb, PROBLEMS, METHODS, top=2).unsupported(text, "prediction", "model")[0] == ("model",)


def run_checked(store, llm, embedder, top=1):
    settings = Settings.load().updated(write={"problem_labels": PROBLEMS, "method_labels": METHODS,
                                              "label_check_top": top})
    return asyncio.run(ComparisonStep(settings, store, llm, embedder).compare(sources()))


def scripted_labels():
    return ScriptedLLM({ContributionDraft: [record("prediction", "experiment"),  # A: light reactions, not prediction
                                            record("measurement", "experiment", paper="B"),
                                            record("mechanism", "trial", paper="C")],
                        OverlapDraft: [{"overlaps": []}], DifferenceDraft: [{"differences": []}]})


def test_a_label_its_paper_does_not_support_is_recorded_and_marked_in_the_matrix(store):
    from actors.steps.write.render import render_comparison

    comparison = run_checked(store, scripted_labels(), WordEmbedder())
    first = comparison.records[0]
    assert first.unsupported_labels == ("prediction",) and first.text_labels[0] == "mechanism"
    assert first.problem_label == "prediction"  # the model's label stays: the check marks, it does not relabel
    assert comparison.matrix.cells[0][1] == (1,) and 1 in comparison.matrix.unsupported
    assert comparison.label_check_top == 1
    lines = render_comparison(comparison)
    row = next(line for line in lines if line.startswith("| prediction |"))
    assert "[1]†" in row.split(" | ")[2]  # the cell (prediction, experiment)
    note = next(line for line in lines if line.startswith("Label check"))
    assert "[1] problem: mechanism (model: prediction†)" in note and "not among the 1 labels" in note
    # a paper whose labels its text supports carries no mark and is not listed
    supported = [r.n for r in comparison.records if not r.unsupported_labels and r.text_labels
                 and (r.problem_label, r.method_label) == r.text_labels]
    assert supported and all(f"[{n}]" not in note and f"[{n}]†" not in "\n".join(lines) for n in supported)


def test_without_an_embedder_or_with_the_check_off_the_labels_are_unchecked(store):
    from actors.steps.write.render import render_comparison

    for comparison in (run_compare(store, scripted_labels()), run_checked(store, scripted_labels(), WordEmbedder(), 0)):
        assert all(r.unsupported_labels == () and r.text_labels == () for r in comparison.records)
        assert comparison.matrix.unsupported == () and comparison.label_check_top == 0
        assert not any(line.startswith("Label check") for line in render_comparison(comparison))


def test_an_embedder_failure_leaves_the_labels_unchecked_and_says_so(store):
    comparison = run_checked(store, scripted_labels(), WordEmbedder(fail=True))
    assert comparison.matrix.unsupported == () and len(comparison.records) == 3
    assert "record [1]: labels not checked against the paper's text (ConnectionError: embedder down)" \
        in comparison.failed_steps


def test_minilm_gives_the_demo_reviews_own_labels_as_the_closest(minilm, shared_pdfs):
    """The demo's systematic review of DVT prophylaxis (the real PDF, parsed and outlined as at ingestion) was
    labelled 'prediction or forecasting' × 'randomized or controlled trial' by the embedded model (the first label of
    each list); with the product's MiniLM its title and abstract are closest to the review's own labels, which the
    report then names beside the model's."""
    from actors.steps.ingest.sections import outline
    from actors.steps.write.compare import LabelCheck
    from infra.pdf.pymupdf import PyMuPDFParser
    from infra.settings_sections import METHOD_LABELS, PROBLEM_LABELS
    pdf = next(p for p in shared_pdfs if p.name == "dvt_prophylaxis_trauma_bmc2010.pdf")
    parsed = PyMuPDFParser(max_pages=2).parse(pdf)
    text = f"{parsed.title}\n{outline(parsed.markdown, parsed.title).abstract}"
    assert "systematic review" in text and "thromboprophylaxis" in text
    check = LabelCheck(minilm, PROBLEM_LABELS, METHOD_LABELS, top=2)
    unsupported, closest = check.unsupported(text, "prediction or forecasting", "randomized or controlled trial")
    assert closest == ("intervention or treatment outcome", "systematic review or meta-analysis")
    assert unsupported == ("prediction or forecasting",)  # the trial is the second closest method: a design's name
    assert check.unsupported(text, "review or synthesis", "systematic review or meta-analysis")[0] == ()


def test_the_label_check_line_names_only_disagreements_and_marks_only_unsupported_labels():
    from actors.steps.write.render import label_check_lines

    agree = rec(1, "mechanism", "experiment", text_labels=("mechanism", "experiment"))
    assert label_check_lines([agree], 3)[0].startswith("Label check: each compared paper's labels are the ones")
    second = rec(2, "prediction", "model", text_labels=("mechanism", "model"))  # prediction: 2nd closest, not marked
    line = label_check_lines([agree, second], 3)[0]
    assert "[2] problem: mechanism (model: prediction)" in line and "[1]" not in line and "†" not in line
    far = rec(3, "prediction", "model", text_labels=("mechanism", "model"), unsupported_labels=("prediction",))
    line = label_check_lines([agree, far, rec(4, None, None)], 3)[0]
    assert "(model: prediction†)" in line and "† the model's label is not among the 3 labels" in line


def test_a_phrase_written_into_every_field_is_kept_once(store):
    """Seen on the held-out query: the TraceMonkey record read "trace-based JavaScript compiler" as its problem,
    method, contribution and novelty."""
    same = "Photosystem II absorbs photons."
    llm = ScriptedLLM({ContributionDraft: [{"problem": same, "method": same.lower(), "contribution": same,
                                            "novelty": "It is the first to show the reactions split water.",
                                            "problem_label": "mechanism", "method_label": "experiment"},
                                           record("mechanism", "trial", paper="B"),
                                           record("prediction", "model", paper="C")],
                       OverlapDraft: [{"overlaps": []}], DifferenceDraft: [{"differences": []}]})
    first = run_compare(store, llm).records[0]
    assert (first.problem, first.method, first.contribution) == (same, "", "")
    assert first.novelty == "It is the first to show the reactions split water."
    assert "record [1]: method, contribution, novelty repeated an earlier field; left empty" == run_compare(
        store, ScriptedLLM({ContributionDraft: [{"problem": same, "method": same, "contribution": same,
                                                 "novelty": same, "problem_label": "mechanism",
                                                 "method_label": "experiment"},
                                                record("mechanism", "trial", paper="B"),
                                                record("prediction", "model", paper="C")],
                            OverlapDraft: [{"overlaps": []}], DifferenceDraft: [{"differences": []}]})).failed_steps[0]
