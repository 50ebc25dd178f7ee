"""How well the configured model judges, measured on a labelled set (`forage calibrate`).

The relevance check weighs the judge's "answers" by its true and false positive rates
(actors/steps/forage/credit.py); this measures them for the model a researcher runs. Each chosen query of a labelled
BEIR folder becomes a requirement: by default :data:`LABELLED_SET`, the set Forage ships (19 questions on passages of
13 CC BY papers of 11 fields, labelled by hand: labelled/SOURCE.md), or a folder the researcher names (e.g. SciFact's
train split, so that nothing is measured on the test queries the benches report on). The model judges, with the
Forager's own judging prompt and batches (``actors.steps.forage.judging.BatchJudge``), the passages of its relevant
documents and of as many *near* documents the qrels do not call relevant — those sharing the most of the query's
content words, the kind of passage retrieval puts before the judge (a random document would make any judge look
precise). The verdicts are scored against the qrels as the evidence bench scores a run's
(:func:`~actors.steps.evaluation.evidence.judge_rates`): TPR is the share of relevant passages called "answers", FPR
the share of the others. A passage left without a valid verdict counts as neither
(its count is reported).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from actors.steps.evaluation.evidence import judge_rates
from actors.steps.evaluation.retrieval import BeirDataset, load_beir, select_queries
from actors.steps.forage.judging import BatchJudge
from actors.steps.forage.ledger import Iteration
from actors.steps.plan.requirements import content_words
from infra.errors import ConfigError, LLMOutputError, LLMTimeout
from infra.llm import build_llm
from infra.llm.base import ChatMessage
from infra.settings import Settings
from infra.store.base import ChunkRecord
from messages.plan import Requirement

NEAR_PER_QUERY = 3  # passages of documents the qrels do not call relevant, per query
#: the labelled set Forage ships (its split "test": every question), the default of `forage calibrate`
LABELLED_SET = Path(__file__).resolve().parent / "labelled"


def _words(text: str) -> set[str]:
    return set(content_words(text))


def labelled_passages(dataset: BeirDataset, qrels: Mapping[str, Mapping[str, int]], qids: Sequence[str],
                      near: int = NEAR_PER_QUERY, seed: int = 0) -> dict[str, list[tuple[str, bool]]]:
    """Per query, ``(corpus id, relevant)`` of the passages to judge: its relevant documents in the corpus, and the
    ``near`` other documents sharing the most of its content words (ties by id), shuffled by ``seed``."""
    vocab = {cid: _words(f"{title} {text}") for cid, (title, text) in dataset.corpus.items()}
    out: dict[str, list[tuple[str, bool]]] = {}
    for q in qids:
        relevant = [c for c, g in qrels[q].items() if g > 0 and c in dataset.corpus]
        wanted = _words(dataset.queries[q])
        others = sorted((c for c in dataset.corpus if c not in relevant),
                        key=lambda c: (-len(wanted & vocab[c]), c))[:near]
        passages = [(c, True) for c in relevant] + [(c, False) for c in others]
        random.Random(f"{seed}:{q}").shuffle(passages)
        out[q] = passages
    return out


async def _judge(settings: Settings, llm: Any, dataset: BeirDataset, qid: str,
                 passages: Sequence[tuple[str, bool]]) -> tuple[list[tuple[str, bool]], int, int]:
    """The model's tags for one query's passages with the Forager's judging prompt: ``(tag, relevant)`` pairs,
    the passages left without a verdict and the LLM calls made."""
    titles: dict[str, str] = {}
    chunks = []
    relevant: dict[str, bool] = {}
    for cid, rel in passages:
        title, text = dataset.corpus[cid]
        titles[cid] = title or cid
        chunks.append(ChunkRecord(chunk_id=f"{cid}:0", doc_id=cid, ordinal=0, text=text, section_path="Abstract",
                                  section_kind="abstract", char_start=0, char_end=len(text),
                                  token_count=len(text.split())))
        relevant[cid] = rel

    async def ask(messages: list[ChatMessage], schema: type[Any], step: str, it: Iteration) -> Any:
        it.calls += 1
        try:
            return await llm.structured(messages, schema)
        except (LLMOutputError, LLMTimeout):
            return None  # a failed call leaves its passages without a verdict

    judge = BatchJudge(ask, lambda *_, **__: None, titles.__getitem__)
    requirement = Requirement(id="R1", text=dataset.queries[qid])
    it = Iteration(1)
    size = settings.forage.judge_batch
    judged = []
    for start in range(0, len(chunks), size):
        judged += await judge.judge(requirement, chunks[start:start + size], "start", it)
    return [(j.tag, relevant[j.doc_id]) for j in judged], it.unjudged, it.calls


def measure_judge(settings: Settings, folder: Path, *, n_queries: int = 20, split: str = "train",
                  near: int = NEAR_PER_QUERY, seed: int = 0, llm: Any | None = None,
                  progress: Callable[[int, int, str, list[tuple[str, bool]]], None] | None = None) -> dict[str, Any]:
    """Judge the labelled passages of the first ``n_queries`` judged queries of ``split`` with the configured model
    (or ``llm``) and return the measured rates, what they were measured on, and the model's key."""
    if n_queries < 1:
        raise ConfigError(f"--queries must be at least 1, got {n_queries}")
    dataset = load_beir(folder)
    if split not in dataset.splits():
        raise ConfigError(f"{dataset.folder}: no qrels for split {split!r} (it has {', '.join(dataset.splits())})")
    qrels = dataset.qrels(split)
    qids = [q for q in select_queries(qrels, None) if q in dataset.queries][:n_queries]
    if not qids:
        raise ConfigError(f"{dataset.folder}: split {split!r} has no judged query")
    if llm is None:
        llm = build_llm(settings)
    shown = labelled_passages(dataset, qrels, qids, near, seed)
    pairs: list[tuple[str, bool]] = []
    unjudged = calls = 0
    for n, q in enumerate(qids, start=1):
        got, missing, made = asyncio.run(_judge(settings, llm, dataset, q, shown[q]))
        pairs += got
        unjudged += missing
        calls += made
        if progress is not None:
            progress(n, len(qids), q, got)
    rates = judge_rates(pairs)
    if rates["judged_relevant"] == 0 or rates["judged_other"] == 0:
        raise ConfigError(f"the model gave no valid verdict on the {'relevant' if not rates['judged_relevant'] else 'other'} "
                          f"passages of {len(qids)} queries ({unjudged} passages without a verdict): nothing to "
                          "measure; try more --queries or check the model answers the judging prompt")
    return {"key": settings.judge_key(), "llm": llm.name,
            "tpr": rates["judge_tpr"], "fpr": rates["judge_fpr"],
            "relevant": int(rates["judged_relevant"]), "other": int(rates["judged_other"]),
            "unjudged": unjudged, "llm_calls": calls, "queries": len(qids),
            "labelled_set": f"{dataset.name}:{split}", "calibrated": dt.date.today().isoformat()}
