"""ForageStep on a real LanceStore filled with hand-made documents and real MiniLM vectors.

The LLM is a FunctionLLM "oracle" that answers like a careful reader from each passage it is shown
(a phrase → tag table), one verdict per numbered passage of a batch, so the tests do not depend on
which order retrieval returns chunks in nor on how they are batched.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Sequence

import pytest

from actors.steps.events import RecordingEmit
from actors.steps.forage.step import ForageStep
from actors.steps.schemas import (
    BatchVerdict,
    DeepDiveBatchVerdict,
    DocumentGist,
    Reformulation,
    RelevanceGate,
    SectionChoice,
)
from infra.errors import StoreError
from infra.llm.fakes import FunctionLLM
from infra.rerank import StoreSimilarity
from infra.settings import Settings
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord
from messages.forage import ForageRequest
from messages.plan import Requirement
from messages.status import Stage
from tests.factories import make_doc
from tests.minilm import PRECISIONS, assert_clear_of, score_tolerance, shared_minilm

RUN = "run-forage"
REQ = Requirement(id="R1", text="How does chlorophyll convert absorbed light energy into chemical energy such as "
                               "ATP and NADPH?")

PHOTO = make_doc("photo", "Light Reactions of Photosynthesis", [
    ("Introduction", "body", "Plants, algae and cyanobacteria depend on sunlight. This study examines how leaves "
                             "use the energy of sunlight."),
    ("Methods", "body", "Leaf samples were dark-adapted for thirty minutes and measured with a pulse-amplitude "
                        "fluorometer."),
    ("Results > Light capture", "body", "Chlorophyll in photosystem II absorbs photons; the light reactions split "
                                        "water and produce ATP and NADPH, which store the captured light energy as "
                                        "chemical energy."),
    ("Results > Carbon fixation", "body", "The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars."),
    ("References", "references", "Smith J. (2001) Chlorophyll photons and light reactions: ATP, NADPH and the "
                                 "chemical energy of photosynthesis."),
], authors=("Ada Lovelace", "Alan Turing"), year=2020,
    abstract="We show how chlorophyll turns absorbed light into chemical energy in spinach leaves.")
FOREST = make_doc("forest", "Forest Canopy Ecology", [
    ("Introduction", "body", "Forest canopies shape how much sunlight reaches understory plants and how fast "
                             "they photosynthesize."),
    ("Study site", "body", "The plots lie in a temperate beech forest at 400 m altitude."),
    ("Results > Leaf energy budget", "body", "Sun leaves converted a larger share of absorbed light into chemical "
                                             "energy than shade leaves."),
    ("Discussion", "body", "Canopy gaps after storms change the light environment for decades."),
])
BREAD = make_doc("bread", "Sourdough Fermentation", [
    ("Introduction", "body", "Sourdough bread rises because yeasts and lactic acid bacteria ferment the flour's "
                             "sugars."),
    ("Methods", "body", "Doughs were proofed at 28 degrees for six hours."),
])
LATE = make_doc("late", "Chlorophyll Fluorescence: A Review", [
    ("Mechanisms", "body", "Excited chlorophyll passes electrons along the thylakoid transport chain, which pumps "
                           "protons so that ATP synthase makes ATP while ferredoxin reduces NADP+ to NADPH."),
])
ALL = [PHOTO, FOREST, BREAD]
N_BODY_CHUNKS = sum(1 for _, chunks in ALL for c in chunks if c.section_kind != "references")


def cid(doc: tuple[DocumentRecord, list[ChunkRecord]], ordinal: int) -> str:
    return doc[1][ordinal].chunk_id


@pytest.fixture(scope="module")
def embedder(minilm):
    return minilm


def filled_store(path, embedder):
    from infra.store.lancedb import LanceStore

    s = LanceStore(path, dim=384)
    for doc in ALL:
        add(s, embedder, doc)
    return s


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    """One store for the tests that only read it (ForageStep never writes)."""
    return filled_store(tmp_path_factory.mktemp("forage") / "store", embedder)


@pytest.fixture()
def own_store(tmp_path, embedder):
    """A store a test may add documents to."""
    return filled_store(tmp_path / "store", embedder)


def add(store, embedder, doc) -> None:
    record, chunks = doc
    store.upsert_document(record, chunks, embedder.embed([c.text for c in chunks]))


def passages(messages) -> list[tuple[int, str]]:
    """The numbered passages of a batch prompt: [(n, text)]."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    return [(int(n), text) for n, text in re.findall(r"<<<PASSAGE (\d+)\n(.*?)\nPASSAGE \1>>>", user, re.DOTALL)]


class Oracle:
    """Answers every schema the ForageStep asks for, judging each passage by the phrases it contains.

    ``verdicts``: phrase → tag or (tag, kind); answers default to kind "method", others "background".
    ``fail_on``: a batch holding such a passage gets invalid output (the whole call fails).
    ``bad_entry_on``: such a passage gets an invalid entry (unknown tag) while the others are answered.
    ``bad_once``: bad entries only in the first call that shows the passage (a re-judge then succeeds).
    """

    def __init__(self, verdicts: dict[str, str | tuple[str, str]] | None = None, *, gate: bool = True,
                 sections: Sequence[str] = (), fail_on: Sequence[str] = (), bad_entry_on: Sequence[str] = (),
                 bad_once: bool = False, query: str | None = None) -> None:
        self.verdicts = verdicts or {}
        self.gate = gate
        self.sections = list(sections)
        self.fail_on = set(fail_on)
        self.bad_entry_on = set(bad_entry_on)
        self.bad_once = bad_once
        self.query = query
        self.shown: dict[str, int] = {}

    @staticmethod
    def block(messages, name: str) -> str:
        user = next(m["content"] for m in messages if m["role"] == "user")  # the original question
        found = re.search(rf"<<<{name}\n(.*?)\n{name}>>>", user, re.DOTALL)
        return found.group(1) if found else ""

    def judge(self, passage: str, deep: bool) -> dict:
        for phrase, verdict in self.verdicts.items():
            if phrase in passage:
                tag, kind = verdict if isinstance(verdict, tuple) else (
                    verdict, "method" if verdict == "answers" else "background")
                if deep and tag == "interesting":
                    tag = "unrelated"
                return {"tag": tag, "kind": kind, "motive": f"It mentions {phrase}."}
        return {"tag": "unrelated", "kind": "background", "motive": "Off topic."}

    def __call__(self, messages, schema):
        if issubclass(schema, (BatchVerdict, DeepDiveBatchVerdict)):
            shown = passages(messages)
            if any(p in text for _, text in shown for p in self.fail_on):
                return "I am not sure, sorry."  # never valid JSON: the call fails after its retries
            out = []
            for n, text in shown:
                self.shown[text] = self.shown.get(text, 0) + 1
                entry = {"passage": n, **self.judge(text, issubclass(schema, DeepDiveBatchVerdict))}
                if any(p in text for p in self.bad_entry_on) and not (self.bad_once and self.shown[text] > 1):
                    entry["tag"] = "maybe"  # invalid for this passage only
                out.append(entry)
            return {"verdicts": out}
        if schema is DocumentGist:
            title = re.search(r"Title: (.*)", messages[-1]["content"]).group(1)
            return {"summary": f"A study titled {title}."}
        if schema is RelevanceGate:
            return {"continue_search": self.gate, "reason": "Promising." if self.gate else "Not worth it."}
        if schema is SectionChoice:
            return {"sections": self.sections}
        if schema is Reformulation:
            requirement = re.search(r"Requirement: (.*)", messages[-1]["content"]).group(1)
            return {"query": self.query if self.query is not None else requirement}
        raise AssertionError(f"unexpected schema {schema.__name__}")


def settings(**forage) -> Settings:
    """The judge's mechanics are tested on its word alone (relevance_check off); the check's own tests at the
    end turn it on."""
    base = {"bm25_k": 3, "vector_k": 3, "max_deep_dives": 0, "deep_dive_sections": 2, "deep_dive_chunks": 4,
            "judge_batch": 6, "paper_k": 0, "min_papers": 0, "relevance_check": False}
    return Settings.load().updated(forage={**base, **forage})


def forage(step: ForageStep, iteration: int = 1):
    return asyncio.run(step.forage(ForageRequest(run_id=RUN, iteration=iteration, requirement=REQ)))


def test_answering_chunk_gives_full_coverage(store, embedder):
    llm = FunctionLLM(Oracle({"split water": "answers"}))
    cov = forage(ForageStep(settings(), store, embedder, llm))
    assert cov.status == "ok" and cov.coverage == 1.0
    assert cov.requirement == REQ and cov.iteration == 1 and cov.run_id == RUN
    first = cov.evidence[0]
    assert first.doc_id == PHOTO[0].doc_id and first.tag == "answers"
    assert first.chunk_ids[0] == cid(PHOTO, 2)
    assert first.motive == "It mentions split water."
    assert first.summary == "A study titled Light Reactions of Photosynthesis."
    assert first.title == "Light Reactions of Photosynthesis"
    assert all(e.tag == "answers" for e in cov.evidence)


