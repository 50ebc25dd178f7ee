"""The Ingestor pool of a RayCrew (actors/ray_crew.py): every document one call with a timeout, a hung or crashed
Ingestor replaced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from actors.reservation import kill_actor
from actors.steps.events import Emit
from infra.settings import Settings
from messages.ingest import IngestRequest, IngestResult
from messages.status import Stage


class IngestorPool:
    """``size()`` Ingestor actors, each made by ``make(slot)`` (the crew places it in the run's reservation), that
    ingest a batch of documents between them; what goes wrong with one document is said with ``emit`` and becomes
    that document's failed result, never the run's."""

    def __init__(self, settings: Settings, emit: Emit, size: Callable[[], int], make: Callable[[int], Any]) -> None:
        self.settings, self.emit, self.size, self.make = settings, emit, size, make
        self.actors: list[Any] = []

    def release(self) -> None:
        """Let the pool's Ingestors go (the loop is over)."""
        for actor in self.actors:
            kill_actor(actor)
        self.actors = []

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        """Every document of ``requests`` (in order), each one call with a timeout (``ingest.timeout_s``) on one of
        the pool's Ingestors; one that hangs or crashes is replaced, a crashed document tried again up to
        ``ray.max_task_retries`` times; the batch's chunks are indexed once some are stored."""
        from actors.options import method_options

        if not requests:
            return []
        while len(self.actors) < self.size():
            self.actors.append(self.make(len(self.actors)))
        queue: asyncio.Queue[tuple[int, IngestRequest]] = asyncio.Queue()
        for i, r in enumerate(requests):
            queue.put_nowait((i, r))
        results: list[IngestResult | None] = [None] * len(requests)
        opts = method_options("ingestor", "ingest", self.settings)
        timeout = self.settings.ingest.timeout_s
        ready: set[int] = set()  # slots whose Ingestor has built its step

        async def worker(slot: int) -> None:
            import ray

            while not queue.empty():
                i, req = queue.get_nowait()
                t0 = time.monotonic()
                crashes = 0
                while results[i] is None:
                    actor = self.actors[slot]
                    try:
                        if slot not in ready:  # a new Ingestor builds its parts before the clock starts
                            await actor.ready.remote()
                            ready.add(slot)
                            t0 = time.monotonic()
                        results[i] = await asyncio.wait_for(actor.ingest.options(**opts).remote(req), timeout)
                    except TimeoutError:  # a parse that hangs would hang again: no second try
                        self.replace(slot)
                        ready.discard(slot)
                        results[i] = self._failed(req, f"parsing took longer than {timeout:.0f}s; ingestor replaced",
                                                  time.monotonic() - t0, retryable=True)
                    except ray.exceptions.RayActorError as exc:
                        # the process died under this document (segfault, OOM, kill): a fresh Ingestor in its
                        # place, and the document once more (ingest is idempotent) up to ray.max_task_retries
                        crashes += 1
                        self.replace(slot)
                        ready.discard(slot)
                        if crashes <= self.settings.ray.max_task_retries:
                            self.emit(Stage.INGEST, "progress", f"{req.candidate.key}: queued again after a crash",
                                      key=req.candidate.key, phase="queued", reason=f"ingestor crashed ({crashes})")
                            continue
                        results[i] = self._failed(
                            req, f"ingestor crashed on {crashes} attempt(s) ({type(exc).__name__}); "
                                 "the document may crash the parser", time.monotonic() - t0, retryable=True)
                    except Exception as exc:  # noqa: BLE001 — one document, not the run
                        results[i] = self._failed(req, f"{type(exc).__name__}: {exc}", time.monotonic() - t0)

        await asyncio.gather(*(worker(slot) for slot in range(len(self.actors))))
        done = [r for r in results if r is not None]
        if any(r.status == "stored" for r in done):
            await self.index_new_chunks()
        return done

    async def index_new_chunks(self) -> None:
        """Fold the batch's chunks into the store's search indexes before the Foragers search (one Ingestor does
        it: :meth:`actors.steps.ingest.step.IngestStep.index_new_chunks`). An Ingestor lost meanwhile only leaves
        the search slower."""
        import ray

        from actors.options import method_options

        opts = method_options("ingestor", "index_new_chunks", self.settings)
        try:
            await self.actors[0].index_new_chunks.options(**opts).remote()
        except ray.exceptions.RayError as exc:
            self.emit(Stage.INGEST, "indexed", f"indexing the new chunks failed ({type(exc).__name__}); search "
                      "stays correct but slower", folded=0, error=str(exc)[:300])

    async def start(self) -> None:
        """Create the Ingestor pool (:func:`actors.options.ingestor_pool_size`) and build their steps now."""
        while len(self.actors) < self.size():
            self.actors.append(self.make(len(self.actors)))
        await asyncio.gather(*(actor.ready.remote() for actor in self.actors))

    def replace(self, slot: int) -> None:
        """A fresh Ingestor in ``slot``: the old one hung or crashed on a document (Ray may have restarted
        it, or given up after ``ray.max_restarts``); the next documents must not depend on which."""
        kill_actor(self.actors[slot])
        self.actors[slot] = self.make(slot)

    def _failed(self, req: IngestRequest, reason: str, seconds: float, retryable: bool = False) -> IngestResult:
        self.emit(Stage.INGEST, "failed", f"{req.candidate.path or req.candidate.key}: {reason}",
                  key=req.candidate.key, reason=reason)
        return IngestResult(run_id=req.run_id, key=req.candidate.key, path=req.candidate.path, status="failed",
                            reason=reason, retryable=retryable, seconds=seconds)
