"""WriteStep on a real LanceStore (hand-made documents, real MiniLM vectors) with a scripted LLM."""

from __future__ import annotations

import asyncio
import hashlib
import re

import pytest

from actors.steps.events import RecordingEmit
from actors.steps.schemas import OverviewDraft, SectionDraft
from actors.steps.text import collapse_loop, plausible, trim_cut
from actors.steps.write.citations import check_citations
from actors.steps.write.quotes import RELATED, first_sentence
from actors.steps.write.render import harvard, query_title
from actors.steps.write.step import NO_EVIDENCE, NO_MECHANISM, WriteStep
from infra.errors import LLMOutputError, LLMTimeout
from infra.llm.fakes import FunctionLLM, ScriptedLLM
from messages.forage import Evidence, RequirementCoverage
from messages.plan import Requirement
from messages.status import Stage
from messages.write import SourceRef
from tests.factories import make_doc
from tests.leaves import (
    OVERVIEW, R1, R2, R2_DRAFT, R3, R4, RUN, A, B, C, coverages, draft, ev, leaf_store, request, section,
    settings,
)

@pytest.fixture(scope="module")
def embedder(minilm):
    return minilm


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    """One store for the module: the Writer only reads it."""
    return leaf_store(tmp_path_factory.mktemp("write") / "store", embedder)


def write(store, llm, covs=None, emit=None, settings=None):
    step = WriteStep(settings or globals()["settings"](), store, llm, **({"emit": emit} if emit else {}))
    return asyncio.run(step.write(request(covs)))


def test_report_structure_and_numbering(store):
    emit = RecordingEmit(RUN)
    llm = ScriptedLLM({
        SectionDraft: [
            draft("Chlorophyll absorbs photons that drive water splitting", [
                ("Sun leaves hold more chlorophyll", [2]), ("Photosystem II splits water", [1])], [1]),
            draft("Sugars store the energy of ATP and NADPH", [
                ("The Calvin cycle fixes carbon", [1]), ("ATP and NADPH come from light reactions", [2])]),
        ],
        OverviewDraft: [OVERVIEW],
    })
    report = write(store, llm, emit=emit)
    md = report.markdown
    llm.assert_exhausted()
    assert md.startswith("# Photosynthetic Energy Capture — Report\n")
    headings = re.findall(r"^## (.*)$", md, re.MULTILINE)
    assert headings == ["Overview", "Scope", R1.text, R2.text, R3.text, R4.text, "Sources Consulted"]
    # sources numbered in order of first citation: A (R1 mechanism), B, then C
    a, b, c = A[0].doc_id, B[0].doc_id, C[0].doc_id
    assert [(s.n, s.doc_id) for s in report.sources] == [(1, a), (2, b), (3, c)]
    r1 = section(md, R1.text)
    assert "Mechanism: Chlorophyll absorbs photons that drive water splitting [1]." in r1
    assert "Related: Sun leaves hold more chlorophyll [2]." in r1  # cites only the paper that does not answer
    assert "Evidence: Photosystem II splits water [1]." in r1
    r2 = section(md, R2.text)
    assert "Mechanism: Sugars store the energy of ATP and NADPH." in r2
    assert "Evidence: The Calvin cycle fixes carbon [3]." in r2
    assert "Evidence: ATP and NADPH come from light reactions [1]." in r2
    assert NO_EVIDENCE in section(md, R3.text)
    r4 = section(md, R4.text)
    assert "failed" in r4 and "RuntimeError: forager died" in r4 and "Evidence:" not in r4
    # the overview's made-up citation is gone
    assert "Plants capture light with chlorophyll and store it in sugars." in section(md, "Overview")
    # scope: requirements, documents, iterations and a coverage table
    scope = section(md, "Scope")
    assert "Iterations: 2" in scope and "Requirements: 4" in scope
    assert "- Judge: " in scope and "not calibrated" in scope  # the scripted model's rates were never measured
    assert "3 in the whole store (every run's and library's papers); 3 gave evidence" in scope
    assert f"| R1: {R1.text} | 1.00 (answered) | 2 |" in scope
    assert f"| R3: {R3.text} | 0.00 (not covered) | 0 |" in scope
    assert f"| R4: {R4.text} | failed | 0 |" in scope
    # Harvard-style entries
    sources = section(md, "Sources Consulted")
    assert "[1] Ada Lovelace and Alan Turing (2020) *Light Reactions of Photosynthesis*. a.pdf." in sources
    assert r"[2] Anonymous (n.d.) *Notes on \[Leaf\] \*Energy\**." in sources
    assert "[3] Melvin Calvin (1950) *The Calvin Cycle*. doi:10.1000/calvin." in sources
    # chunks behind each cited source, in evidence.jsonl form
    chunk_ids = {s.n: s.chunk_ids for s in report.sources}
    assert chunk_ids[1] == (A[1][1].chunk_id, A[1][0].chunk_id)
    assert [(c.n, c.chunk_id) for c in report.cited_chunks] == [
        (1, A[1][1].chunk_id), (1, A[1][0].chunk_id), (2, B[1][0].chunk_id), (3, C[1][0].chunk_id)]
    texts = {ch.chunk_id: ch.text for _, chunks in (A, B, C) for ch in chunks}
    for cited in report.cited_chunks:
        text = texts[cited.chunk_id]
        assert cited.sha256 == hashlib.sha256(text.encode()).hexdigest()
        assert cited.quote and cited.quote in text and len(cited.quote) <= 200
    assert report.cited_chunks[0].quote == "Chlorophyll in photosystem II absorbs photons."
    assert report.cited_chunks[0].section_path == "Results > Light capture"
    assert (report.removed_citations, report.removed_sentences) == (0, 0)
    assert report.llm_calls == 3 == llm.calls and report.failed_steps == ()
    assert check_citations(md, report.sources) == []
    assert "section" in emit.kinds(Stage.WRITE) and emit.kinds(Stage.WRITE)[-1] == "written"
    # the model saw the evidence under stable labels, with motive, summary and excerpt
    prompt = llm.calls_log[0].last_user_message
    assert "[1] Light Reactions of Photosynthesis" in prompt and "[2] Notes on [Leaf] *Energy*" in prompt
    assert "Photosystem II absorbs photons and splits water." in prompt
    assert "About Light Reactions of Photosynthesis." in prompt
    assert "<<<EXCERPTS\n## Light capture Chlorophyll in photosystem II" in prompt