def test_only_interesting_chunks_give_half_coverage(store, embedder):
    llm = FunctionLLM(Oracle({"sunlight": "interesting"}))
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, llm))
    assert cov.coverage == 0.5
    assert {e.doc_id for e in cov.evidence} == {PHOTO[0].doc_id, FOREST[0].doc_id}
    assert {e.tag for e in cov.evidence} == {"interesting"}
    assert {c for e in cov.evidence for c in e.chunk_ids} == {cid(PHOTO, 0), cid(FOREST, 0)}


def test_nothing_related_gives_zero_coverage(store, embedder):
    llm = FunctionLLM(Oracle({}))
    cov = forage(ForageStep(settings(), store, embedder, llm))
    assert cov.coverage == 0.0 and cov.evidence == ()
    assert cov.judgements and all(j.tag == "unrelated" for j in cov.judgements)
    assert "DocumentGist" not in llm.schemas_asked()  # nothing useful, nothing to summarize


def test_calls_are_counted_and_events_emitted(store, embedder):
    emit = RecordingEmit(RUN)
    llm = FunctionLLM(Oracle({"split water": "answers", "sunlight": "interesting"}))
    step = ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, llm, emit=emit)
    cov = forage(step)
    judged = {j.chunk_id for j in cov.judgements}
    assert len(judged) == N_BODY_CHUNKS == len(cov.judgements)
    assert cid(PHOTO, 4) not in judged  # the references section is never retrieved
    # one call per batch of 6 chunks, one summary per useful document (PHOTO, FOREST), no deep dive
    batches = -(-N_BODY_CHUNKS // 6)
    assert cov.llm_calls == batches + 2 == llm.calls
    assert llm.schemas_asked().count("BatchVerdict") == batches
    assert llm.schemas_asked().count("DocumentGist") == 2
    assert cov.coverage == 1.0 and cov.failed_steps == ()
    # the summary of a document without an abstract is made from its introduction's first chunk
    gist_prompts = [c.last_user_message for c in llm.calls_log if c.schema == "DocumentGist"]
    forest = next(p for p in gist_prompts if "Forest Canopy Ecology" in p)
    assert "<<<INTRODUCTION\nForest canopies shape" in forest
    assert "- Results > Leaf energy budget" in forest
    photo = next(p for p in gist_prompts if "Light Reactions" in p)
    assert "<<<ABSTRACT\nWe show how chlorophyll" in photo

    assert emit.kinds(Stage.FORAGE) == ["started", "retrieved", "judged", "coverage"]
    assert all(e.requirement_id == "R1" and e.iteration == 1 for e in emit.events)
    judged_event = emit.events[2].payload
    assert (judged_event["answers"], judged_event["interesting"], judged_event["unrelated"]) == (1, 2, 7)
    coverage_event = emit.events[-1].payload
    assert coverage_event["coverage"] == 1.0 and coverage_event["llm_calls"] == batches + 2
    assert coverage_event["answering_papers"] == cov.answering_papers == 1


def test_deep_dive_reads_only_sections_that_exist(store, embedder):
    emit = RecordingEmit(RUN)
    oracle = Oracle({"photosystem II": "interesting", "Calvin cycle": "answers"},
                    sections=["Methods", "Conclusions > Future work", "results >  carbon FIXATION", "Introduction"])
    llm = FunctionLLM(oracle)
    step = ForageStep(settings(bm25_k=1, vector_k=1, max_deep_dives=2), store, embedder, llm, emit=emit)
    cov = forage(step)
    start = [j for j in cov.judgements if j.stage == "start"]
    assert cid(PHOTO, 2) in {j.chunk_id for j in start}  # the interesting passage that triggers the dive
    dives = [e.payload for e in emit.events if e.kind == "deep_dive"]
    assert len(dives) == 1 and dives[0]["doc_id"] == PHOTO[0].doc_id
    # two sections at most (deep_dive_sections=2), real paths only, matched ignoring case and spacing
    assert dives[0]["sections"] == ["Methods", "Results > Carbon fixation"]
    assert dives[0]["ignored_sections"] == ["Conclusions > Future work"]
    deep = [j for j in cov.judgements if j.stage == "deep_dive"]
    assert {j.chunk_id for j in deep} == {cid(PHOTO, 1), cid(PHOTO, 3)} - {j.chunk_id for j in start}
    assert all(j.tag in ("answers", "unrelated") for j in deep)
    assert cov.coverage == 1.0  # the Calvin cycle passage found in the dive answers
    photo = next(e for e in cov.evidence if e.doc_id == PHOTO[0].doc_id)
    assert photo.tag == "answers" and cid(PHOTO, 3) in photo.chunk_ids and cid(PHOTO, 2) in photo.chunk_ids
    # the gate saw the document summary; the section choice saw the document's section list
    gate = next(c for c in llm.calls_log if c.schema == "RelevanceGate")
    assert "A study titled Light Reactions of Photosynthesis." in gate.last_user_message
    choice = next(c for c in llm.calls_log if c.schema == "SectionChoice")
    assert "- Results > Carbon fixation" in choice.last_user_message
    assert cov.llm_calls == llm.calls

    # a document is deep-dived once: the next iteration does not ask the gate again
    asked = len(llm.calls_log)
    forage(step, iteration=2)
    assert "RelevanceGate" not in llm.schemas_asked()[asked:]


def test_no_deep_dive_into_a_document_with_nothing_left_to_read(store, embedder):
    # every chunk is judged at the start (vector_k covers the store): PHOTO is interesting but has nothing unread
    # (its references are never judged), so no gate, no section choice — its summary is the only call about it
    llm = FunctionLLM(Oracle({"photosystem II": "interesting"}, sections=["Methods"]))
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, max_deep_dives=2), store, embedder, llm))
    assert {j.chunk_id for j in cov.judgements} >= {c.chunk_id for c in PHOTO[1] if c.section_kind != "references"}
    assert "RelevanceGate" not in llm.schemas_asked() and "SectionChoice" not in llm.schemas_asked()
    assert llm.schemas_asked().count("DocumentGist") == 1 and cov.coverage == 0.5
    # with a chunk left to read, the same document is dived into
    llm = FunctionLLM(Oracle({"photosystem II": "interesting"}, sections=["Methods"]))
    forage(ForageStep(settings(bm25_k=1, vector_k=1, max_deep_dives=2), store, embedder, llm))
    assert "RelevanceGate" in llm.schemas_asked()


def test_gate_can_stop_the_deep_dive(store, embedder):
    emit = RecordingEmit(RUN)
    llm = FunctionLLM(Oracle({"photosystem II": "interesting"}, gate=False, sections=["Methods"]))
    cov = forage(ForageStep(settings(bm25_k=1, vector_k=1, max_deep_dives=2), store, embedder, llm, emit=emit))
    assert "SectionChoice" not in llm.schemas_asked()
    assert all(j.stage == "start" for j in cov.judgements)
    dive = next(e.payload for e in emit.events if e.kind == "deep_dive")
    assert dive["continue_search"] is False and dive["sections"] == []
    assert cov.coverage == 0.5


def test_judged_chunks_are_not_judged_again(own_store, embedder):
    store = own_store
    llm = FunctionLLM(Oracle({"split water": "answers", "sunlight": "interesting"}))
    step = ForageStep(settings(), store, embedder, llm)
    first = forage(step, 1)
    second = forage(step, 2)
    ids1 = {j.chunk_id for j in first.judgements}
    ids2 = {j.chunk_id for j in second.judgements}
    assert ids1 and ids2 and not ids1 & ids2
    # coverage and evidence are cumulative over iterations
    assert second.coverage >= first.coverage
    assert {c for e in first.evidence for c in e.chunk_ids} <= {c for e in second.evidence for c in e.chunk_ids}
    assert second.llm_calls > first.llm_calls and second.llm_calls == llm.calls

    # a document ingested between iterations is foraged; nothing judged before is asked about again
    add(store, embedder, LATE)
    asked = len(llm.calls_log)
    third = forage(step, 3)
    ids3 = {j.chunk_id for j in third.judgements}
    assert cid(LATE, 0) in ids3 and not ids3 & (ids1 | ids2)
    shown = [text for c in llm.calls_log[asked:] if c.schema == "BatchVerdict" for _, text in passages(c.messages)]
    assert len(shown) == len(ids3)


def test_store_foraged_out_judges_nothing_new(store, embedder):
    llm = FunctionLLM(Oracle({"split water": "answers"}))
    step = ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, llm)
    first = forage(step, 1)
    calls = llm.calls
    second = forage(step, 2)
    assert second.judgements == () and llm.calls == calls
    assert second.coverage == first.coverage == 1.0 and second.evidence == first.evidence
    # what the Orchestrator's stop rule reads: the first iteration brought passages, the second nothing new
    assert first.new_passages == sum(1 for j in first.judgements if not j.motive.startswith("not shown"))
    assert first.new_passages > 0 and second.new_passages == 0


