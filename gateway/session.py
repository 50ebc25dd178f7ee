"""Driving one research run from a process outside the cluster (CLI, scripts, tests).

A :class:`ResearchSession` starts (or joins) Ray with privacy-safe settings, creates the run's
StatusHub and Orchestrator actors, asks for requirements, and after approval runs the loop while
handing every status event to a callback, in order. It returns when the run has finished — it
waits on the run's future and the hub's long poll (gateway/events.py), never on sleeps. :func:`resume_plan`
turns a run's run.json back into its settings and approved plan, for `forage resume` and the gateway's resume.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.options import driver_node, llm_slot_resources, options_for
from actors.orchestrator import Orchestrator
from actors.status_hub import StatusHub
from actors.steps.run.rundir import RunDir, new_run_id
from gateway.events import follow_hub
from infra.errors import ConfigError
from infra.settings import Settings, settings_for_run
from messages.plan import PlanRequest, RequirementsPlan, ResearchQuery
from messages.run_state import FollowUp, RecordedSettings, RunState
from messages.status import RunSummary, StatusEvent


class ResearchSession:
    def __init__(self, settings: Settings, *, llm: Any | None = None, run_id: str | None = None,
                 quiet: bool = False) -> None:
        from infra.ray_runtime import start_ray

        # actors run in other processes (other machines, later): hand them absolute paths
        settings = settings.updated(run={"runs_dir": settings.run.runs_dir.expanduser().resolve()},
                                    store={"path": settings.store.path.expanduser().resolve()})
        self.settings = settings
        self.run_id = run_id or new_run_id()
        self.rundir = RunDir(settings.run.runs_dir, self.run_id)
        start_ray(num_cpus=settings.ray.num_cpus, address=settings.ray.address, quiet=quiet,
                  resources=llm_slot_resources(settings), node_ip=_cluster_node_ip(settings))
        import ray

        home = driver_node()  # the run's coordinators stay on this machine when it has room
        self.hub = ray.remote(StatusHub).options(**options_for("status_hub", settings, home_node=home)).remote(
            self.run_id, str(self.rundir.events_jsonl))
        self.orchestrator = ray.remote(Orchestrator).options(
            **options_for("orchestrator", settings, home_node=home)).remote(settings, self.run_id, self.hub, llm=llm)
        self.seen = 0

    def plan(self, query: str) -> RequirementsPlan:
        import ray

        q = ResearchQuery(run_id=self.run_id, text=query)
        return ray.get(self.orchestrator.plan.remote(PlanRequest(run_id=self.run_id, query=q)))

    def propose_search(self, plan: RequirementsPlan) -> RequirementsPlan:
        """Proposed search strings for a plan the researcher wrote (none when offline)."""
        import ray

        return ray.get(self.orchestrator.propose_search.remote(plan))

    def run(self, plan: RequirementsPlan, on_event: Callable[[StatusEvent], None] | None = None,
            poll_s: float = 0.5, follow_up: FollowUp | None = None) -> RunSummary:
        """Run the approved plan; ``follow_up``: the earlier run it follows up (its documents and evidence)."""
        import ray

        approved = plan if plan.approved else plan.approve()
        done = self.orchestrator.run.remote(approved, follow_up=follow_up)
        # once the run's future is ready, the hub already holds the final event (it is published and awaited
        # before run() returns): read until it is delivered
        for batch in follow_hub(self.hub, self.seen, ended=lambda: bool(ray.wait([done], timeout=0)[0]),
                                wait_s=poll_s, settle_s=5.0):
            for ev in batch:
                self.seen = ev.seq
                if on_event is not None:
                    on_event(ev)
        return ray.get(done)

    def close(self) -> None:
        import ray

        for actor in (self.orchestrator, self.hub):
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 — already gone
                pass


def check_model_servers(settings: Settings) -> None:
    """The model server and model a run needs (and the embedding server, for Ollama embeddings) answer:
    LLMUnavailable (one sentence: what is missing, how to fix it) before any work starts. The CLI's preflight and
    the gateway's POST /api/runs both call it. Blocking: from async code, call it in a worker thread."""
    import asyncio

    from infra.llm import build_llm

    asyncio.run(build_llm(settings).check())
    if settings.embed.backend in ("ollama", "openai"):
        from infra.embed import build_embedder

        build_embedder(settings).check()


def resume_plan(settings: Settings, run_id: str, state: RunState, *,
                address: str | None = None) -> tuple[Settings, RequirementsPlan]:
    """The settings and approved plan that continue run ``run_id`` from its run.json ``state``.

    The run's own settings come from run.json: every value it recorded (``Settings.record()``: all but
    secrets and the Ray address); from an older run.json its preset, coverage goal, iterations, LLM and
    embedder backends, store and library (online when it had approved search strings), the rest from
    ``settings``.
    ``address``: the Ray cluster to run on. ConfigError when the run is finished or was never approved.
    """
    if state.status == "finished":
        raise ConfigError(f"run {run_id} is already finished")
    if not state.approved:
        raise ConfigError(f"run {run_id} never started (no approved requirements); start a new run")
    recorded = state.settings or RecordedSettings()
    searches = tuple(state.search_queries)
    if recorded.resolved:  # every value the run was made with (run.json since this format)
        settings = settings_for_run(settings, recorded=recorded.resolved, address=address)
    else:  # an older run.json: its summary, the rest from ``settings``
        settings = settings_for_run(
            settings, preset=recorded.preset, min_coverage=recorded.min_coverage,
            max_iterations=recorded.max_iterations, llm_backend=recorded.llm,
            embedder=recorded.embedder, store=Path(state.store_path) if state.store_path else None,
            offline=not searches, address=address)
        settings = settings.updated(search={"library": Path(state.library) if state.library else None})
    query = ResearchQuery(run_id=run_id, text=state.query or "")
    plan = RequirementsPlan(run_id=run_id, query=query, approved=True, search_queries=searches,
                            requirements=tuple(state.requirements))
    return settings, plan


def _cluster_node_ip(settings: Settings) -> str | None:
    """This machine's lab address when it drives a lab cluster from one of its nodes
    (``ray.lab_network`` set and an ``address`` that is not Ray Client); else None (loopback)."""
    address = settings.ray.address
    if not settings.ray.lab_network or not address or address.startswith("ray://"):
        return None
    from infra.cluster import lab_ip

    return lab_ip(settings.ray.lab_network)