def test_invalid_citations_are_removed_and_uncited_sentences_dropped(store):
    llm = ScriptedLLM({
        SectionDraft: [
            draft("Evidence: chlorophyll absorbs photons [7]", [
                ("Photosystem II splits water [5]", [1, 9]),  # [5] inline and 9 are not R1's evidence
                ("Sun leaves hold more chlorophyll", [3]),  # 3 is a source, but not of R1: dropped
                ("A sentence without any source", []),  # dropped
                ("Mechanism: more chlorophyll in sun leaves", [2, 2])]),
            draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])]),
        ],
        OverviewDraft: [OVERVIEW],
    })
    report = write(store, llm)
    md = report.markdown
    r1 = section(md, R1.text)
    assert "Mechanism: chlorophyll absorbs photons." in r1  # its only citation [7] was invalid
    assert "Evidence: Photosystem II splits water [1]." in r1
    assert "Related: more chlorophyll in sun leaves [2]." in r1
    assert "Sun leaves hold more chlorophyll" not in md and "without any source" not in md
    assert report.removed_citations == 4  # [7], [5], 9, 3
    assert report.removed_sentences == 2
    assert check_citations(md, report.sources) == []
    assert not re.search(r"\[(5|7|9)\]", md)


def test_section_without_any_valid_evidence_sentence_quotes_the_evidence(store):
    llm = ScriptedLLM({SectionDraft: [draft("Light drives it", [("Nothing valid", [8])]),
                                      draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])])],
                       OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    r1 = section(report.markdown, R1.text)
    # quoted from the passages: the sentence closest to the requirement (the heading line is not prose)
    assert "Evidence: “Chlorophyll in photosystem II absorbs photons” [1]." in r1
    # the second paper is related, not an answer: its quote says so, and the section says what that means
    assert "Related: “Leaves of sun-exposed plants hold more chlorophyll per area than shade leaves do" in r1
    assert RELATED in r1
    assert report.removed_sentences == 1 and any("R1" in f for f in report.failed_steps)
    assert check_citations(report.markdown, report.sources) == []


def test_llm_failure_gives_a_deterministic_section(store):
    emit = RecordingEmit(RUN)
    llm = ScriptedLLM({SectionDraft: [LLMOutputError("no valid SectionDraft in 3 attempts"),
                                      draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])])],
                       OverviewDraft: [LLMTimeout("no answer in 180 s")]})
    report = write(store, llm, emit=emit)
    md = report.markdown
    r1 = section(md, R1.text)
    # R1 is answered: quoted from its answer alone, the paper only on its topic (B) left out
    assert r1.count("Evidence:") == 1 and "Related:" not in r1
    assert "Evidence: “Chlorophyll in photosystem II absorbs photons” [1]." in r1
    assert "sun-exposed" not in r1  # B is listed last among the sources consulted, cited by no sentence
    assert [s.doc_id for s in report.sources] == [A[0].doc_id, C[0].doc_id, B[0].doc_id]
    assert "Quoted from the evidence" in r1 and "“Related” marks" not in r1
    assert "Mechanism:" not in r1 and "the language model's synthesis failed" in r1
    assert [f.split(":")[0] for f in report.failed_steps] == ["section R1", "overview"]
    # the deterministic overview and title
    assert md.startswith("# How do plants turn sunlight into chemical energy — Report\n")  # query, no '?'
    overview = section(md, "Overview")
    assert "Of its 4 requirements, 2 were answered" in overview and "foraging failed for 1" in overview
    assert check_citations(md, report.sources) == []
    assert "step_failed" in emit.kinds(Stage.WRITE)


def test_the_embedded_model_gets_extractive_sections_without_a_call(store):
    """With the embedded model (or write.extractive) each section quotes its evidence, one sentence per
    document, in evidence order, no repeats; the overview is the deterministic one (the 135M model's overview
    repeated itself in the demo's report): the model is not asked at all."""
    llm = ScriptedLLM({OverviewDraft: [OVERVIEW]})
    report = write(store, llm, settings=settings().updated(llm={"backend": "embedded"}))
    md = report.markdown
    r1, r2 = section(md, R1.text), section(md, R2.text)
    assert "Evidence: “Chlorophyll in photosystem II absorbs photons” [1]." in r1 and "Related:" not in r1
    assert "Evidence: “The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars” [" in r2
    assert "Quoted from the evidence" in r1 and "Mechanism:" not in md
    assert llm.schemas_asked() == [] and report.llm_calls == 0 and report.failed_steps == ()
    assert "Of its 4 requirements, 2 were answered" in section(md, "Overview")
    assert check_citations(md, report.sources) == []


def extractive_report(embedder, path, doc, req: Requirement, evidence: Evidence) -> str:
    """The Markdown report the embedded model's extractive sections give for ``req`` answered by ``evidence``, with
    ``doc`` stored (its chunks embedded) in a LanceDB store under ``path``."""
    from infra.store.lancedb import LanceStore

    store = LanceStore(path / "store", dim=384)
    store.upsert_document(doc[0], doc[1], embedder.embed([c.text for c in doc[1]]))
    covs = (RequirementCoverage(run_id=RUN, requirement=req, iteration=1, coverage=1.0, evidence=(evidence,)),)
    return write(store, ScriptedLLM({OverviewDraft: [OVERVIEW]}), covs,
                 settings=settings().updated(llm={"backend": "embedded"})).markdown


def test_an_extractive_section_quotes_the_finding_not_the_background_around_it(embedder, tmp_path):
    """The sentence sharing the most words with the requirement is often the paper's motivation; a measured
    result that shares fewer is what a researcher needs quoted (actors.steps.text.finding_weight)."""
    from actors.steps.text import finding_weight

    background = ("Understanding the complications of thromboprophylaxis after trauma is essential for the "
                  "clinical care of trauma patients.")
    finding = "Bleeding complications occurred in 12 of 400 patients (3.0%) who received heparin after trauma."
    dvt = make_doc("dvt", "Complications of thromboprophylaxis in trauma", [("Abstract", f"{background} {finding}")])
    req = Requirement(id="R1", text="What complications follow thromboprophylaxis after trauma?")
    markdown = extractive_report(embedder, tmp_path, dvt, req, ev(dvt, "answers", "It reports bleeding rates.", 0))
    r1 = section(markdown, req.text)
    assert "Bleeding complications occurred in 12 of 400 patients (3.0%)" in r1 and "essential" not in r1
    assert "Of its 1 requirement, 1 was answered" in section(markdown, "Overview")
    assert "The findings rest on 1 document, gathered over 2 iterations." in section(markdown, "Overview")
    assert finding_weight(finding) == 3 and finding_weight(background) == -2
    assert finding_weight("The aim of this review is to describe the rates of bleeding.") == -1