def test_failing_batch_call_is_recorded_and_its_chunks_tried_again(store, embedder):
    emit = RecordingEmit(RUN)
    oracle = Oracle({"split water": "answers"}, fail_on=["Sourdough bread rises"])
    llm = FunctionLLM(oracle)  # max_retries=2: a failing call makes 3 attempts
    step = ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=1), store, embedder, llm, emit=emit)
    cov = forage(step)
    bad = cid(BREAD, 0)
    assert bad not in {j.chunk_id for j in cov.judgements}
    assert len(cov.judgements) == N_BODY_CHUNKS - 1
    assert len(cov.failed_steps) == 1 and bad in cov.failed_steps[0] and "LLMOutputError" in cov.failed_steps[0]
    assert cov.status == "ok" and cov.coverage == 1.0
    assert cov.llm_calls == N_BODY_CHUNKS + 1  # calls made by the step; the LLM itself retried
    assert llm.calls == cov.llm_calls + 2
    judged = next(e.payload for e in emit.events if e.kind == "judged")
    assert judged["failed"] == 1
    # the skipped chunk is tried again next iteration, and only it
    oracle.fail_on.clear()
    again = forage(step, 2)
    assert [j.chunk_id for j in again.judgements] == [bad]
    assert again.failed_steps == cov.failed_steps  # failures stay on record


def test_failing_batch_leaves_all_its_chunks_for_the_next_iteration(store, embedder):
    oracle = Oracle({"split water": "answers"}, fail_on=["Sourdough bread rises"])
    step = ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=N_BODY_CHUNKS), store, embedder,
                      FunctionLLM(oracle))
    cov = forage(step)
    assert cov.judgements == () and cov.coverage == 0.0 and len(cov.failed_steps) == 1
    oracle.fail_on.clear()
    again = forage(step, 2)
    assert len(again.judgements) == N_BODY_CHUNKS and again.coverage == 1.0


def test_unexpected_errors_propagate(store, embedder):
    def broken(messages, schema):
        raise RuntimeError("model crashed")

    with pytest.raises(RuntimeError, match="model crashed"):
        forage(ForageStep(settings(), store, embedder, FunctionLLM(broken)))


def test_one_step_forages_one_requirement(store, embedder):
    step = ForageStep(settings(), store, embedder, FunctionLLM(Oracle()))
    forage(step)
    other = Requirement(id="R2", text="Which yeasts ferment sourdough?")
    with pytest.raises(ValueError, match="R1"):
        asyncio.run(step.forage(ForageRequest(run_id=RUN, iteration=2, requirement=other)))


# -- batched judging -----------------------------------------------------------------------------------
def decisions(cov) -> dict[str, tuple[str, str | None, str]]:
    return {j.chunk_id: (j.tag, j.kind, j.motive) for j in cov.judgements}


@pytest.mark.parametrize("size", [2, 4, 12])
def test_batching_preserves_per_chunk_decisions(store, embedder, size):
    verdicts = {"split water": "answers", "sunlight": "interesting", "Calvin cycle": ("answers", "result")}
    one = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=1), store, embedder,
                            FunctionLLM(Oracle(verdicts))))
    llm = FunctionLLM(Oracle(verdicts))
    batched = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=size), store, embedder, llm))
    assert decisions(batched) == decisions(one) and len(decisions(one)) == N_BODY_CHUNKS
    assert batched.coverage == one.coverage and batched.evidence == one.evidence
    assert llm.schemas_asked().count("BatchVerdict") == -(-N_BODY_CHUNKS // size)


def test_invalid_entry_is_rejudged_and_others_kept(store, embedder):
    emit = RecordingEmit(RUN)
    oracle = Oracle({"split water": "answers"}, bad_entry_on=["split water"], bad_once=True)
    llm = FunctionLLM(oracle)
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=N_BODY_CHUNKS), store, embedder, llm,
                            emit=emit))
    assert len(cov.judgements) == N_BODY_CHUNKS and cov.failed_steps == ()
    assert decisions(cov)[cid(PHOTO, 2)] == ("answers", "method", "It mentions split water.")
    batches = [c for c in llm.calls_log if c.schema == "BatchVerdict"]
    assert len(batches) == 2 and [n for n, _ in passages(batches[1].messages)] == [1]  # only the bad one again


@pytest.mark.parametrize("how", ["invalid", "missing"])
def test_chunk_without_a_valid_verdict_is_recorded_as_failed(store, embedder, how):
    emit = RecordingEmit(RUN)
    oracle = Oracle({"split water": "answers", "sunlight": "interesting"},
                    bad_entry_on=["split water"] if how == "invalid" else ())

    def answer(messages, schema):
        out = oracle(messages, schema)
        if how == "missing" and issubclass(schema, BatchVerdict):
            keep = {n for n, text in passages(messages) if "split water" not in text}
            out = {"verdicts": [v for v in out["verdicts"] if v["passage"] in keep]}
        return out

    step = ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=N_BODY_CHUNKS), store, embedder,
                      FunctionLLM(answer), emit=emit)
    cov = forage(step)
    bad = cid(PHOTO, 2)
    assert bad not in decisions(cov) and len(cov.judgements) == N_BODY_CHUNKS - 1  # the others are kept
    assert cov.coverage == 0.5  # the only answering chunk has no verdict
    assert len(cov.failed_steps) == 1 and bad in cov.failed_steps[0] and "no valid verdict" in cov.failed_steps[0]
    failed = next(e.payload for e in emit.events if e.kind == "step_failed")
    assert failed["chunk_ids"] == [bad]
    assert cov.llm_calls == 2 + 2  # the batch, its re-judge, a summary each of PHOTO and FOREST
    # the failed chunk is tried again next iteration, and only it
    oracle.bad_entry_on.clear()
    how = "fixed"
    again = forage(step, 2)
    assert [j.chunk_id for j in again.judgements] == [bad] and again.coverage == 1.0


def test_llm_tagging_everything_interesting(store, embedder):
    def everything(messages, schema):
        if issubclass(schema, BatchVerdict):
            return {"verdicts": [{"passage": n, "tag": "interesting", "kind": "background", "motive": "On topic."}
                                 for n, _ in passages(messages)]}
        return Oracle()(messages, schema)

    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, min_papers=2), store, embedder, FunctionLLM(everything)))
    assert len(cov.judgements) == N_BODY_CHUNKS and all(j.tag == "interesting" for j in cov.judgements)
    assert cov.coverage == 0.5 and cov.answering_papers == 0
    assert {e.doc_id for e in cov.evidence} == {d[0].doc_id for d in ALL} and {e.tag for e in cov.evidence} == {
        "interesting"}


def test_llm_tagging_nothing(store, embedder):
    llm = FunctionLLM(Oracle({}))
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, llm))
    assert len(cov.judgements) == N_BODY_CHUNKS and {j.tag for j in cov.judgements} == {"unrelated"}
    assert cov.coverage == 0.0 and cov.evidence == () and cov.answering_papers == 0
    assert llm.schemas_asked() == ["BatchVerdict"] * 2


def test_llm_returning_invalid_output(store, embedder):
    emit = RecordingEmit(RUN)
    llm = FunctionLLM(lambda messages, schema: "{not json at all")
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, min_papers=2), store, embedder, llm, emit=emit))
    assert cov.status == "ok" and cov.judgements == () and cov.coverage == 0.0 and cov.evidence == ()
    # two batches and the reformulation failed; each is on record, nothing raised
    assert cov.llm_calls == 3 and len(cov.failed_steps) == 3
    assert all("LLMOutputError" in f for f in cov.failed_steps)
    assert next(e.payload for e in emit.events if e.kind == "judged")["failed"] == N_BODY_CHUNKS


# -- kinds and coverage --------------------------------------------------------------------------------
def test_background_alone_never_gives_full_coverage(store, embedder):
    background = {"split water": ("answers", "background"), "Sun leaves": ("answers", "background")}
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, FunctionLLM(Oracle(background))))
    assert cov.coverage == 0.75 and cov.answering_papers == 2
    mixed = {"split water": ("answers", "background"), "Sun leaves": ("answers", "result")}
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, FunctionLLM(Oracle(mixed))))
    assert cov.coverage == 1.0
    # the document answered by a result ranks above the one answered by background
    assert [e.doc_id for e in cov.evidence][:2] == [FOREST[0].doc_id, PHOTO[0].doc_id]
    assert cov.evidence[0].motive == "It mentions Sun leaves."


def test_methods_rank_above_background_within_a_document(store, embedder):
    verdicts = {"Plants, algae": ("answers", "background"), "split water": ("answers", "method")}
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder, FunctionLLM(Oracle(verdicts))))
    photo = next(e for e in cov.evidence if e.doc_id == PHOTO[0].doc_id)
    assert photo.chunk_ids[:2] == (cid(PHOTO, 2), cid(PHOTO, 0)) and photo.motive == "It mentions split water."


