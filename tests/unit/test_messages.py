"""Every message round-trips through JSON and through Ray's object store, and rejects bad input."""

from __future__ import annotations

import inspect

import pydantic
import pytest

import messages
from messages import (
    Candidate, ChunkJudgement, CitedChunk, Evidence, ForageRequest, IngestRequest, IngestResult, Message,
    PlanRequest, Report, Requirement, RequirementCoverage, RequirementsPlan, ResearchQuery, RunSummary,
    SearchQuery, SearchRequest, SearchResults, Skipped, SourceRef, Stage, StatusEvent, WriteRequest,
)

RUN = "20261122-000000-0123456789abcdef"
REQ = Requirement(id="R1", text="Complication rates of pharmacological DVT prophylaxis in trauma patients")
QUERY = ResearchQuery(run_id=RUN, text="What are the risks of DVT prophylaxis after trauma?")
COVERAGE = RequirementCoverage(
    run_id=RUN, requirement=REQ, iteration=2, coverage=0.5, llm_calls=7,
    evidence=(Evidence(doc_id="d" * 64, title="A review", tag="interesting", motive="reports bleeding rates",
                       summary="Systematic review.", chunk_ids=("dddddddddddddddd:00003",)),),
    judgements=(ChunkJudgement(chunk_id="dddddddddddddddd:00003", doc_id="d" * 64, tag="interesting",
                               motive="bleeding"),),
    failed_steps=("classify dddddddddddddddd:00004: LLMOutputError",))
CANDIDATE = Candidate(key="file:/tmp/a.pdf", path="/tmp/a.pdf", title="a")
ONLINE = Candidate(key="doi:10.1/x", source="openalex", doi="10.1/x", openalex_id="W1", arxiv_id="2101.00001",
                   abstract="We study soil.", pdf_urls=("https://a.org/x.pdf",), found_by="soil moisture", score=4,
                   score_reason="on topic", abstract_only=True, download_failures=("https://a.org/x.pdf: 403",))
SEARCH = SearchQuery(text="soil moisture sensing", year_from=2020, open_access=True, requirement_ids=("R1",))

EXAMPLES: list[Message] = [
    QUERY,
    PlanRequest(run_id=RUN, query=QUERY),
    RequirementsPlan(run_id=RUN, query=QUERY, requirements=(REQ,), approved=True, degraded=("fallback",),
                     search_queries=(SEARCH,)),
    SearchRequest(run_id=RUN, iteration=1, query=QUERY.text, requirements=(REQ,), exclude_keys=("file:/x",),
                  search_queries=(SEARCH,), accepted_ids=("W1",)),
    SearchResults(run_id=RUN, iteration=1, candidates=(CANDIDATE, ONLINE),
                  skipped=(Skipped(item="/tmp/b.pdf", reason="unreadable"),), exhausted=True),
    IngestRequest(run_id=RUN, candidate=CANDIDATE),
    IngestResult(run_id=RUN, key=CANDIDATE.key, path=CANDIDATE.path, status="failed", reason="not a PDF",
                 flags=("repaired",)),
    ForageRequest(run_id=RUN, iteration=1, requirement=REQ),
    COVERAGE,
    WriteRequest(run_id=RUN, query=QUERY, coverages=(COVERAGE,), iterations=2),
    Report(run_id=RUN, markdown="# T — Report\n", removed_citations=1,
           sources=(SourceRef(n=1, doc_id="d" * 64, title="A review", authors=("Doe, J.",), year=2010,
                              chunk_ids=("dddddddddddddddd:00003",)),),
           cited_chunks=(CitedChunk(n=1, doc_id="d" * 64, chunk_id="dddddddddddddddd:00003",
                                    section_path="Results", sha256="0" * 64, quote="bleeding"),)),
    StatusEvent(run_id=RUN, seq=3, stage=Stage.FORAGE, kind="coverage", requirement_id="R1",
                payload={"coverage": 0.5, "nested": {"a": [1, 2]}}),
    RunSummary(run_id=RUN, status="finished", iterations=2, stop_reason="coverage", mean_coverage=0.9,
               run_dir="/tmp/r", report_path="/tmp/r/report.md"),
]


def all_message_classes() -> set[type[Message]]:
    found = set()
    for _, obj in inspect.getmembers(messages):
        if inspect.isclass(obj) and issubclass(obj, Message) and obj is not Message:
            found.add(obj)
    return found


def test_every_message_class_has_an_example() -> None:
    assert all_message_classes() == {type(m) for m in EXAMPLES}


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_json_round_trip(msg: Message) -> None:
    again = type(msg).model_validate_json(msg.model_dump_json())
    assert again == msg


@pytest.mark.parametrize("cls", sorted(all_message_classes(), key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_frozen_and_strict(cls: type[Message]) -> None:
    assert cls.model_config.get("frozen") is True
    assert cls.model_config.get("extra") == "forbid"
    assert "run_id" in cls.model_fields


def test_frozen_rejects_mutation_and_unknown_fields() -> None:
    with pytest.raises(pydantic.ValidationError):
        QUERY.text = "changed"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        ResearchQuery(run_id=RUN, text="q", secret="x")  # type: ignore[call-arg]


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_query_is_refused(text: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="empty"):
        ResearchQuery(run_id=RUN, text=text)


def test_requirement_ids_unique() -> None:
    with pytest.raises(pydantic.ValidationError, match="duplicate"):
        RequirementsPlan(run_id=RUN, query=QUERY, requirements=(REQ, REQ))


@pytest.mark.ray
def test_ray_round_trip(ray_cluster) -> None:
    import ray

    refs = [ray.put(m) for m in EXAMPLES]
    assert ray.get(refs) == EXAMPLES

    @ray.remote(num_cpus=0)
    def echo(m: Message) -> Message:
        return m

    assert ray.get([echo.remote(m) for m in EXAMPLES]) == EXAMPLES


def test_validation_errors_read_as_one_plain_sentence_naming_the_value() -> None:
    import pytest
    from pydantic import ValidationError

    from infra.errors import validation_text
    from messages.plan import ResearchQuery

    names = {"text": "the research query"}
    for text, expected in (("   ", "the research query is empty"),
                           ("x" * 5000, "the research query: String should have at most 4000 characters")):
        with pytest.raises(ValidationError) as caught:
            ResearchQuery(run_id="r", text=text)
        message = validation_text(caught.value, field_names=names)
        assert message.startswith(expected) and "Value error" not in message and "xxxx" not in message


def test_a_plan_is_approved_in_one_way_with_the_researchers_edits_validated() -> None:
    plan = RequirementsPlan(run_id=RUN, query=QUERY, requirements=(REQ,))
    assert plan.approve().approved and plan.approve().requirements == plan.requirements and not plan.approved
    edited = plan.approve(requirements=(Requirement(id="R1", text="Bleeding after heparin in trauma patients"),),
                          search_queries=(SearchQuery(text="heparin bleeding trauma"),))
    assert edited.approved and edited.requirements[0].text == "Bleeding after heparin in trauma patients"
    assert [q.text for q in edited.search_queries] == ["heparin bleeding trauma"]
    with pytest.raises(pydantic.ValidationError):  # an edit that leaves a plan no valid plan could be is refused
        plan.approve(requirements=())
    with pytest.raises(pydantic.ValidationError):
        plan.approve(requirements=(Requirement(id="R1", text="A first need"), Requirement(id="R1", text="Another")))
