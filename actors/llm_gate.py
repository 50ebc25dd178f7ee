"""LLMGate actor: one per Ray cluster; with ``ray.llm_order = "progress"`` every slot-holding LLM call waits here for its turn.

The logic is :class:`infra.llm.gate.PriorityGate`. The gate admits at most as many calls as the
cluster declares ``llm_slot`` resources (read again every few seconds, so a node that joins adds its
slots). Only the admission passes through it: :meth:`LLMGate.acquire` returns a lease when the call's
turn comes, the caller runs the usual slot-holding Ray task itself and gives the lease back with
:meth:`LLMGate.release` (not awaited), so a call costs the gate two tiny messages and never carries
prompts through it. A lease that is never given back (its Forager died mid-call) expires after
``lease_s`` (the LLM call's whole time budget) and its place goes to the next waiter. The gate is named and
detached in Forage's namespace, so concurrent runs (several drivers, the gateway) share one queue
over the same slots; :func:`llm_gate` finds or creates it.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from infra.llm.gate import PriorityGate

GATE_NAME = "forage-llm-gate"
CAPACITY_REFRESH_S = 5.0
LEASE_CHECK_S = 5.0


class LLMGate:
    def __init__(self, capacity: int | None = None) -> None:
        """``capacity``: places at once; None: the cluster's ``llm_slot`` total (at least 1)."""
        self._fixed = capacity
        self._cached = (0.0, 1)
        self.gate = PriorityGate(self._capacity)
        self._ids = itertools.count(1)
        self._leases: dict[int, float] = {}  # lease -> monotonic deadline
        self._reaper: asyncio.Task[None] | None = None
        self.expired = 0

    def _capacity(self) -> int:
        if self._fixed is not None:
            return self._fixed
        checked, value = self._cached
        now = time.monotonic()
        if now - checked > CAPACITY_REFRESH_S:
            import ray

            from actors.options import LLM_SLOT

            value = max(1, int(ray.cluster_resources().get(LLM_SLOT, 0)))
            self._cached = (now, value)
        return value

    async def acquire(self, priority: float, lease_s: float) -> int:
        """Wait for this call's turn (lower ``priority`` first, then arrival); a lease to :meth:`release`."""
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())
        await self.gate.acquire(priority)
        lease = next(self._ids)
        self._leases[lease] = time.monotonic() + lease_s
        return lease

    def release(self, lease: int) -> None:
        """The call is over: its place goes to the next waiter (a lease given back twice, or after it expired, is ignored)."""
        if self._leases.pop(lease, None) is not None:
            self.gate.release()

    def expire(self, now: float | None = None) -> int:
        """Give back the places of leases past their deadline; how many."""
        now = time.monotonic() if now is None else now
        late = [lease for lease, deadline in self._leases.items() if deadline <= now]
        for lease in late:
            self.release(lease)
        self.expired += len(late)
        return len(late)

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(LEASE_CHECK_S)
            self.expire()

    async def idle(self, timeout: float = 30.0) -> bool:
        """Wait until every place is given back (releases are not awaited by callers); False on timeout."""
        return await self.gate.idle(timeout)

    def stats(self) -> dict[str, int]:
        return {**self.gate.stats(), "leases": len(self._leases), "expired": self.expired}


def llm_gate(settings: Any) -> Any:
    """The cluster's LLMGate actor handle (created on first use, options from :func:`actors.options.options_for`)."""
    import ray

    from actors.options import options_for

    return ray.remote(LLMGate).options(**options_for("llm_gate", settings, name=GATE_NAME)).remote()


def with_slots(llm: Any, settings: Any) -> Any:
    """``llm`` itself, or — when ``ray.llm_slots`` is set — a SlottedLLM whose every call holds one
    ``llm_slot``, ordered by the cluster's gate unless ``ray.llm_order`` is "fifo". For the
    LLM-calling actors (Forager; Ingestor with contextual retrieval), inside their processes."""
    from actors.options import llm_call_options
    from infra.llm.slotted import SlottedLLM

    slot = llm_call_options(settings)
    if slot is None:
        return llm
    gate = llm_gate(settings) if settings.ray.llm_order == "progress" else None
    # a lease outlives the longest call: every attempt timing out, plus margin
    lease_s = settings.llm.timeout_s * (settings.llm.max_retries + 1) + 60.0
    return SlottedLLM(llm, slot, hosts=dict(settings.ray.ollama_hosts), gate=gate, lease_s=lease_s)