# -- two-stage start and reformulation -----------------------------------------------------------------
def test_declarations_are_never_judged_nor_offered_to_a_deep_dive(tmp_path, embedder):
    """Seen in bench/suites/deep.yaml: the red-fluorescent-protein paper's evidence was its Acknowledgements chunk
    (every chunk carries the paper's title for BM25), so the report had no sentence to quote from it."""
    from infra.store.lancedb import LanceStore

    store = LanceStore(tmp_path / "store", dim=384)
    leaf = make_doc("leaf", "Chlorophyll and the light reactions", [
        ("Results", "body", "Chlorophyll absorbs photons and the light reactions produce ATP and NADPH."),
        ("Acknowledgements", "body", "We thank the chlorophyll and ATP and NADPH light reactions core facility."),
        ("Conclusions", "body", "Chlorophyll absorbed light energy becomes chemical energy."),
        ("Conclusions > Funding", "body", "Funded by the chlorophyll light energy programme, grant 12."),
    ])
    add(store, embedder, leaf)
    emit = RecordingEmit(RUN)
    cov = forage(ForageStep(settings(bm25_k=10, vector_k=10), store, embedder, FunctionLLM(Oracle({}))))
    assert {j.chunk_id for j in cov.judgements} == {cid(leaf, 0), cid(leaf, 2)}
    # a deep dive is offered the sections but the declarations, and reads a section without its "Funding" part
    oracle = Oracle({"Chlorophyll absorbs": "interesting", "becomes chemical": "interesting"},
                    sections=["Acknowledgements", "Conclusions", "Results"])
    llm = FunctionLLM(oracle)
    cov = forage(ForageStep(settings(bm25_k=1, vector_k=1, max_deep_dives=1, deep_dive_chunks=4), store, embedder,
                            llm, emit=emit))
    choice = next(c for c in llm.calls_log if c.schema == "SectionChoice")
    assert "- Conclusions" in choice.last_user_message and "Acknowledgements" not in choice.last_user_message
    assert "Funding" not in choice.last_user_message
    dive = next(e.payload for e in emit.events if e.kind == "deep_dive")
    assert dive["ignored_sections"] == ["Acknowledgements"]
    assert {j.chunk_id for j in cov.judgements} == {cid(leaf, 0), cid(leaf, 2)}


def test_papers_first_then_their_chunks(tmp_path, embedder):
    from infra.store.lancedb import LanceStore

    store = LanceStore(tmp_path / "store", dim=384)
    leaf = make_doc("leaf", "Photosynthetic energy conversion in leaves", [
        ("Abstract", "abstract", "How chlorophyll converts absorbed light into ATP and NADPH in leaves."),
        ("Methods", "body", "Spinach was grown in growth chambers under controlled irradiance."),
        ("Results", "body", "Electron transport rates rose with irradiance up to saturation."),
    ])
    for doc in (leaf, BREAD, FOREST):
        add(store, embedder, doc)
    emit = RecordingEmit(RUN)
    llm = FunctionLLM(Oracle({"Electron transport": "answers"}))
    cov = forage(ForageStep(settings(bm25_k=0, vector_k=0, paper_k=1, paper_chunks=2), store, embedder, llm,
                            emit=emit))
    retrieved = next(e.payload for e in emit.events if e.kind == "retrieved")
    assert retrieved["papers"] == [leaf[0].doc_id]
    assert {j.doc_id for j in cov.judgements} == {leaf[0].doc_id} and len(cov.judgements) == 2
    # with the chunk search on too, candidates are deduplicated
    step = ForageStep(settings(bm25_k=5, vector_k=5, paper_k=2, paper_chunks=3), store, embedder,
                      FunctionLLM(Oracle({"Electron transport": "answers"})))
    cov = forage(step)
    ids_ = [j.chunk_id for j in cov.judgements]
    assert len(ids_) == len(set(ids_)) and cid(leaf, 2) in ids_ and cov.coverage == 1.0


def test_each_top_paper_gives_its_best_chunks_from_one_search(tmp_path, embedder):
    from infra.store.base import ChunkFilter
    from infra.store.lancedb import LanceStore

    class CountingStore(LanceStore):
        searches = 0

        def hybrid(self, *args, **kwargs):
            CountingStore.searches += 1
            return super().hybrid(*args, **kwargs)

    store = CountingStore(tmp_path / "store", dim=384)
    # "many" has thirty chunks on the query: a search over all three papers at once (k = 2 x 3 x 4 = 24) is
    # filled with them
    many = make_doc("many", "Chlorophyll fluorescence", [
        ("Results", "body", f"Electron transport in leaves measured by chlorophyll fluorescence, plot {i}.")
        for i in range(30)])
    few = make_doc("few", "Wheat", [
        ("Abstract", "abstract", "Grain prices in European markets."),
        ("Results", "body", "Leaves were sampled at noon."),
        ("Methods", "body", "Transport of grain by rail."),
    ])
    single = make_doc("single", "Bread", [("Body", "body", "Leaves of bread dough rise overnight.")])
    for doc in (many, few, single):
        add(store, embedder, doc)
    step = ForageStep(settings(paper_k=3, paper_chunks=2), store, embedder, FunctionLLM(Oracle({})))
    step.retrieval.alpha = 0.4
    query = "electron transport in leaves"
    vector = embedder.embed([query])[0]
    papers = [many[0].doc_id, few[0].doc_id, single[0].doc_id]
    alone = {d: [h.chunk.chunk_id for h in store.hybrid(query, vector, 2, 0.4, ChunkFilter(doc_ids=(d,)))]
             for d in papers}
    CountingStore.searches = 0
    got = step.retrieval.chunks_of_papers(query, vector, papers, ChunkFilter())
    assert [h.chunk.doc_id for h in got] == [many[0].doc_id] * 2 + [few[0].doc_id] * 2 + [single[0].doc_id]
    by_paper = {d: [h.chunk.chunk_id for h in got if h.chunk.doc_id == d] for d in papers}
    assert by_paper[few[0].doc_id] == alone[few[0].doc_id]  # crowded out of the joint search: searched alone
    assert by_paper[single[0].doc_id] == [cid(single, 0)]  # crowded out too: its own search finds its one chunk
    assert set(by_paper[many[0].doc_id]) <= {c.chunk_id for c in many[1]}
    assert CountingStore.searches == 3  # the joint search, then each crowded-out paper's own
    # when every paper fits, one search
    CountingStore.searches = 0
    assert [h.chunk.doc_id for h in step.retrieval.chunks_of_papers(query, vector, papers[1:], ChunkFilter())] == (
        [few[0].doc_id] * 2 + [single[0].doc_id])
    assert CountingStore.searches == 1
    assert step.retrieval.chunks_of_papers(query, vector, [], ChunkFilter()) == []


def test_warm_opens_the_store_before_the_first_iteration(tmp_path, embedder):
    from infra.store.lancedb import LanceStore

    path = tmp_path / "store"
    add(LanceStore(path, dim=384), embedder, BREAD)
    store = LanceStore(path, dim=384)  # another process's view: nothing opened yet
    assert store._tables == {}
    asyncio.run(ForageStep(settings(), store, embedder, FunctionLLM(Oracle({}))).warm())
    assert set(store._tables) == {"chunks", "documents"}
    fresh = LanceStore(tmp_path / "empty", dim=384)
    asyncio.run(ForageStep(settings(), fresh, embedder, FunctionLLM(Oracle({}))).warm())  # nothing stored yet
    assert fresh._tables == {} and not (tmp_path / "empty" / "chunks.lance").exists()