def test_an_anchored_requirement_quotes_the_sentence_on_its_own_question(embedder, tmp_path):
    """Seen in `forage demo`: "How is it evaluated? (about: <the query's first question>)" was quoted a sentence
    on heparin's risks, the one holding the most words of the bracketed subject."""
    from actors.steps.plan.requirements import anchored

    risks = "The risks of heparin thromboprophylaxis in trauma patients include bleeding and thrombocytopenia."
    evaluated = "Each study was evaluated with a standard quality score by two reviewers."
    dvt = make_doc("dvt", "A systematic review", [("Abstract", f"{risks} {evaluated}")])
    query = "What are the risks of thromboprophylaxis in trauma patients, and how is it evaluated?"
    req = Requirement(id="R2", text=anchored("How is it evaluated?", query))
    markdown = extractive_report(embedder, tmp_path, dvt, req, ev(dvt, "answers", "It says how studies were rated.", 0))
    r2 = section(markdown, req.text)
    assert "Each study was evaluated with a standard quality score" in r2 and "risks of heparin" not in r2


def test_an_answer_is_quoted_from_the_passage_that_earned_it(embedder, tmp_path):
    """Seen in `forage demo`: an answering document's second passage (an answer the retrieval signals did not
    confirm) held a measured value that outranked every sentence of the confirmed one, and was quoted instead."""
    confirmed = "A systematic review was completed to evaluate the complications."
    unconfirmed = "Complications of filters were evaluated: the failed retrieval rate was 2.8% in 400 patients."
    dvt = make_doc("dvt", "Thromboprophylaxis in trauma", [("Abstract", confirmed), ("Conclusion", unconfirmed)])
    req = Requirement(id="R1", text="How are the complications of thromboprophylaxis in trauma evaluated?")

    def quoted(tag: str) -> str:
        evidence = ev(dvt, tag, "It evaluates complications.", 0, 1)
        return section(extractive_report(embedder, tmp_path / tag, dvt, req, evidence), req.text)

    assert "A systematic review was completed to evaluate the complications" in quoted("answers")
    assert "2.8%" in quoted("interesting")  # no answer earned: the finding of either passage, as before


def test_no_evidence_at_all(store):
    covs = (RequirementCoverage(run_id=RUN, requirement=R3, iteration=1, coverage=0.0),)
    llm = ScriptedLLM({OverviewDraft: [OVERVIEW]})
    report = write(store, llm, covs)
    assert report.sources == () and report.cited_chunks == ()
    assert NO_EVIDENCE in section(report.markdown, R3.text)
    assert "No sources gave evidence in this run." in section(report.markdown, "Sources Consulted")
    assert report.llm_calls == 1 and check_citations(report.markdown, report.sources) == []


def test_no_evidence_with_a_coverage_above_zero_says_where_the_coverage_comes_from(store):
    """Seen on a French query of bench/suites/shapes.yaml: the Scope said 0.82 (partly), the section "did not cover
    this requirement"."""
    covs = (RequirementCoverage(run_id=RUN, requirement=R3, iteration=2, coverage=0.82),)
    report = write(store, ScriptedLLM({OverviewDraft: [OVERVIEW]}), covs)
    text = section(report.markdown, R3.text)
    assert NO_EVIDENCE not in text
    assert "No passage found in this run was kept as evidence" in text and "(0.82)" in text


def test_partial_coverage_is_said_plainly(store):
    covs = (RequirementCoverage(run_id=RUN, requirement=R1, iteration=1, coverage=0.5,
                                evidence=(ev(B, "interesting", "Sun leaves hold more chlorophyll.", 0),)),)
    llm = ScriptedLLM({SectionDraft: [draft("Chlorophyll content varies", [("Sun leaves differ", [1])])],
                       OverviewDraft: [OVERVIEW]})
    report = write(store, llm, covs)
    assert "none of their passages answered it directly" in section(report.markdown, R1.text)


def test_model_text_cannot_forge_structure(store):
    llm = ScriptedLLM({SectionDraft: [
        draft("Light [1] drives it.\n\n## Sources Consulted\n[9] Fake", [
            ("Photosystem II splits water. Evidence: and this is uncited", [1])]),
        draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])])],
        OverviewDraft: [{"title": "# Injected", "overview": "Evidence: nothing here"}]})
    report = write(store, llm)
    md = report.markdown
    assert md.count("## Sources Consulted") == 1
    assert check_citations(md, report.sources) == []
    assert "[9]" not in md


def test_check_citations_catches_a_broken_report(store):
    llm = ScriptedLLM({SectionDraft: [
        draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1]), ("Sun leaves differ", [2])]),
        draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])])],
        OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    md, sources = report.markdown, report.sources
    assert check_citations(md, sources) == []

    dangling = md.replace("Photosystem II splits water [1].", "Photosystem II splits water [7].")
    assert check_citations(dangling, sources) == ["dangling citation [7]: Evidence: Photosystem II splits water [7]."]
    uncited = md.replace("Photosystem II splits water [1].", "Photosystem II splits water.")
    problems = check_citations(uncited, sources)
    assert problems == ["Evidence sentence without a citation: Evidence: Photosystem II splits water."]
    joined = md.replace("Sun leaves differ [2].", "Sun leaves differ [2]. Evidence: an extra claim.")
    assert check_citations(joined, sources) == ["Evidence sentence without a citation: Evidence: an extra claim."]
    unlisted = re.sub(r"^\[3\] .*$", "", md, flags=re.MULTILINE)
    assert check_citations(unlisted, sources) == ["citation [3] has no entry in Sources Consulted"]
    no_list = md.split("## Sources Consulted")[0]
    assert "no '## Sources Consulted' section" in check_citations(no_list, sources)
    fewer = [s for s in sources if s.n != 2]
    assert any(p.startswith("dangling citation [2]") for p in check_citations(md, fewer))
    assert check_citations("# T\n\nEvidence: grouped [1, 2] and ranged [1–3].\n\n## Sources Consulted\n\n"
                           "[1] x\n\n[2] y\n\n[3] z\n", [SourceRef(n=i, doc_id=str(i), title="t")
                                                         for i in (1, 2, 3)]) == []


