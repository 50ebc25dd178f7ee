"""`forage eval runs`' scoring (actors/steps/evaluation/runs.py) on hand-made run folders: run.json written
through RunState, events.jsonl lines as the StatusHub writes them, report.json and report.md as the Writer saves
them. No LLM and no Ray: the scoring reads records only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.steps.evaluation.runs import (
    SuiteQuery, cited_numbers, fidelity, load_run_suite, not_a_need, questions, score_run, totals,
)
from actors.steps.run.rundir import RunDir
from messages.run_state import RunState

TWO = ("How do LLM agents search for academic papers, and how should humans evaluate the faithfulness of "
       "long-form summaries?")
SEARCH_PDF, GUIDE_PDF, OTHER_PDF = "paper_search_agent.pdf", "summary_guidelines.pdf", "wheat_heat.pdf"


def test_a_query_of_two_questions_is_split_and_each_needs_its_own_requirement() -> None:
    assert questions(TWO) == ["How do LLM agents search for academic papers",
                              "how should humans evaluate the faithfulness of long-form summaries"]
    assert questions("Which methods detect sepsis early in intensive care?") == [
        "Which methods detect sepsis early in intensive care"]
    # the plan: R1 a sentence about "the requirement to ...", R3 the re-plan's own progress text
    scored = fidelity(TWO, [
        ("R1", "The requirement to provide a concise summary of academic papers is a critical aspect of academic "
               "discourse."),
        ("R2", "Guidelines for human evaluation of the faithfulness of long-form summaries"),
        ("R3", "coverage 0.50; answering papers 0; answering passages: 1 method"),
    ])
    assert scored["missing_questions"] == ["How do LLM agents search for academic papers"]
    assert scored["questions_kept"] == 1 and scored["questions"] == 2
    assert scored["not_needs"] == {"R1": "meta", "R3": "status"}
    assert scored["status_or_meta"] == 2 and scored["off_query"] == 0
    kept = fidelity(TWO, [("R1", "Search strategies of LLM-based agents for finding academic papers"),
                          ("R2", "How humans judge faithfulness in long-form summaries")])
    assert kept["missing_questions"] == [] and kept["not_needs"] == {}


@pytest.mark.parametrize(("query", "asked"), [
    ("I need:\n- an R package for spectroscopy models\n- evidence on bosonic dark matter in the CMB",
     ["an R package for spectroscopy models", "evidence on bosonic dark matter in the CMB"]),
    ("1) How are citation links resolved? 2) How is PDF layout represented?",
     ["How are citation links resolved", "How is PDF layout represented"]),
    ("How is the Higgs mass measured, and also how do batteries lose capacity in the cold?",
     ["How is the Higgs mass measured", "how do batteries lose capacity in the cold"]),
    ("How do (1) tracing and (2) method compilers differ?", ["How do (1) tracing and (2) method compilers differ"]),
    # bench/suites/deep.yaml: letters after a lead-in, joined by ", and"
    ("Two things: (a) how can a dim protein be made brighter, and (b) how can dynamics stay symmetric?",
     ["how can a dim protein be made brighter", "how can dynamics stay symmetric"]),
    # said to the assistant, not asked: no requirement needs to hold it
    ("How does S2ORC resolve citation links? Please include the methods and datasets used.",
     ["How does S2ORC resolve citation links"]),
    # the researcher's situation is not asked, wherever it stands; ordinals open questions (bench/suites/odd.yaml)
    ("How do GP-RNNs predict sepsis early? We need this for a grant proposal due Friday.",
     ["How do GP-RNNs predict sepsis early"]),
    ("I am writing a review.\n\nFirst, how do toolkits represent PDFs?\n\nSecond, which interfaces help with "
     "citations?", ["how do toolkits represent PDFs", "which interfaces help with citations"]),
    # bench/suites/asks.yaml: a premise or a claim before the question asks nothing; a topic before it does
    ("Given that Asgard archaea are the closest relatives of eukaryotes, what does GDP binding say about them?",
     ["what does GDP binding say about them"]),
    ("Chemists distrust black-box models (Wellawatte et al. argue); which methods explain molecular models?",
     ["which methods explain molecular models"]),
    ("Inhibitors of angiotensin-converting enzyme; how fragment-based design makes them selective",
     ["Inhibitors of angiotensin-converting enzyme", "how fragment-based design makes them selective"]),
    ("Our lab is small. how do JIT compilers specialize types, and how is sepsis predicted early?",
     ["how do JIT compilers specialize types", "how is sepsis predicted early"]),
])
def test_a_list_and_an_and_also_ask_a_question_each(query, asked) -> None:
    """bench/suites/shapes.yaml's list and "and also" queries: each item is a need the plan must keep."""
    assert questions(query) == asked


