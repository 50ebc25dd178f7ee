"""A small zebrafish world for whole runs without a real model: the query and document canaries (words that must
not outlive a forgotten run), and ``brain``, a FunctionLLM that answers every prompt of a run (planning, judging,
writing, contextual retrieval) like a careful reader of the fin-regeneration papers would."""

from __future__ import annotations

import re
from typing import Any

QUERY_CANARY = "Vexlorimab"
DOC_CANARY = "Quorthane"
QUERY = f"How does {QUERY_CANARY} change fin regeneration in zebrafish?"


def _block(text: str, name: str) -> str:
    m = re.search(rf"<<<{name}\n(.*?)\n{name}>>>", text, re.S)
    return m.group(1) if m else ""


SCALES_REQUIREMENT = "Pigment cells in the scales of adult zebrafish"


def _verdict(passage: str, user: str = "") -> dict[str, str]:
    if f"Requirement: {SCALES_REQUIREMENT}" in user:  # the second requirement of a query that asks about scales
        if "pigment" in passage.lower() or "melanophore" in passage.lower():
            return {"tag": "answers", "kind": "result", "motive": "counts pigment cells of scales"}
    elif "regenerat" in passage.lower() or "regrowth" in passage.lower():
        return {"tag": "answers", "kind": "result", "motive": "reports fin regrowth"}
    return {"tag": "unrelated", "kind": "background", "motive": "off topic"}


def _label(user: str, kind: str, word: str) -> str:
    """The label of the prompt's list ("Problem labels: a; b; ...") that contains ``word``, else its first."""
    line = re.search(rf"^{kind} labels: (.*)$", user, re.M)
    labels = [label.strip() for label in line.group(1).split(";")] if line else [""]
    return next((label for label in labels if word in label), labels[0])


async def brain(messages: list[dict[str, str]], schema: type) -> Any:
    """Answers like a reader: a passage about regeneration answers the requirement (about pigment cells,
    for the scales requirement a query asking about scales gets). Answers the call's first user message,
    its request: repair turns and the Writer's "write the section again" come after it."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    name = schema.__name__
    if name == "RequirementList":
        fins = f"Effect of {QUERY_CANARY} on the speed of fin regeneration in zebrafish"
        return {"requirements": [fins, SCALES_REQUIREMENT] if "scale" in user.lower() else [fins]}
    if name in ("BatchVerdict", "DeepDiveBatchVerdict"):  # one verdict per numbered passage
        return {"verdicts": [{"passage": int(n), **_verdict(text, user)} for n, text in
                             re.findall(r"<<<PASSAGE (\d+)\n(.*?)\nPASSAGE \1>>>", user, re.S)]}
    if name in ("ChunkVerdict", "DeepDiveVerdict"):
        return _verdict(_block(user, "PASSAGE"), user)
    if name == "Reformulation":
        return {"query": "fin regrowth after amputation"}
    if name == "DocumentGist":
        return {"summary": "A study of fin regrowth."}
    if name == "RelevanceGate":
        return {"continue_search": True, "reason": "on topic"}
    if name == "SectionChoice":
        listed = [line[2:] for line in _block(user, "SECTIONS").splitlines() if line.startswith("- ")]
        return {"sections": listed[:1]}
    if name == "SectionDraft":
        labels = sorted({int(n) for n in re.findall(r"^\[(\d+)\] ", user, re.M)})
        return {"mechanism": f"{QUERY_CANARY} slows regrowth.", "mechanism_sources": labels[:1],
                "evidence": [{"sentence": f"Source {n} measured regrowth under {QUERY_CANARY}.", "sources": [n]}
                             for n in labels]}
    if name == "OverviewDraft":
        return {"title": f"{QUERY_CANARY} and fin regeneration", "overview": f"What is known about {QUERY_CANARY}."}
    if name == "ChunkContexts":  # contextual retrieval: a sentence about each numbered passage
        passages = re.findall(r"^\[(\d+)\] Section: [^\n]*\n(.*?)(?=\n\n\[\d+\] Section: |\n\nWrite the context)",
                              user, re.S | re.M)
        return {"contexts": [{"passage": int(n), "context": (
            f"This passage of the fin study reports regrowth of fish treated with {DOC_CANARY}."
            if DOC_CANARY.lower() in text.lower() else f"This passage of a zebrafish study, part {n}, describes "
            "its observations.")} for n, text in passages]}
    if name == "ContributionDraft":  # the Writer's comparison: one contribution record per cited paper
        title = re.search(r"^Paper \[\d+\]: (.*) \(", user, re.M)
        subject = "scale pigment cells" if title and "pigment" in title.group(1).lower() else "fin regrowth"
        return {"problem": f"How {subject} of zebrafish can be measured in the laboratory.",
                "method": f"Zebrafish were examined and their {subject} was recorded under a microscope.",
                "contribution": f"Measurements of {subject} in adult zebrafish.",
                "novelty": f"The authors claim the first systematic record of {subject}.",
                "problem_label": _label(user, "Problem", "measurement"),
                "method_label": _label(user, "Method", "laboratory")}
    if name in ("OverlapDraft", "DifferenceDraft"):
        papers = [int(n) for n in re.findall(r"^\[(\d+)\] ", _block(user, "PAPERS"), re.M)]
        if name == "OverlapDraft":
            return {"overlaps": [{"papers": papers, "element": "method",
                                  "shared": "microscopy of adult zebrafish"}] if len(papers) >= 2 else []}
        return {"differences": [{"paper": n, "distinct": f"Only paper {n} reports its own zebrafish measurements."}
                                for n in papers]}
    raise AssertionError(f"no answer for schema {name}")