class CountingEmbedder:
    """The real embedder, remembering every text it embedded."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.texts: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def embed(self, texts):
        self.texts += list(texts)
        return self.inner.embed(texts)


def test_paper_rankings_fuse_by_reciprocal_rank():
    from actors.steps.forage.retrieval import fuse_papers

    # A: 1/61; B: 1/62 + 1/61; C: 1/63 + 1/62; D: 1/63 (only summarized)
    assert fuse_papers(["A", "B", "C"], ["B", "C", "D"], 4) == ["B", "C", "A", "D"]
    assert fuse_papers(["A", "B"], [], 1) == ["A"]  # no summaries yet: the title-and-abstract order
    assert fuse_papers(["A", "B"], ["B"], 1) == ["B"]  # a summary close to the query lifts its paper
    assert fuse_papers(["A"], ["B"], 2) == ["A", "B"]  # a tie keeps the title-and-abstract paper first


def test_later_retrievals_rank_papers_by_their_summaries_too(tmp_path, embedder):
    from infra.store.lancedb import LanceStore

    store = LanceStore(tmp_path / "store", dim=384)
    for doc in (PHOTO, FOREST, BREAD):
        add(store, embedder, doc)
    oracle = Oracle({"Sun leaves": "interesting"})  # PHOTO's chunks are unrelated: it gets no summary

    def answer(messages, schema):
        user = next(m["content"] for m in messages if m["role"] == "user")
        if schema is DocumentGist and user.startswith(f"Title: {FOREST[0].title}"):
            return {"summary": "How leaves convert absorbed light energy into chemical energy."}  # close to REQ
        return oracle(messages, schema)

    emit = RecordingEmit(RUN)
    counting = CountingEmbedder(embedder)
    step = ForageStep(settings(bm25_k=0, vector_k=N_BODY_CHUNKS, paper_k=1, paper_chunks=1), store, counting,
                      FunctionLLM(answer), emit=emit)
    forage(step)
    [first] = [e.payload for e in emit.events if e.kind == "retrieved"]
    # nothing summarized before the first retrieval: the paper is the best by title and abstract
    assert first["papers_by_summary"] == [] and first["papers"] == [PHOTO[0].doc_id]
    summary = step.summaries.done[FOREST[0].doc_id]
    assert PHOTO[0].doc_id not in step.summaries.done and summary not in counting.texts
    forage(step, 2)
    [second] = [e.payload for e in emit.events if e.kind == "retrieved"][1:]
    # FOREST's summary lifts it above PHOTO (1/62 + 1/61 against 1/61)
    assert second["papers_by_summary"] == [FOREST[0].doc_id] and second["papers"] == [FOREST[0].doc_id]
    forage(step, 3)
    assert counting.texts.count(summary) == 1  # embedded when first needed, once


def test_too_few_answering_papers_reformulates_once(store, embedder):
    emit = RecordingEmit(RUN)
    oracle = Oracle({"split water": "answers", "Sun leaves": "answers"}, query="leaf energy budget canopy")
    llm = FunctionLLM(oracle)
    step = ForageStep(settings(bm25_k=1, vector_k=1, min_papers=3), store, embedder, llm, emit=emit)
    cov = forage(step)
    assert llm.schemas_asked().count("Reformulation") == 1
    [event] = [e.payload for e in emit.events if e.kind == "reformulated"]
    assert event["query"] == "leaf energy budget canopy" and event["answering_papers_before"] < 3
    queries = [e.payload["query"] for e in emit.events if e.kind == "retrieved"]
    assert queries == [REQ.text, "leaf energy budget canopy"]
    again = [j for j in cov.judgements if j.stage == "reformulated"]
    assert again and len({j.chunk_id for j in cov.judgements}) == len(cov.judgements)
    assert event["answering_papers_after"] == cov.answering_papers
    assert cid(FOREST, 2) in {j.chunk_id for j in cov.judgements} and cov.answering_papers == 2
    # bounded: once per iteration; an unchanged query retrieves nothing more
    oracle.query = REQ.text
    asked = len(llm.calls_log)
    forage(step, 2)
    assert llm.schemas_asked()[asked:].count("Reformulation") == 1
    assert [e.payload["query"] for e in emit.events if e.kind == "retrieved"][2:] == [REQ.text]


@pytest.mark.parametrize(("written", "searched"), [
    ("leaf-energy-budget-canopy-light-measurement-measurement-measurement-measurement-measurement-measurement",
     "leaf energy budget canopy light measurement"),  # a small model's slug and loop (seen with SmolLM2-135M)
    ("canopy canopy canopy canopy canopy canopy canopy canopy canopy canopy canopy canopy", None),  # only a loop
    ("TITLES", "TITLES"),  # the prompt's block label echoed back (SmolLM2-135M in a run): not searched
    ("photosynthetic electron transport", "photosynthetic electron transport"),  # other words than the requirement's
])
def test_a_slug_or_looping_reformulation_is_searched_as_words_or_not_at_all(store, embedder, written, searched):
    emit = RecordingEmit(RUN)
    llm = FunctionLLM(Oracle({"split water": "answers", "Sun leaves": "answers"}, query=written))
    forage(ForageStep(settings(bm25_k=1, vector_k=1, min_papers=3), store, embedder, llm, emit=emit))
    [event] = [e.payload for e in emit.events if e.kind == "reformulated"]
    queries = [e.payload["query"] for e in emit.events if e.kind == "retrieved"]
    if searched is None:
        assert event["query"] == "" and event["retrieved"] == 0 and queries == [REQ.text]
    elif searched == "TITLES":
        assert event["query"] == "TITLES" and event["retrieved"] == 0 and queries == [REQ.text]
    else:
        assert event["query"] == searched and queries == [REQ.text, searched]


def test_enough_answering_papers_do_not_reformulate(store, embedder):
    llm = FunctionLLM(Oracle({"split water": "answers"}))
    forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, min_papers=1), store, embedder, llm))
    assert "Reformulation" not in llm.schemas_asked()


# -- concurrency of independent calls ------------------------------------------------------------------
class InFlight:
    """Counts judging calls in flight; with ``meet`` > 1 each call waits until that many are in flight."""

    def __init__(self, meet: int = 1) -> None:
        self.oracle = Oracle({"split water": "answers"})
        self.meet = meet
        self.now = self.most = 0
        self.met = asyncio.Event()

    async def __call__(self, messages, schema):
        if not issubclass(schema, BatchVerdict):
            return self.oracle(messages, schema)
        self.now += 1
        self.most = max(self.most, self.now)
        if self.now >= self.meet:
            self.met.set()
        await asyncio.wait_for(self.met.wait(), timeout=10)  # sequential calls would never meet
        self.now -= 1
        return self.oracle(messages, schema)


def test_batches_run_concurrently_when_the_llm_queues_calls(store, embedder):
    fn = InFlight(meet=2)
    llm = FunctionLLM(fn)
    llm.queues_calls = True  # like SlottedLLM: calls wait for a slot, not at the server
    cov = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=5), store, embedder, llm))
    assert fn.most == 2 and len(cov.judgements) == N_BODY_CHUNKS
    one = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=1), store, embedder,
                            FunctionLLM(Oracle({"split water": "answers"}))))
    assert decisions(cov) == decisions(one)
    assert [j.chunk_id for j in cov.judgements] == [j.chunk_id for j in one.judgements]  # chunk order kept


def test_batches_run_one_after_another_otherwise(store, embedder):
    fn = InFlight()
    forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=5), store, embedder, FunctionLLM(fn)))
    assert fn.most == 1


class ReformulationFirst:
    """The Oracle, except that a deep dive's gate answers only once a Reformulation call has been asked:
    one after another, the gate (asked before the reformulation) would wait for ever."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self.reformulating = asyncio.Event()

    async def __call__(self, messages, schema):
        if schema is Reformulation:
            self.reformulating.set()
        if schema is RelevanceGate:
            await asyncio.wait_for(self.reformulating.wait(), timeout=10)
        return self.oracle(messages, schema)


def test_a_certain_reformulation_runs_beside_the_deep_dive_when_the_llm_queues_calls(store, embedder):
    def oracle() -> Oracle:
        return Oracle({"photosystem II": "interesting", "Calvin cycle": "answers", "split water": "answers"},
                      sections=["Methods", "Results > Carbon fixation"], query="leaf energy budget canopy")

    # min_papers=3: one document to dive into and no answer yet cannot reach three papers, so the
    # reformulation will run whatever the dive finds, and starts at once
    options = {"bm25_k": 1, "vector_k": 1, "max_deep_dives": 2, "min_papers": 3}
    fn = ReformulationFirst(oracle())
    llm = FunctionLLM(fn)
    llm.queues_calls = True
    cov = forage(ForageStep(settings(**options), store, embedder, llm))
    assert fn.reformulating.is_set()
    # the same calls and the same decisions as one call after another
    one = FunctionLLM(oracle())
    alone = forage(ForageStep(settings(**options), store, embedder, one))
    assert sorted(llm.schemas_asked()) == sorted(one.schemas_asked())
    assert "RelevanceGate" in one.schemas_asked() and "Reformulation" in one.schemas_asked()
    assert one.schemas_asked().index("RelevanceGate") < one.schemas_asked().index("Reformulation")
    assert decisions(cov) == decisions(alone)
    assert len({j.chunk_id for j in cov.judgements}) == len(cov.judgements)  # each chunk judged once
    assert (cov.coverage, cov.answering_papers, cov.llm_calls) == (alone.coverage, alone.answering_papers,
                                                                   alone.llm_calls)
    assert [e.doc_id for e in cov.evidence] == [e.doc_id for e in alone.evidence]
    assert {e.doc_id: e.summary for e in cov.evidence} == {e.doc_id: e.summary for e in alone.evidence}