@pytest.mark.parametrize(("text", "why"), [
    ("coverage stalled (0.50 → 0.50): the model named nothing missing", "status"),
    ("Iteration 3 brought 0 new documents from the library", "status"),
    ("This requirement covers the query in full.", "meta"),
    ("Find papers about crop yields under drought stress", "meta"),
    # what the embedded SmolLM2 proposed on bench/suites/library.yaml (docs/evaluation-runs.md)
    ("Read and understand the query. (about: heat stress and wheat grain yield)", "meta"),
    ("The question is about heat stress changing wheat grain yield.", "meta"),
    ("Provide a list of 5 requirements.", "meta"),
    ("Grain yield losses of wheat under post-anthesis heat stress", ""),
    # the researcher's own context restated (bench/suites/varied.yaml); a need in the first person is a need
    ("Our lab grows wheat under heat stress in field trials.", "context"),
    ("We need measurements of wheat grain yield under heat stress", ""),
    ("US wheat grain yield under heat stress", ""),
    ("The history of Byzantine mosaics in Ravenna", "off query"),
    # bench/suites/deep.yaml's plans: the model's own answer as a need, and its instructions echoed
    ("Wheat grain yield after flowering is 12% lower under heat stress", "answer"),
    ("This is a request to provide a detailed and concise answer to the question of how heat stress changes wheat",
     "meta"),
    ("Is wheat grain yield 12% lower under heat stress after flowering?", ""),
    ("Wheat grain yield in 2 heat stress trials", ""),
    # bench/suites/asks.yaml's plans: a claim without a figure answers too; a clause naming a need does not
    ("Wheat grain yield is lower under heat stress than in cool years", "answer"),
    ("Metabolites that are changed by heat stress in wheat", ""),
    ("Whether wheat grain yield is lower under heat stress", ""),
])
def test_what_is_not_a_need_of_the_query(text: str, why: str) -> None:
    assert not_a_need(text, "How does heat stress after flowering change wheat grain yield and metabolism?") == why


def test_cited_numbers_are_those_before_the_sources_list() -> None:
    md = ("# T\n## R1\nEvidence: one [1]. Two [2, 4]. Range [5–7].\n## Sources Consulted\n"
          "[1] A. *X*.\n[3] B. *Y*.\n[8] C. *Z*.\n")
    assert cited_numbers(md) == {1, 2, 4, 5, 6, 7}


