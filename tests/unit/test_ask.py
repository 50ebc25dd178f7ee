"""`forage ask`: intent, retrieval from the store, a cited answer or an honest 'not enough evidence'."""

from __future__ import annotations

import asyncio

from test_write_step import C, embedder, store  # noqa: F401  (fixtures)
from typer.testing import CliRunner

from actors.steps.ask import INSUFFICIENT, AskStep
from actors.steps.schemas import AskAnswer, AskIntent
from infra.llm.fakes import FunctionLLM, ScriptedLLM

QUESTION = "How is carbon dioxide fixed into sugars?"


def ask(store, embedder, llm, question=QUESTION):
    return asyncio.run(AskStep(store, embedder, llm).ask(question))


def number_of(prompt: str, doc) -> int:
    """The number the answer prompt gave to the first passage of ``doc``."""
    for line in prompt.splitlines():
        if line.startswith("[") and doc[0].title in line:
            return int(line[1:line.index("]")])
    raise AssertionError(f"{doc[0].title} not among the passages")


def test_a_question_gets_a_cited_answer_from_the_store(store, embedder):
    def model(messages, schema):
        if schema is AskIntent:
            return {"intent": "question", "reply": ""}
        n = number_of(messages[-1]["content"], C)  # the answer cites the Calvin-cycle passage, wherever it ranks
        return {"sufficient": True, "sentences": [
            {"sentence": "The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars.", "sources": [n, 42]},
            {"sentence": "An unsupported claim without any passage.", "sources": []}]}

    llm = FunctionLLM(model)
    result = ask(store, embedder, llm)
    assert llm.schemas_asked() == ["AskIntent", "AskAnswer"]
    assert result.kind == "answer" and result.llm_calls == 2
    assert result.text == "The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars [1]."
    assert [(c.n, c.doc_id) for c in result.cited] == [(1, C[0].doc_id)]
    assert result.removed_citations == 1
    assert "fix carbon dioxide into sugars" in store.get_chunk(result.cited[0].chunk_id).text


def test_chit_chat_is_answered_without_retrieval(store, embedder):
    llm = ScriptedLLM({AskIntent: [{"intent": "chit_chat", "reply": "Hello there, happy to help with your papers."}]})
    result = ask(store, embedder, llm, "hi, how are you?")
    assert result.kind == "chit_chat" and result.text == "Hello there, happy to help with your papers."
    assert llm.schemas_asked() == ["AskIntent"] and result.cited == []


def test_insufficient_evidence_is_said_instead_of_answering(store, embedder):
    llm = ScriptedLLM({AskIntent: [{"intent": "question", "reply": ""}],
                       AskAnswer: [{"sufficient": False, "sentences": [
                           {"sentence": "Quantum gravity is probably involved somehow.", "sources": [1]}]}]})
    result = ask(store, embedder, llm, "What is the mass of the Higgs boson?")
    assert result.kind == "insufficient" and result.text == INSUFFICIENT and result.cited == []
    prompt = llm.calls_log[1].last_user_message
    assert "<<<QUESTION\nWhat is the mass of the Higgs boson?\nQUESTION>>>" in prompt and "<<<PASSAGE" in prompt


def test_an_answer_with_no_valid_citation_is_insufficient(store, embedder):
    llm = ScriptedLLM({AskIntent: [{"intent": "question", "reply": ""}],
                       AskAnswer: [{"sufficient": True, "sentences": [
                           {"sentence": "The Calvin cycle fixes carbon dioxide into sugars.", "sources": [77]}]}]})
    result = ask(store, embedder, llm)
    assert result.kind == "insufficient" and result.removed_citations == 1


def test_cli_ask_prints_the_answer_and_its_sources(store, embedder, monkeypatch, tmp_path):
    import infra.llm
    from gateway.cli import app

    llm = ScriptedLLM({AskIntent: [{"intent": "question", "reply": ""}],
                       AskAnswer: [{"sufficient": True, "sentences": [
                           {"sentence": "The passages describe how leaves capture light energy.",
                            "sources": [1, 2]}]}]})
    monkeypatch.setattr(infra.llm, "build_llm", lambda settings: llm)
    result = CliRunner().invoke(app, ["ask", QUESTION, "--store", str(store.path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "The passages describe how leaves capture light energy [1][2]." in result.output
    assert "[1] " in result.output and "[2] " in result.output and "(chunk " in result.output
    missing = CliRunner().invoke(app, ["ask", QUESTION, "--store", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no store at" in missing.output
