"""A deterministic stand-in for the model in end-to-end tests, used through FunctionLLM.

It answers every schema the steps ask for from what is in the prompt: a passage that names an
answer keyword of its requirement "answers", one that names a topic keyword is "interesting".
Its behaviour is plain and checkable; nothing about the pipeline is faked — parsing, chunking,
embedding, retrieval, the actors and the citation check are all real.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

QUERY = "Anticoagulation after trauma, JIT compilers, and open relation extraction"  # planned as REQUIREMENTS
REQUIREMENTS = [
    "Complication rates of anticoagulant prophylaxis against venous thrombosis after injury",
    "How trace-based just-in-time compilers specialize types in dynamic languages",
    "Extraction of relation phrases from text without a predefined relation vocabulary",
]
# requirement text fragment -> (answer keywords, topic keywords); none of them occur in the requirement text
KEYWORDS = {
    "anticoagulant": (("heparin", "bleeding"), ("trauma", "embolism")),
    "just-in-time": (("tracemonkey", "trace tree"), ("javascript", "interpreter")),
    "relation phrases": (("reverb",), ("open information extraction", "textrunner")),
}
# The brain's verdicts are keyword rules, not meaning (its answer keywords never occur in the requirement), so a
# run whose coverage a test asserts counts the brain's answers without the retrieval-signal confirmation
# (forage.answer_confirmation 0; the confirmation is tested on its own in tests/unit/test_forage_step.py)
ANSWER_CONFIRMATION = 0.0
FAIL_ON = ""  # requirement fragment whose forager must fail (set by a test through a copy of this module)
KILL_ONCE: tuple[str, str] = ("", "")  # (fragment, marker file): that Forager's process is SIGKILLed at its
# first judgement while the marker file does not exist yet (it is created first, so the restart lives)
KILL_CONTEXT_ONCE: tuple[str, str] = ("", "")  # (title fragment, marker file): the Ingestor asked for chunk contexts
# of a paper whose title holds the fragment is SIGKILLed, once per marker file (contextual retrieval on)
RENDEZVOUS = ""  # name of a Ray actor all foragers must meet at before their first judgement
REPLAN: list[str] = []  # requirements proposed when the Orchestrator re-plans (none unless a test sets them)


class Rendezvous:
    """All foragers must arrive before any may judge: proves they run at the same time."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived: set[str] = set()
        self.event = asyncio.Event()

    async def arrive(self, who: str) -> bool:
        self.arrived.add(who)
        if len(self.arrived) >= self.n:
            self.event.set()
        try:
            await asyncio.wait_for(self.event.wait(), 120)
        except TimeoutError:
            return False
        return True


def _block(text: str, name: str) -> str:
    m = re.search(rf"<<<{name}\n(.*?)\n{name}>>>", text, re.S)
    return m.group(1) if m else ""