def _run(tmp: Path, run_id: str, *, requirements: list[str], status: str = "finished", coverage: dict | None = None,
         iterations: list[dict] | None = None, documents: dict[str, str] | None = None,
         sources: list[tuple[int, str]] | None = None, cited: str = "", queued: dict[int, list[str]] | None = None,
         extra: dict | None = None, query: str = TWO) -> Path:
    """A run folder: ``documents`` file name -> doc id, ``sources`` (n, doc id), ``cited`` the report body's
    citations, ``queued`` the files offered per iteration."""
    rundir = RunDir(tmp / "runs", run_id)
    reqs = [{"id": f"R{i}", "text": t} for i, t in enumerate(requirements, start=1)]
    lib = tmp / "lib"
    data: dict = {"run_id": run_id, "status": status, "query": query,
                  **({"requirements": reqs} if status != "awaiting_approval" else {"proposed_requirements": reqs}),
                  "documents": {f"file:{lib / name}": {"key": f"file:{lib / name}", "path": str(lib / name),
                                                       "status": "stored", "doc_id": doc}
                                for name, doc in (documents or {}).items()},
                  "iterations": iterations or [], **(extra or {})}
    if status == "finished":
        data.update(stop_reason="reached the maximum of 2 iterations (coverage 0.40)", coverage=coverage or {},
                    final_coverage=sum((coverage or {}).values()) / max(1, len(coverage or {})), seconds=42.0)
    rundir.save_state(RunState.model_validate(data))
    events = []
    for it, names in (queued or {}).items():
        events.append({"seq": len(events) + 1, "stage": "search", "kind": "results", "iteration": it,
                       "payload": {"offered": names}})
        events += [{"seq": len(events) + 1, "stage": "ingest", "kind": "progress", "iteration": it,
                    "payload": {"key": f"file:{lib / n}", "phase": "queued"}} for n in names]
    rundir.events_jsonl.write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")
    if sources is not None:
        rundir.report_json.write_text(json.dumps({
            "markdown": "", "llm_calls": 5,
            "sources": [{"n": n, "doc_id": d, "title": d, "origin": f"{d}.pdf"} for n, d in sources]}))
        rundir.report_md.write_text(f"# Report\n## R1\nEvidence: {cited}\n## Sources Consulted\n"
                                    + "".join(f"[{n}] *{d}*.\n" for n, d in sources))
    return rundir.path


def _iteration(n: int, new: int, cov: dict[str, float], calls: dict[str, int]) -> dict:
    return {"iteration": n, "mean_coverage": sum(cov.values()) / len(cov), "new_documents": new, "coverage": cov,
            "llm_calls": calls}


def test_a_finished_run_is_scored_from_its_records(tmp_path: Path) -> None:
    run = _run(tmp_path, "r1", requirements=["Search strategies of LLM agents for academic papers",
                                             "coverage 0.50; answering papers 0"],
               coverage={"R1": 1.0, "R2": 0.5},
               iterations=[_iteration(1, 8, {"R1": 0.5, "R2": 0.5}, {"R1": 3, "R2": 2}),
                           _iteration(2, 0, {"R1": 1.0, "R2": 0.5}, {"R1": 7, "R2": 4})],
               documents={SEARCH_PDF: "d1", GUIDE_PDF: "d2", OTHER_PDF: "d3"},
               sources=[(1, "d1"), (2, "d3"), (3, "d2")], cited="[1] and [2].",  # [3] is listed, not cited
               queued={1: [OTHER_PDF, SEARCH_PDF], 2: [GUIDE_PDF]})
    row = score_run(run, SuiteQuery(query=TWO, answering=(SEARCH_PDF, GUIDE_PDF)), wall_s=61.26)
    assert row["status"] == "finished" and row["answerable"]
    assert row["fidelity"]["not_needs"] == {"R2": "status"}
    assert row["fidelity"]["missing_questions"] == [
        "how should humans evaluate the faithfulness of long-form summaries"]
    assert row["read_first"] == [OTHER_PDF, SEARCH_PDF] and row["answering_read_first"] == 0.5
    assert row["cited"] == [SEARCH_PDF, OTHER_PDF]
    assert (row["cited_recall"], row["cited_precision"], row["cited_not_answering"]) == (0.5, 0.5, 1)
    assert row["mean_coverage"] == 0.75 and row["false_coverage"] is None
    assert row["iterations"] == 2 and row["iterations_nothing_new"] == 1
    assert row["stop_reason"].startswith("reached the maximum")
    assert row["requirement_stops"] == {"R1": "unknown", "R2": "unknown"}  # this run.json does not say
    assert row["llm_calls"] == 7 + 4 + 5  # the Foragers' cumulative counts of the last iteration + the Writer's
    assert row["wall_s"] == 61.3 and row["run_s"] == 42.0


