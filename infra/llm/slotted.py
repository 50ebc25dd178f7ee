"""An LLM whose every call holds one Ray ``llm_slot`` (a custom resource per LLM endpoint).

:class:`SlottedLLM` wraps another LLM (an :class:`~infra.llm.ollama.OllamaLLM`: a small, picklable
client) and runs each ``structured`` call as a Ray task that asks for one unit of the custom
resource ``llm_slot``. Ray runs at most as many such calls at once as ``llm_slot`` units exist, and
runs each on a node that has a free unit — so a cluster whose GPU nodes each declare their LLM
endpoint's capacity (``ray start --resources '{"llm_slot": 1}'``) keeps every endpoint busy, and no
endpoint gets more calls than it has slots, however many Foragers ask. Foragers themselves all run
at once; waiting for a slot happens per call, so calls of different requirements interleave.

With a gate (:class:`actors.llm_gate.LLMGate`, ``ray.llm_order = "progress"``; not the default), calls
waiting for a slot are served in priority order rather than first come, first served: a call's
priority is how many calls this LLM (one Forager's) has completed since :meth:`SlottedLLM.new_round`,
so a requirement further along its chain of dependent calls goes first and the longest chain does
not finish alone at the end (``bench/forage_parallel.py --order fifo progress`` measures both; on the
2-core bench machine progress was the slower of the two, see docs/foraging.md). If
the gate is gone (killed, its node lost) a call runs as a plain slot-holding task instead: it is
never lost, only unordered.

Errors of the wrapped LLM (LLMOutputError, LLMTimeout, ...) reach the caller as themselves (Ray's
task error is also an instance of the original exception class).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any

from infra.llm.base import LLM, ChatMessage, T


def _call(llm: LLM, messages: list[ChatMessage], schema: type[T], hosts: dict[str, str] | None = None) -> T:
    """The body of the slot-holding Ray task: one structured call, in the task's own event loop,
    to the LLM endpoint of the node the task runs on (``hosts``: :func:`infra.cluster.on_this_node`)."""
    if hosts:
        from infra.cluster import on_this_node

        llm = on_this_node(llm, hosts)
    return asyncio.run(llm.structured(messages, schema))


@functools.cache
def _task() -> Any:
    import ray

    return ray.remote(_call)


async def start_call(llm: LLM, messages: list[ChatMessage], schema: type[T], hosts: dict[str, str] | None,
                     options: dict[str, Any]) -> T:
    """Run one call as a Ray task with ``options`` (which ask for one ``llm_slot``) and wait for it."""
    return await _task().options(**options).remote(llm, messages, schema, hosts or None)


class SlottedLLM:
    """``inner``'s calls, each as a Ray task holding one ``llm_slot`` (options from
    :func:`actors.options.llm_call_options`)."""

    queues_calls = True  # a call waits for a slot before it reaches a server: callers may issue many at once

    def __init__(self, inner: LLM, options: dict[str, Any], hosts: dict[str, str] | None = None,
                 gate: Any | None = None, lease_s: float = 600.0) -> None:
        self.inner = inner
        self.options = dict(options)
        self.hosts = dict(hosts or {})  # node name or IP -> endpoint (ray.ollama_hosts)
        self.gate = gate  # an LLMGate actor handle, or None: first come, first served
        self.lease_s = lease_s  # the gate takes a place back after this long if it is not given back
        self.name = f"{inner.name} (ray llm_slot)"
        self.calls = 0
        self.completed = 0  # calls answered (or failed) since new_round
        self.ungated = 0  # calls that ran without the gate because it was gone

    def new_round(self) -> None:
        """A new forage iteration: this requirement's priority starts again from zero."""
        self.completed = 0

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T]) -> T:
        self.calls += 1
        lease = None
        try:
            if self.gate is not None:
                import ray

                try:
                    lease = await self.gate.acquire.remote(-self.completed, self.lease_s)
                except ray.exceptions.RayActorError:  # the gate died: unordered, but the call still runs
                    self.ungated += 1
            return await start_call(self.inner, list(messages), schema, self.hosts, self.options)
        finally:
            self.completed += 1
            if lease is not None:
                self.gate.release.remote(lease)  # not awaited: the answer need not wait for the bookkeeping

    async def check(self) -> None:
        await self.inner.check()
