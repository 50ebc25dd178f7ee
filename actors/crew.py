"""The crews an Orchestrator drives: who searches, ingests, forages and writes for a run.

:class:`Crew` is what the Orchestrator (actors/orchestrator.py) talks to: every capability a caller uses is declared
on it, with a default where a crew may lack it. :class:`~actors.ray_crew.RayCrew` (actors/ray_crew.py) runs the
workers as Ray actors; :class:`LocalCrew` runs the same step objects in-process, for unit tests. The loop itself does
not know which it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from messages.forage import ForageRequest, RequirementCoverage
from messages.ingest import IngestRequest, IngestResult
from messages.plan import Requirement
from messages.search import SearchRequest, SearchResults
from messages.write import Report, WriteRequest

T = TypeVar("T")


class Crew(Protocol):
    """What the Orchestrator asks of the workers of a run. A crew subclasses this port (``class X(Crew)``) and so
    inherits the defaults of the capabilities a crew may lack: results all at once (``forage_each``), nothing to
    start ahead (``start_foragers``), no known bound on added Foragers (``room_for_foragers``)."""

    async def search(self, request: SearchRequest) -> SearchResults: ...
    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]: ...
    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]: ...
    async def write(self, request: WriteRequest) -> Report: ...
    async def close(self) -> None: ...

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        """The requests' results as each Forager finishes, so each is checkpointed at once. By default the
        results of :meth:`forage`, once all are done."""

        async def all_at_once() -> AsyncGenerator[RequirementCoverage, None]:
            for cov in await self.forage(requests):
                yield cov

        return all_at_once()

    def start_foragers(self, requirements: Sequence[Requirement]) -> Awaitable[None]:
        """Start (and warm) the Foragers of ``requirements`` ahead of their first forage, in the background of the
        iteration's search and ingest. By default there is nothing to start: Foragers start on first use."""
        return _nothing()

    def room_for_foragers(self) -> int | None:
        """How many more Foragers the crew could ever hold (a re-plan adds no more requirements than that); None
        when it is not known or there is no bound (the default)."""
        return None


async def _nothing() -> None:
    return None


async def as_completed(aws: Sequence[Awaitable[T]]) -> AsyncGenerator[T, None]:
    """Yield the results of ``aws`` as each completes; closing the generator early (or a failure) cancels the
    rest here and waits for them (a Ray actor call already sent goes on in its actor: only the wait is dropped)."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        for next_done in asyncio.as_completed(tasks):
            yield await next_done
    finally:
        pending = [task for task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


class LocalIngestor(Protocol):
    """What a :class:`LocalCrew` asks of its ingestor (an IngestStep, or an Ingestor used in-process)."""

    def ingest(self, request: IngestRequest) -> IngestResult: ...
    def index_new_chunks(self) -> int: ...


class LocalForager(Protocol):
    """What a :class:`LocalCrew` asks of a Forager (a ForageStep, or a Forager used in-process)."""

    async def forage(self, request: ForageRequest) -> RequirementCoverage: ...
    async def warm(self, requirement: Requirement | None = None) -> None: ...


class LocalCrew(Crew):
    """Runs the step objects in this process (unit tests; no Ray). ``foragers``: by requirement id (a mapping that
    makes a requirement's Forager on first use may leave it out until then: it is started then, not ahead)."""

    def __init__(self, searcher: Any, ingestor: LocalIngestor, foragers: Mapping[str, LocalForager],
                 writer: Any) -> None:
        self.searcher, self.ingestor, self.foragers, self.writer = searcher, ingestor, foragers, writer

    async def search(self, request: SearchRequest) -> SearchResults:
        if asyncio.iscoroutinefunction(self.searcher.search):
            return await self.searcher.search(request)
        return await asyncio.to_thread(self.searcher.search, request)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        results = [await asyncio.to_thread(self.ingestor.ingest, r) for r in requests]
        if any(r.status == "stored" for r in results):
            await asyncio.to_thread(self.ingestor.index_new_chunks)
        return results

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        return list(await asyncio.gather(*(self.foragers[r.requirement.id].forage(r) for r in requests)))

    def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        return as_completed([self.foragers[r.requirement.id].forage(r) for r in requests])

    async def start_foragers(self, requirements: Sequence[Requirement]) -> None:
        for r in requirements:
            forager = self.foragers.get(r.id)
            if forager is not None:
                await forager.warm(r)

    async def write(self, request: WriteRequest) -> Report:
        return await self.writer.write(request)

    async def close(self) -> None:
        return None
