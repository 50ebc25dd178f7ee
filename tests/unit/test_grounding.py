"""Grounding: citations checked per section, one regeneration to repair them or to use more sources."""

from __future__ import annotations

import asyncio

import pytest

from actors.steps.schemas import OverviewDraft, SectionDraft
from actors.steps.write.citations import check_citations
from actors.steps.write.step import WriteStep
from infra.errors import LLMOutputError
from infra.llm.fakes import ScriptedLLM
from messages.write import SectionSources, SourceRef
from tests.leaves import OVERVIEW, R1, R2_DRAFT, draft, leaf_store, request, section, settings


@pytest.fixture(scope="module")
def embedder(minilm):
    return minilm


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    """The three leaf papers (tests/leaves.py), read only."""
    return leaf_store(tmp_path_factory.mktemp("leaves") / "store", embedder)


def write(store, llm, **write_settings):
    step = WriteStep(settings(regenerate_sections=True, **write_settings), store, llm)
    return asyncio.run(step.write(request()))


def test_dangling_citations_are_repaired_by_one_regeneration(store):
    llm = ScriptedLLM({SectionDraft: [
        draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [7]), ("Sun leaves differ", [2])]),
        draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1]), ("Sun leaves differ", [2])]),
        R2_DRAFT, draft("Sugars store energy", [("The Calvin cycle fixes carbon", [1]),
                                                ("ATP and NADPH come from the light reactions", [2])])],
        OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    llm.assert_exhausted()
    retry = [c for c in llm.calls_log if c.schema == "SectionDraft"][1]
    assert "not among the items 1 to 2" in retry.last_user_message
    assert retry.messages[-2]["role"] == "assistant" and "[7]" in retry.messages[-2]["content"]  # its own answer
    r1 = section(report.markdown, R1.text)
    assert "Evidence: Photosystem II splits water [1]." in r1 and "Related: Sun leaves differ [2]." in r1
    assert report.removed_citations == 0 and report.removed_sentences == 0
    assert report.regenerated_sections == 2  # R1 repaired, R2 rested on one of its two sources
    assert report.llm_calls == 5
    assert check_citations(report.markdown, report.sources, report.sections) == []


def test_a_regeneration_that_stays_wrong_has_its_citations_removed_and_counted(store):
    bad = draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1, 9]), ("Sun leaves differ", [2]),
                                                ("An invented claim", [5])])
    llm = ScriptedLLM({SectionDraft: [bad, bad, R2_DRAFT, R2_DRAFT], OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    r1 = section(report.markdown, R1.text)
    assert "Evidence: Photosystem II splits water [1]." in r1 and "invented" not in r1
    assert report.removed_citations == 2 and report.removed_sentences == 1  # [9], [5]; the invented sentence
    assert any("rests on one source" in f for f in report.failed_steps)  # R2 twice with one of its two sources
    assert check_citations(report.markdown, report.sources, report.sections) == []


def test_a_single_source_section_is_regenerated_with_that_instruction(store):
    one = draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1]),
                                                ("It absorbs photons in photosystem II", [1])])
    two = draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1]), ("Sun leaves differ", [2])])
    llm = ScriptedLLM({SectionDraft: [one, two, R2_DRAFT, R2_DRAFT], OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    prompts = [c.last_user_message for c in llm.calls_log if c.schema == "SectionDraft"]
    assert "single source although 2 different documents" in prompts[1]
    r1 = section(report.markdown, R1.text)
    assert "Sun leaves differ [2]" in r1
    # the worse second draft of R2 is no better than the first, so the first is kept and it is said
    assert [f for f in report.failed_steps if "rests on one source" in f] == [
        "section R2: the section rests on one source although its evidence has 2"]


def test_a_failed_regeneration_keeps_the_first_draft_cleaned(store):
    bad = draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1]), ("Sun leaves differ", [2, 8])])
    llm = ScriptedLLM({SectionDraft: [bad, LLMOutputError("no valid SectionDraft"), R2_DRAFT,
                                      LLMOutputError("no valid SectionDraft")], OverviewDraft: [OVERVIEW]})
    report = write(store, llm)
    assert "Related: Sun leaves differ [2]." in section(report.markdown, R1.text)
    assert report.removed_citations == 1
    assert sum("regeneration failed" in f for f in report.failed_steps) == 2
    assert check_citations(report.markdown, report.sources, report.sections) == []


def test_without_regeneration_nothing_is_asked_twice(store):
    bad = draft("Chlorophyll absorbs photons", [("Photosystem II splits water", [1, 9])])
    llm = ScriptedLLM({SectionDraft: [bad, R2_DRAFT], OverviewDraft: [OVERVIEW]})
    report = asyncio.run(WriteStep(settings(), store, llm).write(request()))
    assert report.regenerated_sections == 0 and report.removed_citations == 1 and report.llm_calls == 3


# -- the checker on crafted reports ---------------------------------------------------------------------
SOURCES = [SourceRef(n=i, doc_id=f"d{i}", title=f"Paper {i}") for i in (1, 2, 3)]
SECTIONS = [SectionSources(requirement_id="R1", heading="First requirement", sources=(1, 2)),
            SectionSources(requirement_id="R2", heading="Second requirement", sources=(3,))]


def crafted(r1: str = "Evidence: a finding [1]. Evidence: another [2].", r2: str = "Evidence: a third [3].",
            listed: str = "[1] A (2020) *Paper 1*.\n\n[2] B (2021) *Paper 2*.\n\n[3] C (2022) *Paper 3*.") -> str:
    return (f"# Topic — Report\n\n## Overview\n\nAn overview.\n\n## First requirement\n\nMechanism: how [1].\n\n{r1}\n\n"
            f"## Second requirement\n\n{r2}\n\n## Sources Consulted\n\n{listed}\n")


def test_checker_accepts_a_sound_report():
    assert check_citations(crafted(), SOURCES, SECTIONS) == []


def test_checker_finds_a_dangling_citation():
    assert check_citations(crafted(r2="Evidence: a third [4]."), SOURCES, SECTIONS) == [
        "dangling citation [4]: Evidence: a third [4]."]


def test_checker_finds_a_citation_in_the_wrong_section():
    problems = check_citations(crafted(r2="Evidence: a third [3]. Evidence: borrowed [1]."), SOURCES, SECTIONS)
    assert problems == ["citation [1] names a source without evidence for the section 'Second requirement': "
                        "Evidence: a third [3]. Evidence: borrowed [1]."]
    # without the section map only resolvability is checked
    assert check_citations(crafted(r2="Evidence: a third [3]. Evidence: borrowed [1]."), SOURCES) == []


def test_checker_finds_a_missing_citation_and_a_missing_entry():
    problems = check_citations(crafted(r1="Evidence: a finding. Evidence: another [2].",
                                       listed="[2] B (2021) *Paper 2*.\n\n[3] C (2022) *Paper 3*."), SOURCES, SECTIONS)
    assert problems == ["Evidence sentence without a citation: Evidence: a finding.",
                        "citation [1] has no entry in Sources Consulted"]


def test_checker_finds_duplicated_labels():
    listed = "[1] A (2020) *Paper 1*.\n\n[2] B (2021) *Paper 2*.\n\n[2] B again.\n\n[3] C (2022) *Paper 3*."
    assert check_citations(crafted(listed=listed), SOURCES, SECTIONS) == ["Sources Consulted lists [2] 2 times"]
    twins = [*SOURCES, SourceRef(n=3, doc_id="d4", title="Paper 4")]
    assert check_citations(crafted(), twins, SECTIONS) == ["2 sources share the number [3]"]