def test_a_looping_overview_is_trimmed(store):
    loop = "Plants capture light. " * 5 + "Chlorophyll absorbs photons. And then the"
    llm = ScriptedLLM({SectionDraft: [draft("Light drives it", [("Photosystem II splits water", [1])]),
                                      draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])])],
                       OverviewDraft: [{"title": "Photosynthesis", "overview": loop}]})
    report = write(store, llm)
    assert section(report.markdown, "Overview").strip() == "Plants capture light. Chlorophyll absorbs photons."


def test_helpers():
    text = "## Heading\nFirst sentence here is long enough. Second one."
    assert first_sentence(text) == "First sentence here is long enough."
    long = "word " * 80
    quote = first_sentence(long)
    assert len(quote) <= 200 and quote in long
    ref = SourceRef(n=4, doc_id="d", title="A Study.", authors=tuple(f"Author {i}" for i in range(8)), year=None)
    assert harvard(ref) == ("[4] Author 0, Author 1, Author 2, Author 3, Author 4, Author 5 et al. (n.d.) "
                            "*A Study*.")


# -- a weak model's garbage (SmolLM2-135M) -----------------------------------------------------------------
TIMESTAMP = "2022-01-01T00:00:00Z"
SOUP = "2022-01-01T00:00:00.000000" + "-00:00:00" * 40
LOOP = ("The document provides a comprehensive review of the topic's topic, and "
        + "the document provides a summary of the topic's topic, and " * 5).strip()
FIRST = "Photosystem II absorbs photons and splits water in the light reactions."
LONG = ("Bleeding-edge measurements in sun leaves showed that chlorophyll content per area, the ratio of "
        "chlorophyll a to b, the density of reaction centres, the turnover of the D1 protein, the size of "
        "the antenna complexes and the efficiency of non-photochemical quenching all changed with the light "
        "climate of the canopy, especially in young leaves measured at noon during midsummer under clear skies "
        "and hemosiderin")


def test_plausible_sentences():
    assert plausible("Light drives water splitting")
    assert plausible("ATP yield rose by 35% (p < 0.05) in 12 of 20 trials")
    for garbage in (TIMESTAMP, SOUP, "Nothing valid", "", "12.5 % (n = 40) [1, 2]", "a b c d e f g",
                    "Unterminated string starting at (character 332)"):
        assert not plausible(garbage), garbage


def test_repetition_loops_are_collapsed():
    assert collapse_loop(LOOP) == ""  # mostly loop
    head = "Heparin lowered the rate of venous thrombosis after major injury in the pooled trials, and"
    tail = " it prevents clots in trauma patients" * 3
    assert collapse_loop(head + tail) == head + " it prevents clots in trauma patients…"  # first occurrence kept
    plain = "Sun leaves hold more chlorophyll than shade leaves, and shade leaves hold more carotenoids"
    assert collapse_loop(plain) == plain  # a phrase twice is no loop


def test_cut_text_is_trimmed_to_whole_sentences_or_words():
    assert trim_cut("Plants use light. Chlorophyll absorbs photo") == "Plants use light."
    assert trim_cut("Chlorophyll absorbs photons and splits wat") == "Chlorophyll absorbs photons and splits…"
    assert trim_cut("Chlorophyll absorbs photons.") == "Chlorophyll absorbs photons."
    assert query_title("How do plants turn sunlight into chemical energy?") == (
        "How do plants turn sunlight into chemical energy")
    assert query_title("Why are some leaves red in autumn and others yellow or brown?") == (
        "Why are some leaves red in autumn and…")
    # what a query of bench/suites/shapes.yaml asks, not its list marker, lead-in or the researcher's context
    assert query_title("1) How are links resolved? 2) How is layout represented?") == "How are links resolved"
    assert query_title("I need:\n- an R package for spectroscopy\n- evidence on dark matter") == (
        "An R package for spectroscopy")
    assert query_title("My idea is a writing tool. I have told no one. Before I build it: what do writers need?") == (
        "What do writers need")
    assert query_title("Project: cheaper linacs\nQuestion: how was the cavity tuner tested?") == (
        "How was the cavity tuner tested")  # bench/suites/asks.yaml: the "Question:" field, not the project
    assert query_title("Make a table of the models compared with TableFormer on SQA.") == (
        "The models compared with TableFormer on SQA")  # the content asked for, not the form
    assert query_title("Chemists distrust black-box models (Wellawatte et al. argue); which methods explain molecular "
                       "models?") == "Which methods explain molecular models"  # the question, not the claim before it
    assert query_title("Inhibitors of ACE; how do they work?") == "Inhibitors of ACE; how do they work"  # a topic
    from actors.steps.write.render import query_topic

    assert query_topic("I need:\n- an R package\n- evidence on dark matter", 300) == (
        "I need: - an R package - evidence on dark matter")  # the Scope's query: every line, not "I need:" alone



