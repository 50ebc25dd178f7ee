"""Evidence quality on a BEIR-format dataset, scored without an LLM (`forage eval evidence`).

Each chosen test query becomes one requirement over the corpus, foraged by the real
:class:`~actors.steps.forage.step.ForageStep` (the configured model), iterated as a run over a fixed library iterates
it (until its coverage reaches ``run.min_coverage``, an iteration finds it nothing new, or ``run.max_iterations``;
``iterations=1``: the first iteration alone). For half of the queries,
chosen by a seed, every relevant document is removed from the store before anything is foraged: those
requirements are *unanswerable*, and any coverage they get is false. The qrels alone score the result:

* **evidence hit rate** — the first evidence document is relevant (answerable queries);
* **evidence recall** — some relevant document is in the evidence (answerable queries);
* **mean coverage** on answerable and on unanswerable requirements;
* **false coverage** — unanswerable requirements with coverage >= 0.75 (an answer counted);
* **retrieval P@1** — the store's own hybrid search ranks a relevant document first (answerable queries):
  what evidence should at least match;
* LLM calls and wall time;
* a **reliability table** (:func:`reliability`): requirements binned by coverage, each bin with its mean coverage
  and its share of answerable requirements, and the **expected calibration error** (ECE) over it: coverage is meant
  as the probability that the evidence shown answers the requirement, and the ECE says how far from that it is
  (half the queries being unanswerable, a coverage that says nothing scores 0.5 everywhere);
* the **judge's own rates**, from its recorded verdicts against the qrels: of the passages it was shown, the share
  of a relevant document's it called "answers" (TPR) and of any other document's (FPR). In ``checked`` mode the
  judge is shown only passages from the topic floor on, so its rates there are on those.

``judge="simulated:TPR,FPR[,seed]"`` forages with a judge of known quality
(:class:`~actors.steps.evaluation.simulated.SimulatedJudge`) instead of the configured model, and tells the check
its rates (``forage.judge_tpr`` / ``judge_fpr``, unless they were set): the pipeline measured as a function of judge
quality. ``base_store``: a store of the whole corpus kept between runs (``forage eval evidence --store``), copied
and the held-out documents deleted from the copy, instead of embedding the corpus for every run.

Modes: ``judge`` (the judge's word alone: ``forage.relevance_check`` off) and ``checked`` (the relevance
check on), over the same store and queries. :func:`similarity_profile` gives the figures the check's
floors are calibrated from (``bench/relevance_floors.py``).
"""

from __future__ import annotations

import asyncio
import math
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Literal

from actors.steps.evaluation.retrieval import (
    BeirDataset,
    LoadReport,
    document_key,
    load_beir,
    load_corpus,
    select_queries,
)
from actors.steps.forage.ledger import Iteration, Ledger
from actors.steps.run.record import settled
from infra.embed.base import Embedder
from infra.errors import ConfigError
from infra.settings import Settings
from infra.store.base import Store
from messages.forage import ChunkJudgement, ForageRequest
from messages.plan import Requirement

EvidenceMode = Literal["judge", "checked"]
EVIDENCE_MODES: tuple[EvidenceMode, ...] = ("judge", "checked")
FALSE_COVERAGE = 0.75  # an unanswerable requirement at or above this coverage has an answer counted


@dataclass
class QueryOutcome:
    qid: str
    answerable: bool
    coverage: float
    hit: bool
    recall: bool
    evidence: list[str]  # corpus ids, evidence order
    llm_calls: int
    overruled: int
    seconds: float
    failed_steps: int
    # (the judge's tag, its kind, similarity to the requirement) of every passage shown to the judge: what a
    # different answer floor would have confirmed (answer_floor_sweep)
    # (the judge's tag, kind, relevance, confirmed: whether retrieval signals confirmed an answer; None: not checked)
    verdicts: list[tuple[str, str | None, float | None, bool | None]] = field(default_factory=list)
    # (the judge's own tag, whether the passage is of a relevant document) of every passage shown to the judge
    judged: list[tuple[str, bool]] = field(default_factory=list)
    # (score, the judge called it an answer) of each document's best passage shown from the calibrated topic floor
    # on (Ledger.best_shown): what a calibrated coverage weighs, and what bench/coverage_prior.py fits the prior on
    best_shown: list[tuple[float, bool]] = field(default_factory=list)
    iterations: int = 1  # the Forager's iterations for it (forage_query)