class ChainOrder:
    """The Oracle, recording each call's place in the endpoint's queue order (infra.llm.slotted's priority, as
    SlottedLLM reads it); a background summary answers only once a Reformulation has been asked, so a
    reformulation that waited for it would wait for ever."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self.asked: list[tuple[str, str, float]] = []
        self.reformulating = asyncio.Event()

    async def __call__(self, messages, schema):
        from infra.llm.slotted import BACKGROUND, _priority

        title = next(m["content"] for m in messages if m["role"] == "user").splitlines()[0]
        self.asked.append((schema.__name__, title, _priority.get()))
        if schema is Reformulation:
            self.reformulating.set()
        if _priority.get() == BACKGROUND:
            await asyncio.wait_for(self.reformulating.wait(), timeout=10)
        return self.oracle(messages, schema)


def test_calls_carry_their_chains_rounds_ahead_and_summaries_nobody_waits_for_are_background(store, embedder):
    from infra.llm.slotted import BACKGROUND

    def oracle() -> Oracle:
        return Oracle({"photosystem II": "interesting", "Sun leaves": "answers"}, sections=["Methods"],
                      query="leaf energy budget canopy")

    # FOREST answers, PHOTO is only interesting: one dive (PHOTO), FOREST's summary is read by nothing; with
    # min_papers=2 the dive may bring the second paper, so a reformulation can only follow it (it does not:
    # the dive's chunks are unrelated) and PHOTO's chain is dive + reformulation long
    options = {"vector_k": 3, "max_deep_dives": 1, "min_papers": 2}  # PHOTO's Methods chunk is left to read
    fn = ChainOrder(oracle())
    llm = FunctionLLM(fn)
    llm.queues_calls = True
    cov = forage(ForageStep(settings(**options), store, embedder, llm))
    rounds = [(schema, title.removeprefix("Title: ").removeprefix("Requirement: ")[:30], priority)
              for schema, title, priority in fn.asked]
    assert rounds[0][0] == "BatchVerdict" and rounds[0][2] == -8  # judge, then dive (4) and reformulation (3)
    by_call = {(schema, title): priority for schema, title, priority in rounds}
    assert by_call[("DocumentGist", "Light Reactions of Photosynthe")] == -7  # the dive's summary: 4 + 3 ahead
    assert by_call[("DocumentGist", "Forest Canopy Ecology")] == BACKGROUND
    chain = [(schema, priority) for schema, _, priority in rounds if schema not in ("DocumentGist", "BatchVerdict")]
    assert chain[:4] == [("RelevanceGate", -6), ("SectionChoice", -5), ("DeepDiveBatchVerdict", -4),
                         ("Reformulation", -3)]  # the dive judges the Methods chunk, unrelated: reformulate
    # the reformulation was asked while FOREST's background summary was still waiting
    assert fn.reformulating.is_set()
    # the same calls and decisions as one after another
    one = FunctionLLM(oracle())
    alone = forage(ForageStep(settings(**options), store, embedder, one))
    assert sorted(llm.schemas_asked()) == sorted(one.schemas_asked())
    assert decisions(cov) == decisions(alone)
    assert {e.doc_id: e.summary for e in cov.evidence} == {e.doc_id: e.summary for e in alone.evidence}


def test_a_summary_being_made_is_waited_for_not_asked_again(store, embedder):
    from actors.steps.forage.ledger import Iteration

    gists: list[str] = []
    release = asyncio.Event()

    async def fn(messages, schema):
        gists.append(messages[-1]["content"].splitlines()[0])
        await asyncio.wait_for(release.wait(), timeout=10)  # both steps ask while the first call is out
        return Oracle()(messages, schema)

    llm = FunctionLLM(fn)
    llm.queues_calls = True
    step = ForageStep(settings(), store, embedder, llm)
    step._bind(REQ)

    async def two_steps_at_once() -> None:
        it = Iteration(1)
        first = asyncio.ensure_future(step.summaries.summary(REQ, PHOTO[0].doc_id, it))
        second = asyncio.ensure_future(step.summaries.summary(REQ, PHOTO[0].doc_id, it))
        await asyncio.sleep(0)  # one turn of the loop: both run to their first wait, the second finds it being made
        release.set()
        await asyncio.gather(first, second)

    asyncio.run(two_steps_at_once())
    assert gists == ["Title: Light Reactions of Photosynthesis"]
    assert step.summaries.done[PHOTO[0].doc_id] == "A study titled Light Reactions of Photosynthesis."


def test_batch_schema_asks_for_one_verdict_per_passage(store, embedder):
    llm = FunctionLLM(Oracle({"split water": "answers"}))
    forage(ForageStep(settings(vector_k=N_BODY_CHUNKS, judge_batch=6), store, embedder, llm))
    sizes = [(len(passages(c.messages)), c.json_schema["properties"]["verdicts"]["minItems"])
             for c in llm.calls_log if c.schema == "BatchVerdict"]
    assert sizes == [(6, 6), (N_BODY_CHUNKS - 6, N_BODY_CHUNKS - 6)]  # a constrained model writes one per passage


# -- the relevance check: a judgment never stands alone ------------------------------------------------------
class YesMan(Oracle):
    """A weak judge: every passage answers, with a method (what the embedded 135M model often says)."""

    def judge(self, passage: str, deep: bool) -> dict:
        return {"tag": "answers", "kind": "method", "motive": "It answers."}


UNANSWERABLE = Requirement(id="R1", text="What boiling point does liquid nitrogen have at sea-level pressure?")


def forage_req(step: ForageStep, requirement: Requirement):
    return asyncio.run(step.forage(ForageRequest(run_id=RUN, iteration=1, requirement=requirement)))


def test_a_yes_man_judge_cannot_cover_a_requirement_the_library_does_not_answer(store, embedder):
    """Without the check every 'answers' counts (coverage 1.0 on a question nothing in the store is about);
    with it the passages far from the requirement are never shown to the judge and count for nothing."""
    unchecked = forage_req(ForageStep(settings(relevance_check=False, vector_k=N_BODY_CHUNKS), store, embedder,
                                      FunctionLLM(YesMan())), UNANSWERABLE)
    assert unchecked.coverage == 1.0 and unchecked.overruled == 0  # the judge's word alone: today's failure

    emit = RecordingEmit(RUN)
    llm = FunctionLLM(YesMan())
    cov = forage_req(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder, llm,
                                emit=emit), UNANSWERABLE)
    assert cov.coverage == 0.0 and cov.answering_papers == 0 and cov.evidence == ()
    assert cov.judgements and all(j.tag == "unrelated" and j.relevance < 0.33 for j in cov.judgements)
    assert all(j.motive.startswith("not shown to the judge: similarity") for j in cov.judgements)
    assert "BatchVerdict" not in llm.schemas_asked()  # off-topic passages cost no LLM call
    (checked,) = [e.payload for e in emit.events if e.kind == "checked"]
    assert len(checked["off_topic"]) == len(cov.judgements) and checked["overruled"] == []


def test_the_check_keeps_the_answer_that_is_on_topic_and_overrules_the_rest(store, embedder):
    """The same yes-man judge on the photosynthesis requirement: the light-reaction passage is confirmed and
    comes first; a passage near the topic but far from an answer counts as interesting (the judge's tag kept
    beside it); the sourdough passages are never shown to the judge."""
    emit = RecordingEmit(RUN)
    llm = FunctionLLM(YesMan())
    cov = forage(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder, llm, emit=emit))
    assert cov.coverage == 1.0
    by_id = {j.chunk_id: j for j in cov.judgements}
    assert by_id[cid(PHOTO, 2)].tag == "answers" and by_id[cid(PHOTO, 2)].model_tag is None
    assert by_id[cid(PHOTO, 2)].confirmed is True  # its similarity and the requirement's words it holds
    assert cov.evidence[0].doc_id == PHOTO[0].doc_id and cov.evidence[0].chunk_ids[0] == cid(PHOTO, 2)
    overruled = [j for j in cov.judgements if j.model_tag == "answers"]
    assert cid(FOREST, 0) in {j.chunk_id for j in overruled} and all(j.tag == "interesting" for j in overruled)
    assert all(0.33 <= j.relevance < 0.43 for j in overruled) and cov.overruled == len(overruled)
    cited = {c for e in cov.evidence for c in e.chunk_ids}
    assert cited and not cited & {j.chunk_id for j in overruled}  # below the answer floor: recorded, not cited
    assert by_id[cid(BREAD, 0)].tag == "unrelated" and by_id[cid(BREAD, 0)].model_tag is None
    shown = sum(len(passages(c.messages)) for c in llm.calls_log if c.schema == "BatchVerdict")
    assert shown == sum(1 for j in cov.judgements if not j.motive.startswith("not shown"))
    payloads = [e.payload for e in emit.events if e.kind == "checked"]
    assert sum(len(p["overruled"]) for p in payloads) == len(overruled)
    coverage_event = next(e.payload for e in emit.events if e.kind == "coverage")
    assert coverage_event["overruled"] == len(overruled)


ON_TOPIC_UNANSWERED = Requirement(id="R1", text="How do leaves protect photosystem II from damage by excess light?")


def test_on_topic_answers_that_retrieval_signals_do_not_confirm_count_for_nothing(store, embedder):
    """The library is about photosynthesis but says nothing of photoprotection: the yes-man judge calls passages
    answers that are close enough to pass the answer floor. Retrieval signals (similarity plus the requirement's
    words the passage holds) confirm none of them, so coverage is 0.5 (related, no answer), no paper answers, and
    each unconfirmed answer is recorded beside the judge's tag; without the confirmation it was 1.0."""
    unconfirmed_off = forage_req(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS,
                                                     answer_confirmation=0), store, embedder,
                                            FunctionLLM(YesMan())), ON_TOPIC_UNANSWERED)
    assert unconfirmed_off.coverage == 1.0 and unconfirmed_off.answering_papers >= 1  # the floor alone

    emit = RecordingEmit(RUN)
    cov = forage_req(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder,
                                FunctionLLM(YesMan()), emit=emit), ON_TOPIC_UNANSWERED)
    answers = [j for j in cov.judgements if j.tag == "answers"]
    assert answers and all(j.confirmed is False and j.relevance >= 0.43 for j in answers)
    assert cov.coverage == 0.5 and cov.answering_papers == 0 and cov.unconfirmed == len(answers)
    assert cov.evidence and all(e.tag == "interesting" for e in cov.evidence)  # shown, not presented as answers
    recorded = [u["chunk_id"] for e in emit.events if e.kind == "checked" for u in e.payload["unconfirmed"]]
    assert sorted(recorded) == sorted(j.chunk_id for j in answers)
    coverage_event = next(e.payload for e in emit.events if e.kind == "coverage")
    assert coverage_event["unconfirmed"] == len(answers) and coverage_event["answering_papers"] == 0