def _keywords(user: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    req = re.search(r"Requirement: (.*)", user)
    text = req.group(1).lower() if req else ""
    for fragment, (answers, topic) in KEYWORDS.items():
        if fragment in text:
            return answers, topic, fragment
    return (), (), ""


_met: set[str] = set()


async def _rendezvous(fragment: str) -> None:
    if RENDEZVOUS and fragment not in _met:
        import ray

        _met.add(fragment)
        arrived = await ray.get_actor(RENDEZVOUS).arrive.remote(fragment)
        assert arrived, "foragers did not run at the same time"


def _kill_once(fragment: str, knob: tuple[str, str] | None = None) -> None:
    """kill -9 of this process (a Forager's; an Ingestor's for KILL_CONTEXT_ONCE), once per marker file,
    for the fragment of the knob (default KILL_ONCE)."""
    target, marker = KILL_ONCE if knob is None else knob
    if target and fragment == target:
        import os
        import signal
        from pathlib import Path

        try:
            Path(marker).touch(exist_ok=False)
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


def _verdict(passage: str, answers: tuple[str, ...], topic: tuple[str, ...], deep: bool) -> dict[str, str]:
    """A passage naming an answer keyword answers (a method); one naming a topic keyword is interesting."""
    if any(k in passage for k in answers):
        return {"tag": "answers", "kind": "method", "motive": f"names {next(k for k in answers if k in passage)}"}
    if not deep and any(k in passage for k in topic):
        return {"tag": "interesting", "kind": "background", "motive": "on topic"}
    return {"tag": "unrelated", "kind": "background", "motive": "off topic"}


async def brain(messages: list[dict[str, str]], schema: type) -> Any:
    user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    name = schema.__name__
    if name == "RequirementList":
        return {"requirements": REQUIREMENTS}
    if name in ("BatchVerdict", "DeepDiveBatchVerdict"):  # one verdict per numbered passage
        answers, topic, fragment = _keywords(user)
        await _rendezvous(fragment)  # every Forager arrives, the one that fails too: they all run at once
        if FAIL_ON and fragment == FAIL_ON:
            raise RuntimeError(f"scripted forager failure for {fragment!r}")
        _kill_once(fragment)
        verdicts = []
        for number, passage in re.findall(r"<<<PASSAGE (\d+)\n(.*?)\nPASSAGE \1>>>", user, re.S):
            verdict = _verdict(passage.lower(), answers, topic, deep=name == "DeepDiveBatchVerdict")
            verdicts.append({"passage": int(number), **verdict})
        return {"verdicts": verdicts}
    if name == "Reformulation":
        answers, topic, _ = _keywords(user)
        req = re.search(r"Requirement: (.*)", user)
        return {"query": f"{req.group(1) if req else ''} {' '.join(topic)}".strip()}
    if name in ("ChunkVerdict", "DeepDiveVerdict"):
        answers, topic, fragment = _keywords(user)
        await _rendezvous(fragment)
        if FAIL_ON and fragment == FAIL_ON:
            raise RuntimeError(f"scripted forager failure for {fragment!r}")
        passage = _block(user, "PASSAGE").lower()
        if any(k in passage for k in answers):
            return {"tag": "answers", "motive": f"names {next(k for k in answers if k in passage)}"}
        if name == "ChunkVerdict" and any(k in passage for k in topic):
            return {"tag": "interesting", "motive": "on topic"}
        return {"tag": "unrelated", "motive": "off topic"}
    if name == "ReplanDraft":  # names what the progress lacks; proposes REPLAN
        progress = _block(user, "PROGRESS")
        missing = [] if " result" in progress else ["quantitative"]
        if re.search(r"answering papers [01];", progress):
            missing.append("source_diversity")
        return {"missing": missing, "requirements": list(REPLAN)}
    if name == "DocumentGist":
        return {"summary": "A document examined by the end-to-end test."}
    if name == "ChunkContexts":  # contextual retrieval, asked by an Ingestor: one context per numbered passage
        title = re.search(r"^Title: (.*)$", user, re.M)
        title_text = title.group(1) if title else ""
        if KILL_CONTEXT_ONCE[0] and KILL_CONTEXT_ONCE[0].lower() in title_text.lower():
            _kill_once(KILL_CONTEXT_ONCE[0], KILL_CONTEXT_ONCE)
        return {"contexts": [{"passage": int(n), "context": f"This passage is part of the paper {title_text[:80]}."}
                             for n in re.findall(r"^\[(\d+)\] Section: ", user, re.M)]}
    if name == "RelevanceGate":
        return {"continue_search": True, "reason": "on topic"}
    if name == "SectionChoice":
        listed = [line[2:] for line in _block(user, "SECTIONS").splitlines() if line.startswith("- ")]
        return {"sections": listed[:1] + ["An Invented Section That Does Not Exist"]}
    if name == "SectionDraft":
        labels = sorted({int(n) for n in re.findall(r"^\[(\d+)\] ", user, re.M)})
        return {"mechanism": "The sources describe the mechanism.", "mechanism_sources": labels[:1],
                "evidence": [{"sentence": f"Source {n} reports on the requirement.", "sources": [n]}
                             for n in labels] + [{"sentence": "This cites a source that does not exist.",
                                                  "sources": [99]}]}
    if name == "OverviewDraft":
        return {"title": "End-to-end test", "overview": "An overview written by the test brain."}
    if name == "ContributionDraft":  # labels: the first of each taxonomy list in the prompt
        problems = re.search(r"^Problem labels: (.*)$", user, re.M)
        methods = re.search(r"^Method labels: (.*)$", user, re.M)
        return {"problem": "The paper studies the question of its title.",
                "method": "The paper describes its method in the text.",
                "contribution": "The paper reports findings on its topic.",
                "novelty": "The paper claims its approach is new.",
                "problem_label": problems.group(1).split("; ")[0] if problems else "",
                "method_label": methods.group(1).split("; ")[0] if methods else ""}
    if name == "OverlapDraft":
        numbers = sorted({int(n) for n in re.findall(r"^\[(\d+)\] ", _block(user, "PAPERS"), re.M)})
        return {"overlaps": [{"papers": numbers[:2], "element": "problem", "shared": "a shared topic"}]
                if len(numbers) >= 2 else []}
    if name == "DifferenceDraft":
        numbers = sorted({int(n) for n in re.findall(r"^\[(\d+)\] ", _block(user, "PAPERS"), re.M)})
        return {"differences": [{"paper": n, "distinct": f"Paper {n} alone covers its own documents."}
                                for n in numbers]}
    raise AssertionError(f"the test brain has no answer for schema {name}")


def research(settings: Any, *, llm: Any = None, on_event: Any = None,
             quiet: bool = False) -> tuple[Any, dict[str, Any], list[Any]]:
    """QUERY end to end through a ResearchSession with its derived requirements; ``llm``: the model given to
    the run (e.g. ``FunctionLLM(brain)``), None for the one the settings name. Every status event goes to
    ``on_event`` too. Returns the run's summary, its run.json and its events, in order."""
    import json
    from pathlib import Path

    from gateway.session import ResearchSession

    events: list[Any] = []

    def seen(ev: Any) -> None:
        events.append(ev)
        if on_event is not None:
            on_event(ev)

    session = ResearchSession(settings, llm=llm, quiet=quiet)
    try:
        summary = session.run(session.plan(QUERY), on_event=seen)
    finally:
        session.close()
    return summary, json.loads((Path(summary.run_dir) / "run.json").read_text()), events
