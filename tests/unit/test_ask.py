"""`forage ask`: intent, retrieval from the store, a cited answer or an honest 'not enough evidence'."""

from __future__ import annotations

import asyncio
import re

import pytest
from typer.testing import CliRunner

from actors.steps.tools.ask import INSUFFICIENT, AskStep
from actors.steps.schemas import AskAnswer, AskIntent
from infra.llm.fakes import FunctionLLM, ScriptedLLM
from infra.rerank import EmbeddingSimilarity
from tests.factories import make_doc
from tests.leaves import C, leaf_store

QUESTION = "How is carbon dioxide fixed into sugars?"


@pytest.fixture(scope="module")
def embedder(minilm):
    return minilm


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    """The three leaf papers (tests/leaves.py): asking only reads the store."""
    return leaf_store(tmp_path_factory.mktemp("ask") / "store", embedder)


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
    assert llm.schemas_asked() == ["AskAnswer"]  # a question naming things is never routed as chit-chat
    assert result.kind == "answer" and result.llm_calls == 1
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
    assert result.kind == "insufficient" and result.text.startswith(INSUFFICIENT) and result.cited == []
    assert re.search(r"Searched: \d passage\(s\) of the store for the question\.$", result.text)
    prompt = llm.calls_log[0].last_user_message
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
    # the relevance check (on by default) leaves only the Calvin-cycle passage: the citation of [2] goes
    assert "The passages describe how leaves capture light energy [1]." in result.output
    assert "[1] The Calvin Cycle — Results (chunk " in result.output and "[2] " not in result.output
    missing = CliRunner().invoke(app, ["ask", QUESTION, "--store", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no store at" in missing.output


def test_cli_ask_json_and_exit_3_when_it_abstains(store, monkeypatch):
    """--json prints one object (kind, text, cited); "not enough evidence" exits 3, so a script can tell it
    from an answer (exit 0)."""
    import json

    import infra.llm
    from gateway.cli import app

    llm = ScriptedLLM({AskAnswer: [{"sufficient": True, "sentences": [
                           {"sentence": "The Calvin cycle fixes carbon dioxide into sugars.", "sources": [1]}]},
                                   {"sufficient": False, "sentences": []}]})
    monkeypatch.setattr(infra.llm, "build_llm", lambda settings: llm)
    answered = CliRunner().invoke(app, ["ask", QUESTION, "--store", str(store.path), "--json"])
    assert answered.exit_code == 0, answered.output
    data = json.loads(answered.stdout)
    assert data["kind"] == "answer" and data["text"] == "The Calvin cycle fixes carbon dioxide into sugars [1]."
    assert [(c["n"], c["doc_id"]) for c in data["cited"]] == [(1, C[0].doc_id)]
    assert "fix carbon dioxide into sugars" in store.get_chunk(data["cited"][0]["chunk_id"]).text
    abstained = CliRunner().invoke(app, ["ask", QUESTION, "--store", str(store.path), "--json"])
    assert abstained.exit_code == 3, abstained.output
    data = json.loads(abstained.stdout)
    assert data["kind"] == "insufficient" and data["text"].startswith(INSUFFICIENT) and data["cited"] == []
    assert "exit" in CliRunner().invoke(app, ["ask", "--help"], env={"COLUMNS": "200"}).output.lower()


def test_a_weak_model_never_turns_a_question_into_a_greeting(store, embedder):
    """A model that calls everything chit-chat and fails every answer: the question is still retrieved for,
    and the passages close enough to it answer in quotes, with citations."""
    def weak(messages, schema):
        if schema is AskIntent:
            return {"intent": "chit_chat", "reply": "Hello! Ask me a question about the papers in your library."}
        return "Hello!"  # never valid JSON: the answer call fails after its retries

    llm = FunctionLLM(weak)
    result = asyncio.run(AskStep(store, embedder, llm, relevance=EmbeddingSimilarity(embedder, (0.3, 0.1))).ask(QUESTION))
    assert "AskIntent" not in llm.schemas_asked()
    assert result.kind == "answer" and result.text.startswith("Quoted from the library: “")
    assert result.cited and result.cited[0].doc_id == C[0].doc_id and "[1]." in result.text
    assert "fix carbon dioxide into sugars" in result.text
    far = asyncio.run(AskStep(store, embedder, llm, relevance=EmbeddingSimilarity(embedder, (0.3, 0.1))).ask("What is the mass of the Higgs boson?"))
    assert far.kind == "insufficient" and "0 close enough to it" in far.text


def test_the_embedded_model_quotes_without_an_answer_call(store, embedder):
    llm = ScriptedLLM([])
    result = asyncio.run(AskStep(store, embedder, llm, relevance=EmbeddingSimilarity(embedder, (0.3, 0.1)),
                                     extractive=True).ask(QUESTION))
    assert result.kind == "answer" and result.llm_calls == 0 and llm.schemas_asked() == []
    assert result.cited[0].doc_id == C[0].doc_id


# ---------------------------------------------------------------- --library: only that folder's papers

CALVIN = "The Calvin cycle uses ATP and NADPH to fix carbon dioxide into sugars in the chloroplast stroma."


def library_doc(name: str, key: str, title: str, text: str, year: int | None = None):
    """A stored paper with one chunk (tests/factories.py's ``make_doc``, under the given key)."""
    record, chunks = make_doc(name, title, [("Results", text)], year=year)
    return record.model_copy(update={"key": key}), chunks


@pytest.fixture
def lab(tmp_path, embedder):
    """A store holding papers from the folder ``lab`` (one in a subfolder), from a sibling folder
    ``lab2`` whose name shares the prefix, and a downloaded paper (a DOI key): all on the same topic."""
    from actors.steps.search.library import file_key
    from infra.store.lancedb import LanceStore

    for folder in ("lab/sub", "lab2", "empty"):
        (tmp_path / folder).mkdir(parents=True)
    docs = [library_doc("lab-a", file_key(tmp_path / "lab" / "calvin.pdf"), "Lab Calvin Paper", CALVIN, 2020),
            library_doc("lab-b", file_key(tmp_path / "lab" / "sub" / "fix.pdf"), "Lab Carbon Fixation Notes",
                        "Carbon dioxide fixation into sugars needs ATP and NADPH from the light reactions."),
            library_doc("lab2", file_key(tmp_path / "lab2" / "calvin.pdf"), "Sibling Folder Paper",
                        "Carbon dioxide is fixed into sugars by the Calvin cycle using ATP and NADPH."),
            library_doc("doi", "doi:10.1000/calvin", "Downloaded Paper",
                        "How carbon dioxide is fixed into sugars: the Calvin cycle, ATP and NADPH.")]
    store = LanceStore(tmp_path / "store", dim=384)
    for record, chunks in docs:
        store.upsert_document(record, chunks, embedder.embed([c.text for c in chunks]))
    return store


def passage_titles(prompt: str) -> set[str]:
    return {line.split("] ", 1)[1].rsplit(" — ", 1)[0] for line in prompt.splitlines() if re.match(r"\[\d+\] ", line)}


def answering_model(titles: list[set[str]]):
    """A model that takes the question as a question and answers from passage [1], recording the titles
    of the passages each answer call was shown."""
    def model(messages, schema):
        if schema is AskIntent:
            return {"intent": "question", "reply": ""}
        titles.append(passage_titles(messages[-1]["content"]))
        return {"sufficient": True,
                "sentences": [{"sentence": "The Calvin cycle fixes carbon dioxide.", "sources": [1]}]}

    return model


def test_library_limits_the_passages_to_that_folder(lab, embedder, tmp_path):
    from actors.steps.tools.ask import library_filter

    seen: list[set[str]] = []

    model = answering_model(seen)

    scope = library_filter(tmp_path / "lab")
    scoped = asyncio.run(AskStep(lab, embedder, FunctionLLM(model), scope=scope).ask(QUESTION))
    everything = asyncio.run(AskStep(lab, embedder, FunctionLLM(model)).ask(QUESTION))
    assert seen[0] == {"Lab Calvin Paper", "Lab Carbon Fixation Notes"}  # the subfolder too; not lab2, not the DOI
    assert seen[1] == {"Lab Calvin Paper", "Lab Carbon Fixation Notes", "Sibling Folder Paper", "Downloaded Paper"}
    assert scoped.kind == everything.kind == "answer"
    assert scoped.cited[0].title in {"Lab Calvin Paper", "Lab Carbon Fixation Notes"}
    assert scope.sources == (f"file:{(tmp_path / 'lab').resolve()}/",)


def test_cli_ask_library_answers_from_it_and_refuses_a_library_with_no_papers(lab, monkeypatch, tmp_path):
    import infra.llm
    from gateway.cli import app

    titles: list[set[str]] = []

    model = answering_model(titles)

    monkeypatch.setattr(infra.llm, "build_llm", lambda settings: FunctionLLM(model))
    monkeypatch.chdir(tmp_path)  # a relative --library is resolved like forage research's
    result = CliRunner().invoke(app, ["ask", QUESTION, "--library", "lab", "--store", str(lab.path)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "The Calvin cycle fixes carbon dioxide [1]." in result.output
    assert titles == [{"Lab Calvin Paper", "Lab Carbon Fixation Notes"}]
    for folder in ("empty", "nowhere"):
        refused = CliRunner().invoke(app, ["ask", QUESTION, "--library", folder, "--store", str(lab.path)],
                                     env={"COLUMNS": "300"})
        assert refused.exit_code == 2 and "holds no documents from the library" in refused.output
        assert str((tmp_path / folder).resolve()) in " ".join(refused.output.split())
    assert len(titles) == 1  # refused before any model call


# ---------------------------------------------------------------- --run: one run's evidence, recorded with the run

def test_ask_run_answers_from_the_runs_documents_records_the_ask_and_forget_removes_it(tmp_path, embedder,
                                                                                          monkeypatch):
    """A finished run over the three leaf papers, and a fourth paper on the same topic stored later by
    something else: `forage ask --run` shows the model only the run's passages, cites them, appends the
    question and answer to the run's asks.jsonl (user-only); "not enough evidence" exits 3 and says what was
    searched; `forage forget` of the run removes its asks with the rest of the folder."""
    import json
    import stat

    import infra.llm
    from gateway.cli import app
    from gateway.forget import forget_run
    from tests.finished_run import RUN, make_run

    settings, run_dir = make_run(tmp_path)
    outside, chunks = library_doc("outside", "doi:10.1000/outside", "Outside Calvin Paper", CALVIN, 2021)
    from infra.store.lancedb import LanceStore

    LanceStore(tmp_path / "store", dim=384).upsert_document(outside, chunks, embedder.embed([c.text for c in chunks]))
    titles: list[set[str]] = []
    answering = answering_model(titles)
    calls = {"n": 0}

    def model(messages, schema):
        calls["n"] += 1
        if calls["n"] == 1:
            return answering(messages, schema)
        return {"sufficient": False, "sentences": []}

    monkeypatch.setattr(infra.llm, "build_llm", lambda s: FunctionLLM(model))
    runs = ["--runs-dir", str(settings.run.runs_dir)]
    answered = CliRunner().invoke(app, ["ask", "--run", RUN[:12], QUESTION, "--json", *runs])
    assert answered.exit_code == 0, answered.output
    data = json.loads(answered.stdout)
    assert data["kind"] == "answer" and data["text"] == "The Calvin cycle fixes carbon dioxide [1]."
    assert titles and "Outside Calvin Paper" not in set().union(*titles)  # only the run's documents
    assert titles[0] <= {"Light Reactions of Photosynthesis", "Notes on [Leaf] *Energy*", "The Calvin Cycle"}
    cited_doc = data["cited"][0]["doc_id"]
    sources = {s["doc_id"] for s in json.loads((run_dir / "run.json").read_text())["sources"]}
    assert cited_doc in sources

    abstained = CliRunner().invoke(app, ["ask", "--run", RUN, "How do sugars leave the chloroplast stroma?", *runs],
                                   env={"COLUMNS": "300"})
    assert abstained.exit_code == 3, abstained.output
    assert "The run's evidence does not hold enough" in abstained.output
    assert re.search(rf"Searched: \d passage\(s\) of run {RUN}'s 3 document\(s\) for the question",
                     " ".join(abstained.output.split()))

    asks = run_dir / "asks.jsonl"
    lines = [json.loads(line) for line in asks.read_text().splitlines()]
    assert [(a["question"], a["kind"]) for a in lines] == [
        (QUESTION, "answer"), ("How do sugars leave the chloroplast stroma?", "insufficient")]
    assert lines[0]["cited"] == data["cited"] and lines[0]["asked_at"]
    assert stat.S_IMODE(asks.stat().st_mode) == 0o600

    # `forage verify` checks the answer with the report: its passages are the run's, unchanged since cited
    verified = CliRunner().invoke(app, ["verify", RUN, *runs], env={"COLUMNS": "300"})
    assert verified.exit_code == 0, verified.output
    assert f"ask 1: [1] chunk {data['cited'][0]['chunk_id']}" in verified.output
    record = asks.read_text()
    tampered = json.loads(record.splitlines()[0])
    tampered["cited"][0].update(chunk_id=chunks[0].chunk_id, doc_id=outside.doc_id)  # a passage the run never read
    asks.write_text(json.dumps(tampered) + "\n" + record.split("\n", 1)[1])
    refused = CliRunner().invoke(app, ["verify", RUN, *runs], env={"COLUMNS": "300"})
    assert refused.exit_code == 1 and "not a document of this run" in refused.output
    asks.write_text(record)

    both = CliRunner().invoke(app, ["ask", "--run", RUN, "--library", str(tmp_path), QUESTION, *runs])
    assert both.exit_code == 2 and "not both" in both.output
    unknown = CliRunner().invoke(app, ["ask", "--run", "nosuchrun", QUESTION, *runs])
    assert unknown.exit_code == 2 and "no run 'nosuchrun'" in unknown.output
    assert len(asks.read_text().splitlines()) == 2  # refused asks are not recorded

    forget_run(settings, RUN)
    assert not asks.exists() and not run_dir.exists()