def test_per_requirement_stop_reasons_are_read_when_run_json_has_them(tmp_path: Path) -> None:
    run = _run(tmp_path, "r2", requirements=["Search strategies of LLM agents for academic papers"],
               coverage={"R1": 0.5}, iterations=[_iteration(1, 3, {"R1": 0.5}, {"R1": 2})],
               extra={"settled": {"R1": "an iteration brought it nothing new"}},
               sources=[], queued={1: [SEARCH_PDF]})
    row = score_run(run, SuiteQuery(query=TWO, answering=(SEARCH_PDF,)))
    assert row["requirement_stops"] == {"R1": "an iteration brought it nothing new"}
    assert row["cited"] == [] and row["cited_recall"] == 0.0 and row["cited_precision"] is None


def test_an_unanswerable_query_with_a_confident_requirement_is_false_coverage(tmp_path: Path) -> None:
    q = "What is the half-life of tritium in deep groundwater aquifers?"
    run = _run(tmp_path, "r3", query=q, requirements=["Half-life of tritium in groundwater aquifers"],
               coverage={"R1": 0.75}, iterations=[_iteration(1, 8, {"R1": 0.75}, {"R1": 4})],
               documents={OTHER_PDF: "d3"}, sources=[(1, "d3")], cited="[1]", queued={1: [OTHER_PDF]})
    row = score_run(run, SuiteQuery(query=q, answering=()))
    assert row["false_coverage"] is True and row["answering_read_first"] is None and row["cited_recall"] is None
    assert row["cited_precision"] == 0.0 and row["cited_not_answering"] == 1
    below = _run(tmp_path, "r4", query=q, requirements=["Half-life of tritium in groundwater aquifers"],
                 coverage={"R1": 0.5}, iterations=[_iteration(1, 8, {"R1": 0.5}, {"R1": 4})], sources=[])
    assert score_run(below, SuiteQuery(query=q, answering=()))["false_coverage"] is False


def test_a_plan_only_run_is_scored_on_its_proposal_and_the_first_batch(tmp_path: Path) -> None:
    run = _run(tmp_path, "r5", status="awaiting_approval",
               requirements=["Search strategies of LLM agents for academic papers",
                             "Human evaluation of the faithfulness of long-form summaries"])
    row = score_run(run, SuiteQuery(query=TWO, answering=(SEARCH_PDF, GUIDE_PDF)), wall_s=3.0,
                    first_read=[GUIDE_PDF, OTHER_PDF])
    assert row["fidelity"]["questions_kept"] == 2 and row["fidelity"]["not_needs"] == {}
    assert row["answering_read_first"] == 0.5 and row["cited"] is None and row["cited_recall"] is None
    assert row["iterations"] == 0 and row["llm_calls"] is None and row["requirement_stops"] == {}


