"""LLMGate actor: one per Ray cluster; every slot-holding LLM call passes through it in priority order.

The logic is :class:`infra.llm.gate.PriorityGate`. The gate admits at most as many calls as the
cluster declares ``llm_slot`` resources (read again every few seconds, so a node that joins adds its
slots), then starts the call as the usual slot-holding Ray task (:func:`infra.llm.slotted.start_call`)
and waits for it. Because the gate owns both the place and the task, a Forager that dies mid-call
leaks nothing: the call ends, the place is handed to the next waiter. The gate is named and
detached in Forage's namespace, so concurrent runs (several drivers, the gateway) share one queue
over the same slots; :func:`llm_gate` finds or creates it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from infra.llm.gate import PriorityGate

GATE_NAME = "forage-llm-gate"
CAPACITY_REFRESH_S = 5.0


class LLMGate:
    def __init__(self, capacity: int | None = None) -> None:
        """``capacity``: places at once; None: the cluster's ``llm_slot`` total (at least 1)."""
        self._fixed = capacity
        self._cached = (0.0, 1)
        self.gate = PriorityGate(self._capacity)

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

    async def call(self, priority: float, llm: Any, messages: Sequence[Any], schema: type, hosts: dict[str, str] | None,
                   options: dict[str, Any]) -> Any:
        """One structured call of ``llm`` as a slot-holding Ray task, started when the gate admits it."""
        from infra.llm.slotted import start_call

        async with self.gate.held(priority):
            return await start_call(llm, list(messages), schema, hosts, options)

    def stats(self) -> dict[str, int]:
        return self.gate.stats()


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
    return SlottedLLM(llm, slot, hosts=dict(settings.ray.ollama_hosts), gate=gate)
