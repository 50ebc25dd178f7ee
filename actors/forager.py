"""Forager actor: one per requirement, alive for the whole run so it remembers what it judged."""

from __future__ import annotations

import os
import traceback
from typing import Any

from actors.status_hub import HubEmit
from infra.settings import Settings
from messages.forage import ForageRequest, RequirementCoverage
from messages.plan import Requirement
from messages.status import Stage


class Forager:
    def __init__(self, settings: Settings, run_id: str, hub: object | None = None, llm: Any | None = None,
                 embedder: Any | None = None) -> None:
        self.settings = settings
        self.run_id = run_id
        self._emit = HubEmit(run_id, hub)
        self._llm = llm
        self._embedder = embedder
        self._step = None

    def _ensure(self):
        if self._step is None:
            from actors.cpu_gate import node_cpu_gate
            from actors.embed_endpoint import actor_embedder
            from actors.steps.forage.step import ForageStep
            from infra.rerank import build_relevance
            from infra.store import build_store

            from actors.llm_endpoint import actor_llm

            # with ray.llm_slots every LLM call is made by a node's LLM endpoint, holding one of its slots
            llm = actor_llm(self.settings, self._llm)
            embedder = actor_embedder(self.settings, self._embedder)
            store = build_store(self.settings)
            relevance, problem = build_relevance(self.settings, embedder, store)
            if problem:
                self._emit(Stage.FORAGE, "degraded", problem, step="relevance check")
            gate = node_cpu_gate(self.settings)
            self._step = ForageStep(self.settings, store, embedder, llm, emit=self._emit,
                                    relevance=relevance, cpu=gate.held if gate is not None else None)
        return self._step

    async def forage(self, request: ForageRequest) -> RequirementCoverage:
        """Forage one requirement. Any error becomes a failed requirement, never a failed run."""
        from infra.cluster import ray_node

        node = ray_node()  # which machine of a lab cluster forages this requirement
        self._emit(Stage.FORAGE, "actor", f"forager pid {os.getpid()} on {request.requirement.id}"
                   + (f" (node {node})" if node else ""),
                   iteration=request.iteration, requirement_id=request.requirement.id, pid=os.getpid(), node=node)
        try:
            step = self._ensure()
            return await step.forage(request)
        except Exception as exc:  # noqa: BLE001 — the boundary where a requirement fails alone
            reason = f"{type(exc).__name__}: {exc}"
            self._emit(Stage.FORAGE, "failed", reason, iteration=request.iteration,
                       requirement_id=request.requirement.id, traceback=traceback.format_exc(limit=5))
            return RequirementCoverage(run_id=request.run_id, requirement=request.requirement,
                                       iteration=request.iteration, status="failed", coverage=0.0, error=reason)
        finally:
            await self._emit.aflush()  # this requirement's events are in the log before its result

    def pid(self) -> int:
        return os.getpid()

    async def ready(self, requirement: Requirement | None = None) -> int:
        """Build the step (store, embedder, LLM client) and open what its first iteration reads (with
        ``requirement``: its embedding too) now rather than on the first forage; the pid."""
        await self.warm(requirement)
        return os.getpid()

    async def warm(self, requirement: Requirement | None = None) -> None:
        """:meth:`ready` without the pid (a :class:`~actors.crew.LocalCrew` starting its Foragers ahead)."""
        await self._ensure().warm(requirement)