def test_implausible_mechanism_and_evidence_are_replaced_or_dropped(store):
    llm = ScriptedLLM({SectionDraft: [
        draft(TIMESTAMP, [(TIMESTAMP, [1]), (SOUP, [2]), (LOOP, [1]), ("Sun leaves hold more chlorophyll", [2])],
              [1]),
        draft(SOUP, [("The Calvin cycle fixes carbon", [1])])],
        OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    md = report.markdown
    r1, r2 = section(md, R1.text), section(md, R2.text)
    assert f"Mechanism: {NO_MECHANISM}." in r1 and f"Mechanism: {NO_MECHANISM}." in r2
    # the mechanism's citation went with it, so B (related, not an answer) is the first source cited
    assert r1.count("Evidence:") == 0 and "Related: Sun leaves hold more chlorophyll [1]." in r1
    assert "2022" not in md and "topic's topic" not in md
    assert report.removed_sentences == 3
    assert check_citations(md, report.sources) == []


def test_only_implausible_evidence_falls_back_to_the_quoted_evidence(store):
    llm = ScriptedLLM({SectionDraft: [draft("Light drives water splitting", [(TIMESTAMP, [1]), (LOOP, [2])]),
                                      R2_DRAFT],
                       OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    r1 = section(report.markdown, R1.text)
    assert "Evidence: “Chlorophyll in photosystem II absorbs photons” [1]." in r1
    assert "Related: “Leaves of sun-exposed plants hold more chlorophyll" in r1
    assert report.removed_sentences == 2
    assert any(f.startswith("section R1: no Evidence sentence") for f in report.failed_steps)


def test_sentences_cut_at_the_length_limit_end_on_a_whole_word(store):
    cut_two = (FIRST + " " + LONG)[:400]
    cut_one = LONG[:400]
    assert cut_one[-1].isalpha() and LONG[400].isalpha()  # the limit falls inside a word
    llm = ScriptedLLM({SectionDraft: [draft(cut_two, [(cut_one, [2])], [1]), R2_DRAFT],
                       OverviewDraft: [OVERVIEW]})
    r1 = section(write(store, llm).markdown, R1.text)
    assert f"Mechanism: {FIRST[:-1]} [1]." in r1
    assert "Related: Bleeding-edge measurements" in r1
    assert "under clear skies and… [2]." in r1 and "hemos" not in r1


def test_a_looping_or_implausible_overview_is_written_deterministically(store):
    for overview in (f"{TIMESTAMP}. {SOUP}", LOOP):
        llm = ScriptedLLM({SectionDraft: [draft("Light drives water splitting", [("Photosystem II splits water",
                                                                                   [1])]), R2_DRAFT],
                           OverviewDraft: [{"title": "Photosynthetic Energy Capture", "overview": overview}]})
        report = write(store, llm)
        assert "This report addresses the research query" in section(report.markdown, "Overview")
        assert [f.split(":")[0] for f in report.failed_steps] == ["overview"]
        assert report.markdown.startswith("# Photosynthetic Energy Capture — Report\n")


def test_an_off_topic_title_is_replaced_by_one_from_the_query(store):
    def model(messages, schema):
        if schema is SectionDraft:
            return draft("Light drives water splitting", [("Photosystem II splits water", [1])])
        return {"title": "FINISHED PROCESS", "overview": "Plants capture light with chlorophyll."}

    report = write(store, FunctionLLM(model))
    assert report.markdown.startswith("# How do plants turn sunlight into chemical energy — Report\n")
    assert len(report.failed_steps) == 1 and "'FINISHED PROCESS' shares no word" in report.failed_steps[0]
    assert "Plants capture light with chlorophyll." in section(report.markdown, "Overview")


def test_a_title_sharing_a_word_with_a_requirement_is_kept(store):
    llm = ScriptedLLM({SectionDraft: [draft("Light drives water splitting", [("Photosystem II splits water", [1])]),
                                      R2_DRAFT],
                       OverviewDraft: [{"title": "Chlorophyll and Sugars", "overview": OVERVIEW.overview}]})
    report = write(store, llm)
    assert report.markdown.startswith("# Chlorophyll and Sugars — Report\n") and report.failed_steps == ()


def test_listed_evidence_tidies_the_foragers_motives() -> None:
    """The deterministic fallback lists Forager motives, which are model text: loops and cut words go."""
    from actors.steps.write.quotes import Quoter, Source
    from messages import Evidence

    loop = ("The document provides a summary of the topic's topic, and the document provides a summary of the "
            "topic's topic, and the document provides a summary of the topic's topic, and the document provides")
    from actors.steps.schemas import MOTIVE_CHARS

    cut = ("The use of heparin is a common treatment. The use of heparin is a risk factor for bleeding and "
           "hemostasis problems " * 4)[:MOTIVE_CHARS]  # cut by the schema's maxLength in the middle of a word
    assert cut[-1].isalpha() and cut[-2].isalpha()
    items = [(Evidence(doc_id="d1", title="Doc one", tag="answers", motive=m, chunk_ids=("c:1",)),
              Source("d1", "Doc one")) for m in (loop, cut, "2022-01-01T00:00:00Z")]
    texts = [s.text for s in Quoter.listed(items, 0)]
    assert "topic's topic, and the document provides a summary of the topic's topic, and" not in texts[0]
    assert not texts[1].endswith(cut[-6:]) and texts[1].startswith("The use of heparin is a common treatment")
    assert texts[2] == "Doc one has passages that answer this requirement"


def test_quotes_leave_out_figure_text_superscripts_and_tags():
    """Seen on the held-out query: the sepsis paper's figure text ("<!-- Start of picture text --> : Lab 1<br>: Lab
    2 …") was quoted as the answer, and a perspective's citation superscripts ("discovery.<sup>120</sup>")."""
    from actors.steps.text import prose_sentences, without_markup

    passage = ("<!-- Start of picture text --> : Lab 1<br>: Lab 2<br>: Baseline<br>Deep Recurrent Neural Network"
               "<br>RNN params<br><!-- End of picture text --> Figure 2: Schematic for the overall method.\n"
               "The passive diffusion of drugs to the brain is critical in drug discovery.<sup>120</sup> A recurrent "
               "network<br>predicts sepsis hours before onset in 72% of encounters.")
    assert without_markup("a<br/>b <i>c</i> <!-- note -->d") == "a b  c   d"
    assert prose_sentences(passage) == [
        "Figure 2: Schematic for the overall method.",
        "The passive diffusion of drugs to the brain is critical in drug discovery.",
        "A recurrent network predicts sepsis hours before onset in 72% of encounters."]
    assert prose_sentences("Plants use 5 < 7 of their leaves and x > y in the model we fit here.") == [
        "Plants use 5 < 7 of their leaves and x > y in the model we fit here."]  # comparisons are not tags


def test_a_full_stop_inside_a_quotation_does_not_end_the_sentence_around_it():
    """Seen in bench/suites/deep.yaml: the video-game paper's 'Quote such as “Violent video games are just one risk
    factor. They're not the biggest, …,” (Gentile, …) appear to be …' was quoted as 'Quote such as “Violent video
    games are just one risk factor'."""
    from actors.steps.text import QUOTATION_CHARS, prose_sentences

    passage = ("Aggressive game exposure does not appear to be one of the risk factors. Quote such as “Violent video "
               "games are just one risk factor. They’re not the biggest, and they’re not the smallest.” (Gentile, "
               "2014) appear to be unsupported. The effect sizes were small.")
    assert prose_sentences(passage) == [
        "Aggressive game exposure does not appear to be one of the risk factors.",
        "Quote such as “Violent video games are just one risk factor. They’re not the biggest, and they’re not the "
        "smallest.” (Gentile, 2014) appear to be unsupported.", "The effect sizes were small."]
    assert "Quote such as “Violent video games are just one risk factor." in prose_sentences(passage, as_before=True)
    # straight quotes too; a quotation whose closing mark was lost stops running on at QUOTATION_CHARS
    assert prose_sentences('He said "it works. It scales" in his talk. Then we tested the method again.') == [
        'He said "it works. It scales" in his talk.', "Then we tested the method again."]
    # a part that starts with a lower-case word is no sentence (seen: the literature graph paper's "a node a �!"
    # and "p for each author of that paper.", an arrow read as "!"); "mRNA …" starts one
    glyph = ("We instantiate an authorship edge between an author node and a paper node a \ufffd! p for each author of "
             "that paper. mRNA levels rose in the treated cells. The edges are typed.")
    assert prose_sentences(glyph) == [
        "We instantiate an authorship edge between an author node and a paper node a \ufffd! p for each author of "
        "that paper.", "mRNA levels rose in the treated cells.", "The edges are typed."]
    lost = "They wrote “the cells grew well. " + "We measured the growth of the cells again. " * 30
    assert all(len(s) < QUOTATION_CHARS for s in prose_sentences(lost))


def test_a_table_is_not_prose_and_a_caption_ends_at_its_paragraph():
    """Seen in bench/suites/deep.yaml: the probation paper's Table 1 caption, without a full stop, ran into the
    table's header row, and the two were quoted as the answer."""
    from actors.steps.text import prose_sentences

    passage = ("The crude mortality rate of persons on probation was 2.87 times higher than among persons in jail. "
               "\n\nTable 1. Number of persons, number of deaths, and crude mortality rate among persons on probation, "
               "2001-2012<sup>a</sup> \n\n|Population|Mean<br>Deaths<br>per Year|Crude Mortality Rate (95% CI)|\n"
               "|---|---|---|\n|Probation|4,000|390 (380-400)|\n\nThe rates were standardized by age.")
    assert prose_sentences(passage) == [
        "The crude mortality rate of persons on probation was 2.87 times higher than among persons in jail.",
        "Number of persons, number of deaths, and crude mortality rate among persons on probation, 2001-2012",
        "The rates were standardized by age."]
    # a sentence running over a paragraph break stays one; a caption that states a finding can still be quoted
    assert prose_sentences("The model was trained on\n\nthree corpora of news text. **Figure 6.** We handle "
                           "type-unstable loops by allowing traces to compile.") == [
        "The model was trained on three corpora of news text.",
        "We handle type-unstable loops by allowing traces to compile."]


def test_a_footnote_is_not_quoted_nor_run_into_the_sentence_after_it():
    """Seen in bench/suites/shapes.yaml's first run: S2ORC's footnotes ("> 17https://www.ncbi…", set as block quotes
    by the parser) ran into the next sentence, which the report quoted with the URLs in front; PaperMage's footnote
    "5PDFs are not the only way …" was quoted as the answer."""
    from actors.steps.text import prose_sentences
    from actors.steps.write.quotes import states_something

    passage = ("We introduce S2ORC, the largest corpus of academic papers. \n\n> 17https://www.ncbi.nlm.nih.gov/pmc/ "
               "tools/openftlist/ \n\n> 5PDFs are not the only way of representing documents.\n\nS2ORC consists of "
               "81.1M papers and 380.5M resolved citation links.")
    assert prose_sentences(passage) == ["We introduce S2ORC, the largest corpus of academic papers.",
                                        "S2ORC consists of 81.1M papers and 380.5M resolved citation links."]
    assert len(prose_sentences(passage, as_before=True)) == 3  # what a report written before may have quoted
    assert not states_something("See 17https://www.ncbi.nlm.nih.gov/pmc/ for the journals we used in the corpus")
    # a question states nothing (seen: a French paper's English title quoted for the waterway query)
    assert not states_something("_The issue of effective learning of waterway transport: Which lessons for public "
                                "action?_")
    # nor a byline, a title or a reference entry (seen: the TIMP paper's byline quoted for the shapes suite)
    assert not states_something("Katharine M. Mullen Ivo H. M. van Stokkum Vrije Universiteit Amsterdam Vrije "
                                "Universiteit Amsterdam")
    assert not states_something("CiteSee: Augmenting Citations in Scientific Papers with Persistent and Personalized "
                                "Historical Context.")
    assert states_something("BERT and GPT-3 outperform ELMo on GLUE by a wide margin in our tests.")
    # nor a sentence with glyphs the text layer could not map (a 1996 AIP paper's parentheses)
    assert not states_something("The mean yield of avalanche electrons in a \ufffdMCP\ufffd channel equals 1.37 at 760 V")
    # nor a figure's legend (bench/suites/deep.yaml quoted the glucokinase paper's "The black dotted lines show …")
    for legend in ("The black dotted lines show the thresholds for variants associated with GCK-MODY (AUC = 0.88)",
                   "Black dots represent 69 records of occurrence for An. nili in the forest block",
                   "The green and red bars show descriptors that influence predictions positively and negatively"):
        assert not states_something(legend), legend
    # nor a caption (bench/suites/asks.yaml quoted TableFormer's "Table 5: ALL questions' cell selection accuracy …")
    assert not states_something("Table 5: ALL questions' cell selection accuracy of TABLEFORMER variants on SQA")
    assert not states_something("Fig. 2. Coverage per requirement per iteration for every query we ran")
    assert not states_something("Table II: A comparison of speed and accuracy for the implementations of many methods")
    assert states_something("Table salt intake rose by 12% in the cohort we followed for ten years")
    assert states_something("Red blood cells are lost faster in trauma patients given heparin than in others")
    assert states_something("Green areas are associated with lower mortality in the cities we studied")


def test_a_passage_that_starts_inside_a_sentence_does_not_quote_its_tail():
    """Seen in bench/suites/shapes.yaml's first run: the dark-matter requirement was answered with "the Cosmic
    Microwave Background (CMB) spectrum", the tail of a sentence cut where the passage's token window began."""
    from actors.steps.text import prose_sentences

    cut = ("the Cosmic Microwave Background (CMB) spectrum. In [11] the spectrum is modified by an interaction with "
           "baryons.")
    assert prose_sentences(cut) == ["In [11] the spectrum is modified by an interaction with baryons."]
    assert prose_sentences(cut, as_before=True)[0] == "the Cosmic Microwave Background (CMB) spectrum."
    for whole in ("mRNA vaccines raised antibody titres in most of the children.",
                  "p53 mutations were found in most of the tumours we sequenced."):
        assert prose_sentences(whole) == [whole]


def test_a_related_quote_needs_its_citation_too():
    sources = [SourceRef(n=1, doc_id="d1", title="One")]
    md = ("## R\n\nEvidence: “It works” [1].\n\nRelated: “Another topic entirely”.\n\n## Sources Consulted\n\n"
          "[1] A (2020) *One*.\n")
    assert check_citations(md, sources) == ["Evidence sentence without a citation: Related: “Another topic entirely”."]


def test_sentences_are_not_cut_after_an_abbreviation():
    from actors.steps.text import sentences

    text = ("Chambers et. al (9) pioneered the idea. Smith et al. found it too, e.g. in Fig. 2 and Eq. 3. J. Doe "
            "agreed! Was it vitamin D? Yes.")
    assert sentences(text) == ["Chambers et. al (9) pioneered the idea.",
                               "Smith et al. found it too, e.g. in Fig. 2 and Eq. 3.", "J. Doe agreed!",
                               "Was it vitamin D?", "Yes."]


def test_a_section_whose_answers_were_not_confirmed_says_so_rather_than_that_none_answered(store):
    """Seen on the held-out query: TraceMonkey's passages were called answers to "How do tracing JIT compilers
    specialize types?" 17 times and confirmed none; the section said "none of their passages answered it
    directly"."""
    covs = (RequirementCoverage(run_id=RUN, requirement=R1, iteration=2, coverage=0.5, unconfirmed=17, evidence=(
                ev(A, "interesting", "Photosystem II absorbs photons.", 1),)),
            RequirementCoverage(run_id=RUN, requirement=R2, iteration=2, coverage=0.5, evidence=(
                ev(C, "interesting", "The Calvin cycle fixes carbon.", 0),)))
    report = write(store, ScriptedLLM({OverviewDraft: [OVERVIEW]}), covs, settings=settings(extractive=True))
    r1, r2 = section(report.markdown, R1.text), section(report.markdown, R2.text)
    assert "No answer to this requirement was confirmed: the model called 17 passage(s) answers" in r1
    assert "none of their passages answered it directly" not in r1
    assert "Only related documents were found for this requirement" in r2  # no answer was even proposed


def test_a_requirement_answered_by_its_coverage_without_a_confirmed_passage_says_an_answer_is_likely(store):
    """Seen on a question over pdfs-extra ("How do survey biases affect its estimate?"): the Scope said 0.89
    (answered) — the passages shown make an answer likely — and the section said "No answer to this requirement was
    confirmed". At or above the run's goal the section says the answer is likely and that no single passage was
    confirmed; below it, as before."""
    goal = settings(extractive=True).run.min_coverage
    covs = (RequirementCoverage(run_id=RUN, requirement=R1, iteration=1, coverage=0.89, unconfirmed=10, evidence=(
                ev(A, "interesting", "Photosystem II absorbs photons.", 1),)),
            RequirementCoverage(run_id=RUN, requirement=R2, iteration=1, coverage=0.9, evidence=(
                ev(C, "interesting", "The Calvin cycle fixes carbon.", 0),)))
    assert goal <= 0.89
    report = write(store, ScriptedLLM({OverviewDraft: [OVERVIEW]}), covs, settings=settings(extractive=True))
    r1, r2 = section(report.markdown, R1.text), section(report.markdown, R2.text)
    assert "make it likely that the literature answers this requirement (coverage 0.89)" in r1
    assert "no single passage was confirmed as the answer: the model called 10 passage(s) answers" in r1
    assert "No answer to this requirement was confirmed" not in r1
    assert "(coverage 0.90), but no single passage was confirmed as the answer. Read the quotes" in r2
    assert "Only related documents were found" not in r2


def test_a_quoted_section_leaves_out_papers_only_on_the_topic_once_its_requirement_is_answered(store):
    """Seen on the OpenIE query of the run suite: beside the confirmed answer, the quoted section cited two papers
    the judge had called interesting ("Due to space constraints, we opted not to discuss our relation extraction
    models …"). A requirement with no confirmed answer still quotes what is related, marked so."""
    answered = RequirementCoverage(run_id=RUN, requirement=R1, iteration=2, coverage=1.0, evidence=(
        ev(B, "interesting", "Sun leaves hold more chlorophyll.", 0),
        ev(A, "answers", "Photosystem II absorbs photons and splits water.", 1)))
    partly = RequirementCoverage(run_id=RUN, requirement=R2, iteration=2, coverage=0.5, evidence=(
        ev(B, "interesting", "Sun leaves hold more chlorophyll.", 0),))
    report = write(store, ScriptedLLM({OverviewDraft: [OVERVIEW]}), (answered, partly),
                   settings=settings(extractive=True))
    r1, r2 = section(report.markdown, R1.text), section(report.markdown, R2.text)
    assert "Evidence: “Chlorophyll in photosystem II absorbs photons” [1]." in r1 and "Related:" not in r1
    assert "Related: “Leaves of sun-exposed plants hold more chlorophyll" in r2 and "“Related” marks" in r2
    assert [s.doc_id for s in report.sources] == [A[0].doc_id, B[0].doc_id]
    assert check_citations(report.markdown, report.sources) == []


def test_the_section_prompt_shows_a_passages_prose_without_figure_text(embedder, tmp_path):
    from infra.store.lancedb import LanceStore

    text = ("<!-- Start of picture text --> : Lab 1<br>: Baseline<br><!-- End of picture text --> The recurrent "
            "network predicted sepsis 4 hours early.<sup>12</sup>")
    doc = make_doc("sepsis", "Early sepsis prediction", [("Results", text)])
    store = LanceStore(tmp_path / "store", dim=384)
    store.upsert_document(doc[0], doc[1], embedder.embed([c.text for c in doc[1]]))
    req = Requirement(id="R1", text="How are recurrent networks used to predict sepsis early?")
    covs = (RequirementCoverage(run_id=RUN, requirement=req, iteration=1, coverage=1.0,
                                evidence=(ev(doc, "answers", "It predicts sepsis early.", 0),)),)
    llm = ScriptedLLM({SectionDraft: [draft("Networks read vitals", [("It predicted sepsis early", [1])])],
                       OverviewDraft: [OVERVIEW]})
    write(store, llm, covs)
    prompt = llm.calls_log[0].last_user_message
    assert "The recurrent network predicted sepsis 4 hours early." in prompt
    assert "picture text" not in prompt and "Lab 1" not in prompt and "<sup>" not in prompt


def test_a_bold_caption_ends_its_own_sentence():
    """Seen in `forage ask` on TraceMonkey: "Linked Closed Linked (c) **Figure 6.** We handle type-unstable loops …"
    was quoted as one sentence."""
    from actors.steps.text import prose_sentences

    assert prose_sentences("Linked Closed Linked (c) **Figure 6.** We handle type-unstable loops by allowing traces "
                           "to compile.") == ["Linked Closed Linked (c) Figure 6.",
                                              "We handle type-unstable loops by allowing traces to compile."]


def test_a_model_sentence_citing_only_a_related_paper_is_marked_related(store):
    llm = ScriptedLLM({SectionDraft: [draft("Light drives water splitting", [
                           ("Photosystem II splits water and sun leaves hold more of it", [1, 2]),
                           ("Sun leaves hold more chlorophyll", [2])], [1]), R2_DRAFT],
                       OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    r1 = section(report.markdown, R1.text)
    assert "Evidence: Photosystem II splits water and sun leaves hold more of it [1][2]." in r1  # an answer cited too
    assert "Related: Sun leaves hold more chlorophyll [2]." in r1
    assert RELATED in r1
    r2 = section(report.markdown, R2.text)  # both of R2's papers answer: nothing is Related there
    assert "Related:" not in r2 and "“Related”" not in r2
    assert check_citations(report.markdown, report.sources) == []


# -- what the report quotes, and evidence.jsonl (issue 45) ---------------------------------------------------------
def test_evidence_jsonl_lists_exactly_the_chunks_the_report_cites(store):
    """A cited paper's other chunks (evidence for another requirement that no sentence cites, an uncited source's)
    are not listed: evidence.jsonl is the cited set."""
    r2 = R2.model_copy(update={"added_after": 1})  # a re-planned requirement: marked in the Scope
    covs = (coverages()[0], coverages()[1].model_copy(update={"requirement": r2}))
    llm = ScriptedLLM({SectionDraft: [draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1])]),
                                      draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1])])],
                       OverviewDraft: [OVERVIEW]})
    report = write(store, llm, covs)
    a, _b, c = (doc[1] for doc in (A, B, C))
    # R1's item 1 is A with its chunk 1; R2's item 1 is C with chunk 0; A's chunk 0 (R2's item 2) and B are uncited
    assert [(x.n, x.chunk_id) for x in report.cited_chunks] == [(1, a[1].chunk_id), (2, c[0].chunk_id)]
    cited = {n for x in re.findall(r"\[(\d+)\]", report.markdown.split("## Sources Consulted")[0]) for n in [int(x)]}
    assert {x.n for x in report.cited_chunks} == cited
    scope = section(report.markdown, "Scope")
    assert "- Requirements: 2 (1 added by re-planning during the run)" in scope
    assert f"| R2: {R2.text} (added after iteration 1) |" in scope