def test_an_anchored_requirement_is_confirmed_on_the_words_of_its_own_question(store, embedder):
    """Seen in `forage demo`: "How is it evaluated? (about: <the query's first question>)" was covered 1.0 by a
    sentence on heparin's risks, which holds every word of the subject and none of the question."""
    from actors.steps.plan.requirements import anchored

    query = ("What complications are associated with thromboprophylaxis in trauma patients, and how is it "
             "evaluated?")
    req = Requirement(id="R2", text=anchored("How is it evaluated?", query))
    step = ForageStep(settings(relevance_check=True), store, embedder, FunctionLLM(Oracle({})))
    on_subject = "Complications of thromboprophylaxis in trauma patients include bleeding."
    assert not step.check.confirms(req, on_subject, relevance=0.7)
    assert step.check.confirms(req, "Thromboprophylaxis was evaluated by duplex ultrasound in trauma patients.", 0.7)
    # the same words asked without brackets count whole
    plain = Requirement(id="R1", text="What complications are associated with thromboprophylaxis in trauma patients?")
    assert step.check.confirms(plain, on_subject, relevance=0.7)


def test_a_reranker_signal_is_not_held_to_the_embedding_confirmation(store, embedder):
    """The confirmation floor is calibrated for embedding similarity; a configured reranker's scores have their own
    scale and floors, so its confirmed answers count as before (tested with the table signal below)."""
    signal = PhraseRelevance({"split water": 0.9})
    cov = forage(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder,
                            FunctionLLM(YesMan()), relevance=signal))
    assert cov.coverage == 1.0 and all(j.confirmed is None for j in cov.judgements)


class PhraseRelevance:
    """A relevance signal given by a table (what a reranker would say): phrase -> score, else 0."""

    name = "phrases"
    floors = (0.6, 0.2)
    confirmation = None  # its own scale, as a reranker's
    curve = None  # not calibrated
    prior = None  # nor its coverage

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.asked: list[str] = []

    def score(self, query, chunks):
        self.asked.append(query)
        return [max((v for p, v in self.table.items() if p in c.text), default=0.0) for c in chunks]


def test_a_configured_signal_orders_and_filters_what_the_judge_sees(store, embedder):
    signal = PhraseRelevance({"split water": 0.9, "Calvin cycle": 0.4, "Sun leaves": 0.3})
    llm = FunctionLLM(YesMan())
    step = ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder, llm,
                      relevance=signal)
    cov = forage(step)
    assert signal.asked and set(signal.asked) == {REQ.text}
    shown = [text for c in llm.calls_log if c.schema == "BatchVerdict" for _, text in passages(c.messages)]
    assert len(shown) == 3 and "split water" in shown[0] and "Calvin cycle" in shown[1]  # closest first
    by_id = {j.chunk_id: j for j in cov.judgements}
    assert by_id[cid(PHOTO, 2)].tag == "answers" and by_id[cid(PHOTO, 3)].model_tag == "answers"
    assert by_id[cid(PHOTO, 3)].tag == "interesting" and by_id[cid(FOREST, 2)].tag == "interesting"
    assert cov.coverage == 1.0 and cov.overruled == 2 and cov.answering_papers == 1


def test_a_method_or_result_from_an_introduction_counts_as_background(store, embedder):
    """The judge's kind is checked too, by where the passage sits: an introduction says what others did and why
    the paper exists, so its 'method' is background and alone gives 0.75, not full coverage."""
    signal = PhraseRelevance({"leaves use the energy of sunlight": 0.9})  # only PHOTO's introduction is close
    emit = RecordingEmit(RUN)
    cov = forage(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder,
                            FunctionLLM(YesMan()), emit=emit, relevance=signal))
    (intro,) = [j for j in cov.judgements if j.tag == "answers"]
    assert intro.chunk_id == cid(PHOTO, 0) and intro.kind == "background" and intro.model_kind == "method"
    assert cov.coverage == 0.75 and cov.answering_papers == 1
    (checked,) = [e.payload for e in emit.events if e.kind == "checked" and e.payload["kinds_overruled"]]
    assert checked["kinds_overruled"] == [{"chunk_id": cid(PHOTO, 0), "model_kind": "method", "kind": "background",
                                           "section": "Introduction"}]
    unchecked = forage(ForageStep(settings(relevance_check=False, vector_k=N_BODY_CHUNKS), store, embedder,
                                  FunctionLLM(YesMan()), relevance=signal))
    assert unchecked.coverage == 1.0  # the judge's word alone


def test_background_sections_are_told_by_their_top_heading():
    from actors.steps.forage.judging import background_section

    for path in ("Introduction", "1 Introduction > 1.2 Contributions", "2. Related Work", "II. BACKGROUND",
                 "Motivation and goals", "3.1 Prior work on tracing"):
        assert background_section(path), path
    for path in ("Methods", "Results > Background noise", "Abstract", "Discussion", "Introductory remarks", ""):
        assert not background_section(path), path


def test_an_interesting_passage_stands_only_as_close_to_the_requirement_as_an_answer_must_be(store, embedder):
    """A weak judge calls a passage near the topic interesting: below the answer floor (the canopy's sunlight, for a
    requirement on how chlorophyll converts light) it earns no coverage and is not cited, though it is recorded and
    still sends the Forager into its paper; at or above the floor (sun leaves converting absorbed light) it stands
    as related evidence (coverage 0.5)."""
    far_llm = FunctionLLM(Oracle({"Forest canopies shape": "interesting"}))
    far = ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder, far_llm)
    cov = forage(far)
    (weak,) = [j for j in cov.judgements if j.tag == "interesting"]
    assert weak.chunk_id == cid(FOREST, 0) and 0.33 <= weak.relevance < 0.43
    assert cov.coverage == 0.0 and cov.evidence == ()
    assert "DocumentGist" not in far_llm.schemas_asked()  # no summary of a paper nothing stands for
    assert FOREST[0].doc_id in far.ledger.deep_dive_queue(far.dives.dived)  # the verdict still steers where to read

    near_llm = FunctionLLM(Oracle({"Sun leaves": "interesting"}))
    near = forage(ForageStep(settings(relevance_check=True, vector_k=N_BODY_CHUNKS), store, embedder, near_llm))
    (related,) = [j for j in near.judgements if j.tag == "interesting"]
    assert related.chunk_id == cid(FOREST, 2) and related.relevance >= 0.43
    assert near.coverage == 0.5 and [e.chunk_ids for e in near.evidence] == [(cid(FOREST, 2),)]
    assert "DocumentGist" in near_llm.schemas_asked()

    unchecked = forage(ForageStep(settings(vector_k=N_BODY_CHUNKS), store, embedder,
                                  FunctionLLM(Oracle({"Forest canopies shape": "interesting"}))))
    assert unchecked.coverage == 0.5  # the judge's word alone (no check): as before


