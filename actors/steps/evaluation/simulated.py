"""A judge of known quality for the benches (`forage eval evidence --judge simulated:TPR,FPR[,seed]`).

:class:`SimulatedJudge` implements the LLM port and answers the Forager's real prompts from a BEIR dataset's
qrels, so the whole pipeline — retrieval, the relevance check, deep dives, coverage — can be measured as a function
of judge quality instead of for the one model a machine can run. It reads only what a model would: the requirement
and the numbered passages of the prompt (each passage's document title and text), and the schema asked for. The
requirement is matched to a query by its text, the passage to a corpus document by its title (and, when titles
repeat, by its text). A passage of a document the qrels call relevant "answers" with probability ``tpr``, any
other passage with probability ``fpr``; each draw is a hash of (seed, query, document, passage text), so a run
is reproducible and the same passage always gets the same verdict for the same requirement. A passage that does
not answer is "unrelated"; answers are "result" passages (the kind that gives full coverage).

The Forager's other prompts are answered plainly, from the prompt alone: a summary is the first sentences of the
text shown, the deep-dive gate always continues, the section choice takes the first sections listed, a
reformulation is the requirement's content words. Any other schema (planning, writing) is refused with an
:class:`~infra.errors.LLMOutputError`: the simulated judge forages, it does not write.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from actors.steps.plan.requirements import _STOP_WORDS
from actors.steps.schemas import (
    SUMMARY_CHARS,
    BatchVerdict,
    DeepDiveBatchVerdict,
    DocumentGist,
    Reformulation,
    RelevanceGate,
    SectionChoice,
)
from infra.errors import ConfigError, LLMOutputError
from infra.llm.base import ChatMessage
from infra.llm.jsonfix import Completion, RetryingLLM

_REQUIREMENT = re.compile(r"^Requirement: (.*?)\n\n", re.DOTALL)
_PASSAGE = re.compile(r"\[(\d+)\] Document: (.*?)\nSection: .*?\n<<<PASSAGE \1\n(.*?)\nPASSAGE \1>>>", re.DOTALL)
_BLOCK = re.compile(r"<<<(ABSTRACT|INTRODUCTION)\n(.*?)\n\1>>>", re.DOTALL)
_SECTIONS = re.compile(r"<<<SECTIONS\n(.*?)\nSECTIONS>>>", re.DOTALL)
_AT_MOST = re.compile(r"Choose at most (\d+) section paths")
_WORDS = re.compile(r"[^\W_][\w-]*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _norm(text: str) -> str:
    return " ".join(text.replace("‹‹‹", "<<<").replace("›››", ">>>").casefold().split())


def parse_judge(spec: str) -> tuple[float, float, int]:
    """``simulated:TPR,FPR[,seed]`` -> (tpr, fpr, seed); ConfigError saying what is wrong otherwise."""
    kind, _, rest = spec.partition(":")
    parts = [p.strip() for p in rest.split(",")] if rest else []
    if kind.strip() != "simulated" or len(parts) not in (2, 3):
        raise ConfigError(f"--judge {spec!r}: expected simulated:TPR,FPR[,seed], e.g. simulated:0.8,0.2")
    try:
        tpr, fpr = float(parts[0]), float(parts[1])
        seed = int(parts[2]) if len(parts) == 3 else 0
    except ValueError:
        raise ConfigError(f"--judge {spec!r}: TPR and FPR are numbers from 0 to 1, the seed an integer") from None
    if not (0.0 <= tpr <= 1.0 and 0.0 <= fpr <= 1.0):
        raise ConfigError(f"--judge {spec!r}: TPR and FPR must be between 0 and 1")
    return tpr, fpr, seed


class SimulatedJudge(RetryingLLM):
    """Answers the Forager's prompts from qrels with a known true and false positive rate (module docstring).

    ``corpus``: corpus id -> (title, text); ``queries``: query id -> text; ``qrels``: query id -> {corpus id:
    grade}. Answers go through the port's real validation path (:class:`RetryingLLM`)."""

    shippable = True

    def __init__(self, corpus: Mapping[str, tuple[str, str]], queries: Mapping[str, str],
                 qrels: Mapping[str, Mapping[str, int]], tpr: float, fpr: float, seed: int = 0) -> None:
        super().__init__(name=f"simulated:{tpr:g},{fpr:g},{seed}", max_retries=0, max_tokens=1024)
        self.tpr, self.fpr, self.seed = tpr, fpr, seed
        self.qrels = qrels
        self._query = {_norm(text): qid for qid, text in queries.items()}
        self._by_title: dict[str, list[str]] = {}
        for cid, (title, _) in corpus.items():
            self._by_title.setdefault(_norm(title), []).append(cid)
        self._text = {cid: _norm(text) for cid, (_, text) in corpus.items()}

    # -- what the prompt says ------------------------------------------------------------------------------
    def requirement(self, user: str) -> str:
        """The query id of the prompt's requirement (ValueError when it is none of the dataset's queries)."""
        found = _REQUIREMENT.match(user)
        if found is None:
            raise ValueError("the prompt names no requirement")
        qid = self._query.get(_norm(found.group(1)))
        if qid is None:
            raise ValueError(f"the requirement {found.group(1)[:80]!r} is none of the dataset's queries")
        return qid

    def document(self, title: str, text: str) -> str:
        """The corpus id of a passage shown under ``title`` (ValueError when no document has that title)."""
        candidates = self._by_title.get(_norm(title), [])
        if len(candidates) == 1:
            return candidates[0]
        probe = _norm(text.removesuffix(" …"))[:200]
        pool = candidates or list(self._text)
        # the passage that starts with the shown text first: passages of one paper overlap (a chunk's window runs
        # into the next), and the one that merely holds it may be another, relevant where the shown one is not
        for holds in (str.startswith, str.__contains__):
            for cid in pool:
                if holds(self._text[cid], probe):
                    return cid
        if candidates:
            return candidates[0]
        raise ValueError(f"no document of the dataset is titled {title[:80]!r} or holds the passage")

    def answers(self, qid: str, cid: str, text: str) -> bool:
        """The seeded draw: True with probability tpr for a relevant document, fpr for any other."""
        digest = hashlib.sha256(f"{self.seed}\0{qid}\0{cid}\0{_norm(text)}".encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        relevant = self.qrels.get(qid, {}).get(cid, 0) > 0
        return draw < (self.tpr if relevant else self.fpr)

    # -- the port ------------------------------------------------------------------------------------------
    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        self.calls += 1
        user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
        return Completion(json.dumps(self._answer(user, schema)))

    def _answer(self, user: str, schema: type[BaseModel]) -> dict[str, Any]:
        if issubclass(schema, (BatchVerdict, DeepDiveBatchVerdict)):
            qid = self.requirement(user)
            verdicts = []
            for number, title, text in _PASSAGE.findall(user):
                cid = self.document(title, text)
                yes = self.answers(qid, cid, text)
                verdicts.append({"passage": int(number), "tag": "answers" if yes else "unrelated",
                                 "kind": "result" if yes else "background",
                                 "motive": "Simulated judge: " + ("it answers." if yes else "it does not answer.")})
            return {"verdicts": verdicts}
        if schema is DocumentGist:
            found = _BLOCK.search(user)
            text = " ".join((found.group(2) if found else "").split())
            summary = " ".join(_SENTENCE_END.split(text)[:2]) or user.partition("\n")[0].removeprefix("Title: ")
            return {"summary": summary[:SUMMARY_CHARS]}
        if schema is RelevanceGate:
            return {"continue_search": True, "reason": "Simulated judge: reads on."}
        if schema is SectionChoice:
            listed = _SECTIONS.search(user)
            paths = [line[2:] for line in (listed.group(1).splitlines() if listed else []) if line.startswith("- ")]
            at_most = _AT_MOST.search(user)
            return {"sections": paths[: int(at_most.group(1)) if at_most else 1]}
        if schema is Reformulation:
            found = _REQUIREMENT.match(user)
            words = _WORDS.findall(found.group(1) if found else "")
            return {"query": " ".join(w for w in words if w.casefold() not in _STOP_WORDS)}
        raise LLMOutputError(f"{self.name} answers the Forager's prompts only, not {schema.__name__}",
                             retryable=False)
