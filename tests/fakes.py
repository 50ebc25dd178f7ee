"""The scriptable crew the Orchestrator's tests drive it with, in one place.

:class:`ScriptedCrew` stands in for the workers (search, ingest, forage, write), not for the thing under test: the
Orchestrator's loop, stop rule, run record, re-planning and resume stay real. It implements the whole
:class:`actors.crew.Crew` port and is scripted per iteration and per requirement (coverage, new passages, any other
field of a Forager's result, failures), per search (how many documents) and per stage (where the driver "dies", where
a forage waits); it records every call it gets.

Helpers only; test modules import from here, never from one another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import Any

from actors.crew import Crew
from messages import (
    Candidate, ForageRequest, IngestRequest, IngestResult, Report, Requirement, RequirementCoverage, SearchRequest,
    SearchResults, WriteRequest,
)

#: a scripted value: one for every iteration and requirement; or by iteration (1, 2, ...; a sequence counts from 1),
#: each row one value or a value per requirement id. Past the last row the last one holds; a requirement missing
#: from a row gets the crew's ``default`` coverage (for coverage) or the field's model default (for other fields)
Script = Any


def scripted(script: Script, iteration: int, requirement_id: str) -> Any:
    """The value ``script`` gives ``requirement_id`` in ``iteration``; :data:`_MISSING` where it gives none."""
    if isinstance(script, Sequence) and not isinstance(script, str):
        script = {i + 1: row for i, row in enumerate(script)}
    if isinstance(script, Mapping):
        if not script:
            return _MISSING
        script = script[iteration] if iteration in script else script[max(script)] if iteration > max(script) \
            else _MISSING
    if isinstance(script, Mapping):
        return script.get(requirement_id, _MISSING)
    return script


_MISSING = object()


class ScriptedCrew(Crew):
    """A crew whose every answer is scripted.

    - ``documents``: how many new documents each search offers (keys ``file:/lib/{n}.pdf`` numbered on from the
      documents offered before: a resumed run's crew offers new keys), never exhausted; or ``batches``: the i-th
      search offers ``batches[i]`` documents (keys ``file:/lib/{i}-{j}.pdf``), the last one says it is exhausted.
    - ``failed_documents``: key -> the reason its ingestion failed; every other document is stored.
    - ``coverage`` (default ``default``), ``new_passages`` (default 1) and any other field of
      :class:`RequirementCoverage` as ``fields``: :data:`Script` per iteration and requirement; ``results``:
      requirement id -> a result whose other fields (judgements, evidence ...) every scripted result keeps.
    - ``failing``: requirement id -> the error its Forager fails with, every iteration.
    - ``each``: results reported one by one in plan order (``forage_each``, like LocalCrew and RayCrew) rather than
      all at once.
    - ``die_at``: (stage, n) where the driver is killed (SystemExit, which the run does not catch): ``("ingest", n)``
      the n-th ingestion, ``("forage", n)`` iteration n's forage, ``("write", n)`` the report after n iterations;
      ``die_after``: (iteration, n) after the first n results of that iteration (with ``each``).
    - ``hold_iteration``: that iteration's forage sets ``holding`` and waits for ``release``; ``on_forage(iteration)``
      is called as each forage starts.
    - ``room``: what :meth:`room_for_foragers` says; ``fail_start``: :meth:`start_foragers` fails.

    Recorded: ``searched``, ``ingested`` (requests), ``ingest_calls``, ``foraged`` (each call's requests),
    ``foraged_requirements`` ((iteration, id) per result), ``written``, ``closed``, and ``events``: the order of
    starts, searches and forages ("start R1 R2", "started", "search", "searched", "forage")."""

    def __init__(self, *, documents: int = 0, batches: Sequence[int] | None = None,
                 failed_documents: Mapping[str, str] | None = None, coverage: Script = None, default: float = 1.0,
                 new_passages: Script = 1, results: Mapping[str, RequirementCoverage] | None = None,
                 failing: Mapping[str, str] | None = None, each: bool = False,
                 die_at: tuple[str, int] | None = None, die_after: tuple[int, int] | None = None,
                 hold_iteration: int | None = None, on_forage: Callable[[int], None] | None = None,
                 room: int | None = None, fail_start: bool = False, writer: Any = None, **fields: Script) -> None:
        self.documents, self.batches = documents, batches
        self.failed_documents = dict(failed_documents or {})
        self.default = default
        self.fields: dict[str, Script] = {"coverage": coverage, "new_passages": new_passages, **fields}
        self.results = dict(results or {})
        self.failing = dict(failing or {})
        self.each, self.die_at, self.die_after = each, die_at, die_after
        self.hold_iteration, self.on_forage = hold_iteration, on_forage
        self.holding, self.release = asyncio.Event(), asyncio.Event()
        self.room, self.fail_start, self.writer = room, fail_start, writer
        self.searched: list[SearchRequest] = []
        self.ingested: list[IngestRequest] = []
        self.ingest_calls = 0
        self.foraged: list[list[ForageRequest]] = []
        self.foraged_requirements: list[tuple[int, str]] = []
        self.written: list[WriteRequest] = []
        self.events: list[str] = []
        self.closed = False

    # -- what was asked ----------------------------------------------------------------------------------------
    def foraged_iterations(self) -> list[int]:
        """The iteration of each forage call, in order."""
        return [requests[0].iteration for requests in self.foraged]

    def foraged_ids(self) -> list[list[str]]:
        """The requirement ids of each forage call, in order."""
        return [[r.requirement.id for r in requests] for requests in self.foraged]

    def ingested_keys(self) -> list[str]:
        return [r.candidate.key for r in self.ingested]

    # -- the port ----------------------------------------------------------------------------------------------
    def _maybe_die(self, stage: str, n: int) -> None:
        if self.die_at == (stage, n):
            raise SystemExit(f"driver killed during {stage} of iteration {n}")

    async def search(self, request: SearchRequest) -> SearchResults:
        self.events.append("search")
        for _ in range(3):  # waits on its sources, as a real search does
            await asyncio.sleep(0)
        self.events.append("searched")
        self.searched.append(request)
        if self.batches is not None:
            i = len(self.searched) - 1
            n = self.batches[i] if i < len(self.batches) else 0
            cands = tuple(Candidate(key=f"file:/lib/{i}-{j}.pdf", path=f"/lib/{i}-{j}.pdf") for j in range(n))
            return SearchResults(run_id=request.run_id, iteration=request.iteration, candidates=cands,
                                 exhausted=i >= len(self.batches) - 1)
        n = len(request.exclude_keys)
        cands = tuple(Candidate(key=f"file:/lib/{n + j}.pdf", path=f"/lib/{n + j}.pdf") for j in range(self.documents))
        return SearchResults(run_id=request.run_id, iteration=request.iteration, candidates=cands, exhausted=False)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        self.ingest_calls += 1
        self._maybe_die("ingest", self.ingest_calls)  # one ingestion per iteration in an uninterrupted run
        self.ingested.extend(requests)
        out = []
        for r in requests:
            reason = self.failed_documents.get(r.candidate.key)
            out.append(IngestResult(run_id=r.run_id, key=r.candidate.key, path=r.candidate.path,
                                    status="failed" if reason else "stored", reason=reason,
                                    doc_id=r.candidate.key.rsplit("/", 1)[-1]))
        return out

    async def _started_forage(self, requests: Sequence[ForageRequest]) -> int:
        iteration = requests[0].iteration
        self.events.append("forage")
        self._maybe_die("forage", iteration)
        self.foraged.append(list(requests))
        if self.on_forage:
            self.on_forage(iteration)
        if iteration == self.hold_iteration:
            self.holding.set()
            await self.release.wait()
        return iteration

    def result(self, r: ForageRequest) -> RequirementCoverage:
        """The scripted result of ``r`` (recorded in ``foraged_requirements``)."""
        rid = r.requirement.id
        self.foraged_requirements.append((r.iteration, rid))
        if rid in self.failing:
            return RequirementCoverage(run_id=r.run_id, requirement=r.requirement, iteration=r.iteration,
                                       status="failed", coverage=0.0, error=self.failing[rid])
        values = {name: scripted(script, r.iteration, rid) for name, script in self.fields.items()}
        if values["coverage"] is _MISSING or values["coverage"] is None:
            values["coverage"] = self.default
        values = {name: v for name, v in values.items() if v is not _MISSING}
        update = {"run_id": r.run_id, "requirement": r.requirement, "iteration": r.iteration, **values}
        if rid in self.results:
            return self.results[rid].model_copy(update=update)
        return RequirementCoverage(**update)

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        await self._started_forage(requests)
        return [self.result(r) for r in requests]

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        if not self.each:
            return super().forage_each(requests)
        return self._one_by_one(requests)

    async def _one_by_one(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        iteration = await self._started_forage(requests)
        for n, r in enumerate(requests):
            if self.die_after == (iteration, n):
                raise SystemExit(f"driver killed after {n} forage results of iteration {iteration}")
            yield self.result(r)

    async def start_foragers(self, requirements: Sequence[Requirement]) -> None:
        self.events.append("start " + " ".join(r.id for r in requirements))
        await asyncio.sleep(0)  # the search goes on meanwhile
        if self.fail_start:
            raise RuntimeError("no worker process")
        self.events.append("started")

    def room_for_foragers(self) -> int | None:
        return self.room

    async def write(self, request: WriteRequest) -> Report:
        self._maybe_die("write", request.iterations)
        self.written.append(request)
        if self.writer is not None:
            return await self.writer.write(request)
        return Report(run_id=request.run_id, markdown="# Report\n")

    async def close(self) -> None:
        self.closed = True