def test_evidence_the_judge_did_not_confirm_is_ordered_by_retrieval_not_by_the_judges_labels(own_store, embedder):
    """A weak judge calls the canopy paper's sun-leaves passage an answer (the retrieval signals do not confirm
    it) and the light-reaction and fluorescence passages only interesting. Its labels used to put the unconfirmed
    "answer" first; now the documents follow the store's own hybrid search for the requirement over them (the
    signal measured on SciFact), which is neither the judge's order nor the re-embedded passages' similarity."""
    store = own_store
    add(store, embedder, LATE)
    verdicts = {"Sun leaves": ("answers", "result"), "split water": "interesting", "Excited chlorophyll": "interesting"}
    step = ForageStep(settings(relevance_check=True, vector_k=20, bm25_k=20), store, embedder,
                      FunctionLLM(Oracle(verdicts)))
    cov = forage(step)
    by_id = {j.chunk_id: j for j in cov.judgements}
    sun = by_id[cid(FOREST, 2)]
    assert sun.tag == "answers" and sun.confirmed is False  # the judge's word, not confirmed
    assert cov.coverage == 0.5 and {e.tag for e in cov.evidence} == {"interesting"}
    cited = [e.doc_id for e in cov.evidence]
    assert set(cited) == {PHOTO[0].doc_id, FOREST[0].doc_id, LATE[0].doc_id}
    # the store's hybrid search for the requirement over the cited documents, each at its best chunk
    vector = embedder.embed([REQ.text])[0]
    hits = store.hybrid(REQ.text, vector, 20, Settings.load().store.hybrid_alpha, ChunkFilter(doc_ids=tuple(cited)))
    assert cited == list(dict.fromkeys(h.chunk.doc_id for h in hits))
    assert cited[0] != FOREST[0].doc_id  # not the judge's unconfirmed answer first
    by_similarity = sorted(cited, key=lambda d: -max(j.relevance for j in cov.judgements if j.doc_id == d))
    assert cited != by_similarity  # nor the re-embedded passages' similarity

    # without a query vector (no vector search configured) BM25 alone ranks them
    lexical = forage(ForageStep(settings(relevance_check=True, vector_k=0, bm25_k=20), store, embedder,
                                FunctionLLM(Oracle(verdicts))))
    cited = [e.doc_id for e in lexical.evidence]
    assert len(cited) >= 2
    hits = store.bm25(REQ.text, 20, ChunkFilter(doc_ids=tuple(cited)))
    assert cited == list(dict.fromkeys(h.chunk.doc_id for h in hits))


class HybridFails:
    """The store, but its hybrid search fails (a store read error): retrieval here uses BM25 and vector search
    (``settings``: no paper stage), so only the ranking of the evidence meets the failure."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def hybrid(self, *args, **kwargs):
        raise StoreError("LanceDB read failed (hybrid search): disk I/O error")


def test_a_failed_evidence_ranking_is_a_failed_step_not_a_failed_requirement(store, embedder):
    verdicts = {"Sun leaves": ("answers", "result"), "split water": "interesting"}
    emit = RecordingEmit(RUN)
    step = ForageStep(settings(relevance_check=True, vector_k=20, bm25_k=20), HybridFails(store), embedder,
                      FunctionLLM(Oracle(verdicts)), emit=emit)
    cov = forage(step)
    assert cov.status == "ok" and cov.coverage == 0.5
    assert {e.doc_id for e in cov.evidence} == {PHOTO[0].doc_id, FOREST[0].doc_id}  # nothing lost, order unranked
    assert any("rank evidence" in f and "disk I/O error" in f for f in cov.failed_steps)
    assert any(e.kind == "step_failed" and e.payload.get("step") == "rank_evidence" for e in emit.events)


class RecordingGate:
    """The CPU gate's shape (``cpu(order)`` → an async context manager) recording each place held, and checking
    that no LLM call is made while this step holds one."""

    def __init__(self) -> None:
        self.orders: list[tuple[float, ...]] = []
        self.held = 0
        self.calls_while_held = 0
        self.threads_without_place = 0
        self.places_before_first_call: int | None = None

    @contextlib.asynccontextmanager
    async def __call__(self, order: tuple[float, ...]):
        self.orders.append(order)
        self.held += 1
        try:
            yield
        finally:
            self.held -= 1

    def llm(self, oracle: Oracle) -> FunctionLLM:
        def answer(messages, schema):
            self.calls_while_held += self.held > 0
            if self.places_before_first_call is None:
                self.places_before_first_call = len(self.orders)
            return oracle(messages, schema)
        return FunctionLLM(answer)


def test_cpu_steps_hold_one_gate_place_up_to_each_llm_call_and_none_during_it(store, embedder, monkeypatch):
    gate = RecordingGate()
    to_thread = asyncio.to_thread

    async def counted(fn, *args):
        gate.threads_without_place += gate.held == 0
        return await to_thread(fn, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    oracle = Oracle({"photosystem II": "interesting", "Sun leaves": "answers"}, sections=["Methods"],
                    query="leaf energy budget canopy")
    # a dive into PHOTO (its Methods chunk left to read), then a reformulation: every kind of CPU step
    options = {"vector_k": 3, "max_deep_dives": 1, "min_papers": 2}
    llm = gate.llm(oracle)
    cov = forage(ForageStep(settings(**options), store, embedder, llm, cpu=gate))
    assert "SectionChoice" in llm.schemas_asked() and "Reformulation" in llm.schemas_asked()
    assert gate.calls_while_held == 0  # never a place idle for an LLM call's length
    assert gate.threads_without_place == 0  # every store read and embedding on a place
    assert gate.places_before_first_call == 1  # retrieval and the relevance check up to the first call: one place
    # each later place asks to go before Foragers that have held fewer this iteration, same start time throughout
    assert [o[0] for o in gate.orders] == [-n for n in range(len(gate.orders))]
    assert len({o[1] for o in gate.orders}) == 1
    # and the same decisions as without a gate
    alone = forage(ForageStep(settings(**options), store, embedder, FunctionLLM(oracle)))
    assert decisions(cov) == decisions(alone) and cov.llm_calls == alone.llm_calls


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_store_signal_checks_a_passage_without_embedding_it(tmp_path, precision):
    """With the store's own score as the signal (the default with MiniLM and LanceDB), a check embeds nothing but
    the requirement: the passages' scores are read from their stored vectors. This store holds each chunk text's own
    embedding (no context line, no windows), so the scores are the text signal's and so are the verdicts. Under
    either precision (the stored vectors come from batches padded otherwise than the check's, so the scores agree
    within :func:`score_tolerance`, not to the bit); the passages sit clear of every floor by more than that, so no
    verdict can flip on a host of the other kind."""
    embedder = shared_minilm(precision)
    store = filled_store(tmp_path / "store", embedder)
    tolerance = score_tolerance(embedder)
    asked: list[str] = []

    class Counting:
        def __getattr__(self, name):
            return getattr(embedder, name)

        def embed(self, texts):
            asked.extend(texts)
            return embedder.embed(texts)

    counting = Counting()
    cfg = settings(relevance_check=True, vector_k=N_BODY_CHUNKS)
    signal = StoreSimilarity(store, counting, cfg.similarity_floors("text"), cfg.answer_confirmation("text"))
    via_store = forage(ForageStep(cfg, store, counting, FunctionLLM(YesMan()), relevance=signal))
    assert asked and not {c.text for _, chunks in ALL for c in chunks} & set(asked)
    via_text = forage(ForageStep(cfg, store, embedder, FunctionLLM(YesMan())))

    def verdicts(cov):
        return {j.chunk_id: (j.tag, j.confirmed) for j in cov.judgements}

    def scores(cov):
        return {j.chunk_id: j.relevance for j in cov.judgements}

    assert verdicts(via_store) == verdicts(via_text)
    stored, fresh = scores(via_store), scores(via_text)
    assert all(abs(stored[c] - fresh[c]) <= tolerance for c in fresh), (stored, fresh)
    floors = [*cfg.similarity_floors("text"), cfg.answer_confirmation("text")]
    assert_clear_of(fresh.values(), floors, tolerance)
    assert via_store.coverage == pytest.approx(via_text.coverage, abs=tolerance)


def test_a_calibrated_judges_rates_change_what_the_check_credits(store, embedder):
    """The same verdicts, the same signal and calibration curve: told the judge is unreliable (the default for an
    uncalibrated model) the check confirms none of its on-topic answers (coverage 0.5, today's floors); told its
    'answers' is right 19 times in 20 and wrong 1 time in 20 (a calibrated judge), the floors move down by
    log(0.95 / 0.05) / slope and the same answers count (coverage 1.0, answering papers)."""
    from infra.rerank import EmbeddingSimilarity

    def step(**rates):
        cfg = settings(relevance_check=True, vector_k=N_BODY_CHUNKS, **rates)
        signal = EmbeddingSimilarity(embedder, cfg.similarity_floors("text"), cfg.answer_confirmation("text"),
                                     curve=(-8.0, 8.0, 0.0))
        return ForageStep(cfg, store, embedder, FunctionLLM(YesMan()), relevance=signal)

    unreliable = step()
    assert unreliable.check.credit.relief() == 0.0
    before = forage_req(unreliable, ON_TOPIC_UNANSWERED)
    assert before.coverage == 0.5 and before.answering_papers == 0 and before.unconfirmed > 0

    reliable = step(judge_tpr=0.95, judge_fpr=0.05)
    assert reliable.check.credit.relief() == pytest.approx(math.log(19) / 8.0)
    after = forage_req(reliable, ON_TOPIC_UNANSWERED)
    assert after.coverage == 1.0 and after.answering_papers >= 1
    confirmed = {j.chunk_id for j in after.judgements if j.tag == "answers" and j.confirmed}
    assert confirmed and confirmed <= {j.chunk_id for j in before.judgements if j.tag == "answers"}