def test_totals_over_the_suite(tmp_path: Path) -> None:
    rows = []
    for i, (answering, cov, read, cited) in enumerate([
            ((SEARCH_PDF,), 1.0, [SEARCH_PDF], [(1, "d1")]),
            ((GUIDE_PDF,), 0.5, [OTHER_PDF], [(1, "d3")]),
            ((), 0.75, [OTHER_PDF], [(1, "d3")])]):
        iters = [_iteration(n, 8 if n == 1 else 0, {"R1": cov}, {"R1": 2}) for n in range(1, i + 2)]
        run = _run(tmp_path, f"t{i}", requirements=["Search strategies of LLM agents for academic papers"],
                   coverage={"R1": cov}, iterations=iters, documents={SEARCH_PDF: "d1", OTHER_PDF: "d3"},
                   sources=cited, cited="[1]", queued={1: read})
        rows.append(score_run(run, SuiteQuery(query=TWO, answering=answering), wall_s=10.0 * (i + 1)))
    rows.append({"query": "broken", "answerable": True, "status": "failed", "error": "RuntimeError: x"})
    t = totals(rows)
    assert (t["queries"], t["failed"], t["answerable"], t["unanswerable"]) == (4, 1, 2, 1)
    assert t["answering_read_first"] == 0.5 and t["queries_all_answering_read_first"] == 0.5
    assert t["cited_recall"] == 0.5 and t["queries_answering_cited"] == 0.5
    assert t["cited_precision"] == round(1 / 3, 3)
    assert t["coverage_answerable"] == 0.75 and t["coverage_unanswerable"] == 0.75 and t["false_coverage"] == 1.0
    assert t["median_iterations"] == 2.0 and t["iterations_nothing_new"] == 0 + 1 + 2
    assert t["median_wall_s"] == 20.0 and t["wall_s"] == 60.0
    assert t["questions"] == 6 and t["questions_without_requirement"] == 3  # each kept only the first question
    assert t["status_or_meta_requirements"] == 0 and t["llm_calls"] == 3 * (2 + 5)


def test_the_suite_file(tmp_path: Path) -> None:
    a, b = tmp_path / "pdfs", tmp_path / "more"
    a.mkdir(), b.mkdir()
    (a / "one.pdf").write_bytes(b"%PDF-1.4\n")
    (b / "two.pdf").write_bytes(b"%PDF-1.4\n")
    suite = tmp_path / "s.yaml"
    suite.write_text("library: pdfs\nqueries:\n  - query: How do X work?\n    answering: [one.pdf]\n"
                     "  - query: Why is Y so?\n    answering: []\n")
    loaded = load_run_suite(suite)
    assert loaded.library == (a.resolve(),) and [q.answerable for q in loaded.queries] == [True, False]
    suite.write_text(f"library: [pdfs, {b}]\nqueries:\n  - query: How do X work?\n    answering: [two.pdf]\n")
    assert load_run_suite(suite).library == (a.resolve(), b.resolve())
    for text, says in [
        ("library: pdfs\nqueries:\n  - query: How do X work?\n    answering: [three.pdf]\n", "three.pdf"),
        ("library: pdfs\nqueries:\n  - query: How do X work?\n", "answering"),
        ("library: nowhere\nqueries:\n  - query: How do X work?\n    answering: []\n", "does not exist"),
        ("library: pdfs\nqueries: []\n", "queries"),
        ("- just a list\n", "mapping"),
    ]:
        suite.write_text(text)
        with pytest.raises(ValueError, match=says):
            load_run_suite(suite)
    (b / "one.pdf").write_bytes(b"%PDF-1.4 other\n")
    suite.write_text("library: [pdfs, more]\nqueries:\n  - query: How do X work?\n    answering: []\n")
    with pytest.raises(ValueError, match="two library files are named one.pdf"):
        load_run_suite(suite)


@pytest.mark.parametrize("suite", sorted((Path(__file__).parents[2] / "bench" / "suites").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_shipped_suite_loads_and_names_files_its_library_holds(suite: Path) -> None:
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / "pdfs-extra"
    if not shared.is_dir():
        pytest.skip(f"the shared papers are not here: {shared} (../shared/data beside the repository)")
    loaded = load_run_suite(suite)  # raises for a file its library does not hold
    assert loaded.queries and all(q.query.strip() for q in loaded.queries)


def test_a_quoted_term_must_be_kept() -> None:
    """bench/suites/asks.yaml: 'What does "global analysis" mean …?' planned as "Model spectroscopic measurements"
    holds a third of the question's words, and not the term it asks about."""
    query = 'What does "global analysis" mean when modelling spectroscopic measurements?'
    assert fidelity(query, [("R1", "Model spectroscopic measurements")])["questions_kept"] == 0
    assert fidelity(query, [("R1", "Global analysis of spectroscopic measurements")])["questions_kept"] == 1