@dataclass
class ModeSummary:
    mode: str
    outcomes: list[QueryOutcome] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        ans = [o for o in self.outcomes if o.answerable]
        una = [o for o in self.outcomes if not o.answerable]

        def mean(values: Sequence[float]) -> float:
            return round(sum(values) / len(values), 4) if values else math.nan

        shown = [pair for o in self.outcomes for pair in o.judged]
        return {
            **judge_rates(shown),
            "answered_answerable": mean([float(o.coverage >= FALSE_COVERAGE) for o in ans]),
            "evidence_hit_rate": mean([float(o.hit) for o in ans]),
            "evidence_recall": mean([float(o.recall) for o in ans]),
            "coverage_answerable": mean([o.coverage for o in ans]),
            "coverage_unanswerable": mean([o.coverage for o in una]),
            "false_coverage": mean([float(o.coverage >= FALSE_COVERAGE) for o in una]),
            "llm_calls": float(sum(o.llm_calls for o in self.outcomes)),
            "overruled": float(sum(o.overruled for o in self.outcomes)),
            "failed_steps": float(sum(o.failed_steps for o in self.outcomes)),
            "iterations": mean([float(o.iterations) for o in self.outcomes]),
            "wall_s": round(sum(o.seconds for o in self.outcomes), 1),
            "ece": expected_calibration_error(reliability(self.outcomes)),
        }


RELIABILITY_BINS = (0.0, 0.25, 0.5, 0.75, 1.0)  # lower edges; the last bin holds coverage 1.0 alone


def reliability(outcomes: Sequence[QueryOutcome], edges: Sequence[float] = RELIABILITY_BINS) -> list[dict[str, float]]:
    """Requirements binned by coverage (bin ``i`` holds ``edges[i] <= coverage < edges[i + 1]``, the last bin
    ``coverage >= edges[-1]``): per bin its lower edge, how many requirements, their mean coverage and the share of
    them that are answerable. Empty bins are left out."""
    rows = []
    for i, low in enumerate(edges):
        high = edges[i + 1] if i + 1 < len(edges) else math.inf
        inside = [o for o in outcomes if low <= o.coverage < high]
        if inside:
            rows.append({"bin": low, "n": float(len(inside)),
                         "mean_coverage": round(sum(o.coverage for o in inside) / len(inside), 4),
                         "answerable": round(sum(o.answerable for o in inside) / len(inside), 4)})
    return rows


def expected_calibration_error(rows: Sequence[Mapping[str, float]]) -> float:
    """The expected calibration error of a reliability table: the mean over requirements of their bin's
    |mean coverage - share answerable| (NaN for an empty table)."""
    total = sum(r["n"] for r in rows)
    if not total:
        return math.nan
    return round(sum(r["n"] * abs(r["mean_coverage"] - r["answerable"]) for r in rows) / total, 4)


def judge_rates(judged: Sequence[tuple[str, bool]]) -> dict[str, float]:
    """The judge's true and false positive rates from ``(its tag, passage of a relevant document)`` pairs: the share
    of relevant passages it called "answers" and of the others; with how many of each it was shown."""
    relevant = [tag == "answers" for tag, rel in judged if rel]
    other = [tag == "answers" for tag, rel in judged if not rel]
    return {"judge_tpr": round(sum(relevant) / len(relevant), 4) if relevant else math.nan,
            "judge_fpr": round(sum(other) / len(other), 4) if other else math.nan,
            "judged_relevant": float(len(relevant)), "judged_other": float(len(other))}