def test_a_quote_states_a_finding_from_the_passage_that_earned_it(embedder, tmp_path):
    """Seen in a new user's run: evidence.jsonl and the quotes held a "Competing interests" chunk, a title header and
    pseudo-code lines. The answering passage's finding is quoted; back matter and code are not."""
    from infra.store.lancedb import LanceStore

    interests = "The authors declare that they have no competing interests regarding the search agent."
    finding = "The search agent retrieved 74% of the relevant papers, more than keyword search over the same index."
    code = "for q in queries do results ← search(q) end for return results of the search agent"
    doc = make_doc("agent", "An LLM agent for paper search", [
        ("Competing interests", interests), ("Results", f"{code}. {finding}")])
    req = Requirement(id="R1", text="How well does an LLM search agent find relevant papers?")
    store = LanceStore(tmp_path / "store", dim=384)
    store.upsert_document(doc[0], doc[1], embedder.embed([c.text for c in doc[1]]))
    covs = (RequirementCoverage(run_id=RUN, requirement=req, iteration=1, coverage=1.0,
                                evidence=(ev(doc, "answers", "It measures recall.", 0, 1),)),)
    report = write(store, ScriptedLLM({OverviewDraft: [OVERVIEW]}), covs,
                   settings=settings().updated(llm={"backend": "embedded"}))
    r1 = section(report.markdown, req.text)
    assert "74% of the relevant papers" in r1 and "competing" not in r1 and "←" not in r1
    assert [x.chunk_id for x in report.cited_chunks] == [doc[1][1].chunk_id]  # the quoted chunk, only it


def test_what_a_quote_may_be():
    from actors.steps.write.quotes import back_matter, states_something

    assert back_matter("Declarations > Competing interests") and back_matter("Acknowledgements")
    assert back_matter("References") and not back_matter("Results > Interest rates")
    assert states_something("Recall rose from 0.41 to 0.74 when the agent expanded queries with citations.")
    for no in ("The authors declare no competing interests.",
               "Smith J, Doe A (2020). Paper search with agents. J Inf Sci, 12(3): 45-67.",
               "end for return x := y ← z",
               "1 Introduction",
               "This work was funded by grant no. 12345 of the national science foundation."):
        assert not states_something(no), no


def test_a_coverage_short_of_the_goal_never_prints_as_the_goal():
    """bench/suites/asks.yaml's report showed "R1: What is a phytojuvenoid? | 0.85 (partly)": 0.849 rounded up beside
    the word its true value earns. Two decimals are cut, not rounded."""
    from actors.steps.write.render import coverage_word, shown

    assert f"{shown(0.8499):.2f} ({coverage_word(0.8499, 0.85)})" == "0.84 (partly)"
    assert f"{shown(0.85):.2f} ({coverage_word(0.85, 0.85)})" == "0.85 (answered)"
    assert f"{shown(0.29):.2f}" == "0.29" and f"{shown(1.0):.2f}" == "1.00"  # no float artefact cuts a cent