def split_answerable(qids: Sequence[str], seed: int) -> set[str]:
    """The unanswerable half of ``qids`` (rounded down), chosen by ``seed``."""
    return set(random.Random(seed).sample(sorted(qids), len(qids) // 2))


def held_out_documents(qrels: Mapping[str, Mapping[str, int]], unanswerable: set[str]) -> set[str]:
    """Corpus ids of every document relevant to an unanswerable query."""
    return {cid for q in unanswerable for cid, grade in qrels[q].items() if grade > 0}


def without(dataset: BeirDataset, held_out: set[str]) -> BeirDataset:
    """The dataset with those corpus documents removed (queries and qrels unchanged)."""
    return BeirDataset(folder=dataset.folder, corpus={c: v for c, v in dataset.corpus.items() if c not in held_out},
                       queries=dataset.queries)


def _corpus_ids(report: LoadReport) -> dict[str, list[str]]:
    return {doc_id: list(ids) for doc_id, ids in report.corpus_ids.items()}


def retrieval_p1(store: Store, embedder: Embedder, dataset: BeirDataset, qrels: Mapping[str, Mapping[str, int]],
                 qids: Sequence[str], corpus_ids: Mapping[str, Sequence[str]], alpha: float) -> float:
    """Share of ``qids`` whose first hybrid hit (by chunk) belongs to a relevant document."""
    if not qids:
        return math.nan
    vectors = embedder.embed([dataset.queries[q] for q in qids])
    hits = 0
    for q, vector in zip(qids, vectors, strict=True):
        found = store.hybrid(dataset.queries[q], vector, 1, alpha)
        first = corpus_ids.get(found[0].chunk.doc_id, []) if found else []
        hits += any(qrels[q].get(c, 0) > 0 for c in first)
    return round(hits / len(qids), 4)


@dataclass(frozen=True)
class Foraged:
    """What the Forager did for one requirement across its iterations."""

    coverage: Any  # the last iteration's RequirementCoverage (coverage, evidence, LLM calls: cumulative)
    judgements: tuple[ChunkJudgement, ...]  # every iteration's
    iterations: int


async def forage_query(settings: Settings, store: Store, embedder: Embedder, llm: Any, requirement_text: str,
                       run_id: str = "eval-evidence", iterations: int = 1) -> Foraged:
    """The real Forager for one requirement, with the run's relevance signal
    (:func:`~infra.rerank.build_relevance`), iterated as a run over a fixed library iterates it: up to
    ``iterations`` times, until the requirement settles (:func:`~actors.steps.run.record.settled`: its coverage
    reached ``run.min_coverage``, or an iteration found it no new passage above the topic floor)."""
    from actors.steps.forage.step import ForageStep
    from infra.rerank import build_relevance

    step = ForageStep(settings, store, embedder, llm, relevance=build_relevance(settings, embedder, store)[0])
    requirement = Requirement(id="R1", text=requirement_text)
    judgements: list[ChunkJudgement] = []
    number = 0
    while True:
        number += 1
        cov = await step.forage(ForageRequest(run_id=run_id, iteration=number, requirement=requirement))
        judgements.extend(cov.judgements)
        if number >= iterations or settled([cov], settings.run.min_coverage, new_documents=0)[requirement.id]:
            return Foraged(cov, tuple(judgements), number)


def evaluate_evidence(settings: Settings, folder: Path, *, n_queries: int = 50, seed: int = 0, split: str = "test",
                      modes: Sequence[EvidenceMode] = EVIDENCE_MODES, llm: Any | None = None,
                      embedder: Embedder | None = None, store_path: Path | None = None,
                      judge: str | None = None, base_store: Path | None = None, iterations: int | None = None,
                      progress: Callable[[str, int, int, QueryOutcome], None] | None = None,
                      loading: Callable[[int, int, float], None] | None = None) -> dict[str, Any]:
    """Build the store (the corpus minus the unanswerable queries' documents), forage every chosen query
    once per mode and return the JSON-ready figures. ``llm`` and ``embedder``: default built from settings;
    ``judge``: a simulated judge instead (module docstring); ``base_store``: a kept store of the whole corpus;
    ``iterations``: the most a requirement gets (default ``run.max_iterations``, as in a run; :func:`forage_query`)."""
    from infra.embed import build_embedder
    from infra.store import build_store

    iterations = settings.run.max_iterations if iterations is None else iterations
    if iterations < 1:
        raise ConfigError(f"--iterations must be at least 1, got {iterations}")
    if n_queries < 2:
        raise ConfigError(f"--queries must be at least 2 (half are made unanswerable), got {n_queries}")
    for mode in modes:
        if mode not in EVIDENCE_MODES:
            raise ConfigError(f"unknown mode {mode!r}; use {', '.join(EVIDENCE_MODES)}")
    dataset = load_beir(folder)
    qrels = dataset.qrels(split)
    qids = select_queries(qrels, n_queries)
    if len(qids) < 2:
        raise ConfigError(f"split {split!r} has fewer than 2 judged queries")
    unanswerable = split_answerable(qids, seed)
    held_out = held_out_documents(qrels, unanswerable)
    # an answerable query whose every relevant document was held out is unanswerable too
    for q in qids:
        if q not in unanswerable and not any(g > 0 and c not in held_out for c, g in qrels[q].items()):
            unanswerable.add(q)
    if judge is not None:
        from actors.steps.evaluation.simulated import SimulatedJudge, parse_judge

        tpr, fpr, judge_seed = parse_judge(judge)
        llm = SimulatedJudge(dataset.corpus, dataset.queries, qrels, tpr, fpr, judge_seed)
        told = settings.explicit().get("forage", {})
        settings = settings.updated(forage={"judge_tpr": told.get("judge_tpr", tpr),
                                            "judge_fpr": told.get("judge_fpr", fpr)})
    if llm is None:
        from infra.llm import build_llm

        llm = build_llm(settings)
    if base_store is not None and not Path(base_store).expanduser().is_dir():
        raise ConfigError(f"--store {base_store}: no such folder (build it once with `forage eval retrieval --beir "
                          f"{folder} --store {base_store}`)")
    with tempfile.TemporaryDirectory(prefix="forage-evidence-") as tmp:
        path = Path(store_path).expanduser() if store_path is not None else Path(tmp) / "store"
        if base_store is not None:
            shutil.copytree(Path(base_store).expanduser(), path, dirs_exist_ok=True)
        base = settings.updated(store={"path": path})
        store = build_store(base)
        embedder = embedder or build_embedder(base)
        started = perf_counter()
        if base_store is not None:  # the kept store holds every document: take the held-out ones out of the copy
            for cid in sorted(held_out):
                record = store.document_by_key(document_key(dataset.name, cid))
                if record is not None:
                    store.delete_document(record.doc_id)
        report = load_corpus(base, store, embedder, without(dataset, held_out), progress=loading)
        load_s = perf_counter() - started
        if report.stored:
            store.optimize()
        corpus_ids = _corpus_ids(report)
        answerable = [q for q in qids if q not in unanswerable]
        signal = base.relevance_signal(store.keeps_windows)
        out: dict[str, Any] = {
            "dataset": dataset.name, "split": split, "seed": seed, "n_queries": len(qids),
            "answerable": len(answerable), "unanswerable": len(unanswerable), "held_out_documents": len(held_out),
            "n_docs": len(dataset.corpus) - len(held_out), "embedder": embedder.name,
            "llm": llm.name, "preset": settings.preset,
            "judge_rates_told": list(base.judge_rates()),
            "relevance_signal": signal,
            "similarity_floors": list(base.similarity_floors(signal)),
            "load_s": round(load_s, 1), "max_iterations": iterations,
            "min_coverage": settings.run.min_coverage,
            "retrieval_p1": retrieval_p1(store, embedder, dataset, qrels, answerable, corpus_ids,
                                         base.store.hybrid_alpha),
            "modes": {}, "queries": {},
        }
        for mode in modes:
            mode_settings = base.updated(forage={"relevance_check": mode == "checked"})
            summary = ModeSummary(mode)
            for n, q in enumerate(qids, start=1):
                started = perf_counter()
                foraged = asyncio.run(forage_query(mode_settings, store, embedder, llm, dataset.queries[q],
                                                   iterations=iterations))
                cov = foraged.coverage
                docs = [c for e in cov.evidence for c in corpus_ids.get(e.doc_id, [])]
                relevant = {c for c, g in qrels[q].items() if g > 0}
                shown = [j for j in foraged.judgements if not j.motive.startswith("not shown to the judge")]
                outcome = QueryOutcome(
                    qid=q, answerable=q not in unanswerable, coverage=cov.coverage,
                    hit=bool(docs) and docs[0] in relevant, recall=bool(relevant & set(docs)), evidence=docs[:10],
                    llm_calls=cov.llm_calls, overruled=cov.overruled, seconds=perf_counter() - started,
                    failed_steps=len(cov.failed_steps), iterations=foraged.iterations,
                    verdicts=[(j.model_tag or j.tag, j.kind, j.relevance, j.confirmed) for j in shown],
                    judged=[(j.model_tag or j.tag, bool(relevant & set(corpus_ids.get(j.doc_id, []))))
                            for j in shown],
                    best_shown=best_shown(foraged.judgements, base.similarity_floors(signal)[1]))
                summary.outcomes.append(outcome)
                if progress is not None:
                    progress(mode, n, len(qids), outcome)
            out["modes"][mode] = summary.figures()
            out.setdefault("reliability", {})[mode] = reliability(summary.outcomes)
            if mode == "checked":
                out["answer_floor_sweep"] = answer_floor_sweep(summary.outcomes)
            out["queries"][mode] = [vars(o) | {"seconds": round(o.seconds, 2)} for o in summary.outcomes]
    return out


def best_shown(judgements: Sequence[ChunkJudgement], topic_floor: float) -> list[tuple[float, bool]]:
    """Each document's best passage shown from ``topic_floor`` on, as a calibrated coverage weighs them
    (:meth:`Ledger.best_shown`); empty where the check recorded no scores (not calibrated, or ``judge`` mode)."""
    ledger = Ledger(related_floor=-math.inf, shown_floor=topic_floor)
    ledger.record(judgements, Iteration(1))
    return ledger.best_shown()


SWEEP_FLOORS = (0.43, 0.5, 0.52, 0.55, 0.6, 0.65, 0.7, 0.73, 0.76)  # the text's and the store's floors


def coverage_at(verdicts: Sequence[tuple[Any, ...]], floor: float) -> float:
    """The Forager's coverage rule over the judge's verdicts ``(tag, kind, relevance[, confirmed])`` with ``floor``
    as the answer floor: 1.0 an answer with a method or result at or above it (and not left unconfirmed by the
    run's retrieval-signal confirmation), 0.75 only background answers, 0.5 any other answer or interesting passage
    at or above it (``Ledger.supported``: a related passage must be as close as an answer), else 0."""
    answers = [kind for tag, kind, rel, *confirmed in verdicts
               if tag == "answers" and rel is not None and rel >= floor and (confirmed or [None])[0] is not False]
    if any(kind != "background" for kind in answers):
        return 1.0
    if answers:
        return 0.75
    return 0.5 if any(v[0] in ("answers", "interesting") and (v[2] is None or v[2] >= floor) for v in verdicts) \
        else 0.0


def answer_floor_sweep(outcomes: Sequence[QueryOutcome]) -> list[dict[str, float]]:
    """Coverage on answerable and unanswerable requirements and false coverage had the checked run used
    another answer floor, recomputed from its verdicts (an estimate: the deep dives and reformulations the
    run made are those of its own floor)."""
    rows = []
    for floor in SWEEP_FLOORS:
        ans = [coverage_at(o.verdicts, floor) for o in outcomes if o.answerable]
        una = [coverage_at(o.verdicts, floor) for o in outcomes if not o.answerable]
        rows.append({"answer_floor": floor,
                     "coverage_answerable": round(sum(ans) / len(ans), 4) if ans else math.nan,
                     "answered_answerable": round(sum(c >= FALSE_COVERAGE for c in ans) / len(ans), 4) if ans
                     else math.nan,
                     "false_coverage": round(sum(c >= FALSE_COVERAGE for c in una) / len(una), 4) if una
                     else math.nan})
    return rows


def similarity_profile(store: Store, embedder: Embedder, dataset: BeirDataset,
                       qrels: Mapping[str, Mapping[str, int]], qids: Sequence[str],
                       corpus_ids: Mapping[str, Sequence[str]], alpha: float, k: int = 12) -> list[dict[str, Any]]:
    """Per query, over its top ``k`` hybrid chunks: the highest similarity (the relevance check's signal:
    cosine of the query and the chunk text) of a relevant chunk and of a non-relevant one, and the
    similarities of all relevant chunks. What the check's floors are calibrated from."""
    rows = []
    vectors = embedder.embed([dataset.queries[q] for q in qids]) if qids else []
    seen: dict[str, list[float]] = {}  # chunk id -> its text's embedding (queries share chunks)
    for q, vector in zip(qids, vectors, strict=True):
        hits = store.hybrid(dataset.queries[q], vector, k, alpha)
        if not hits:
            continue
        new = [h.chunk for h in hits if h.chunk.chunk_id not in seen]
        for chunk, v in zip(new, embedder.embed([c.text for c in new]) if new else [], strict=True):
            seen[chunk.chunk_id] = list(v)
        texts = [seen[h.chunk.chunk_id] for h in hits]
        relevant = {c for c, g in qrels[q].items() if g > 0}
        rel: list[float] = []
        other: list[float] = []
        for hit, v in zip(hits, texts, strict=True):
            sim = sum(a * b for a, b in zip(v, vector, strict=True))  # unit vectors
            (rel if relevant & set(corpus_ids.get(hit.chunk.doc_id, [])) else other).append(sim)
        rows.append({"qid": q, "relevant": rel, "best_other": max(other, default=-1.0)})
    return rows
