"""REST routes that start, approve, cancel, resume and read runs (``/api/runs``) and list the models a run can
use (``/api/models``)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Query

from gateway.api import Approval, Message, ModelChoices, RunCreate, RunCreated, RunListItem, RunView
from gateway.routes import manager
from gateway.runs import RunManager
from gateway.security import authorize
from infra.errors import ForageError, describe

router = APIRouter(tags=["runs"], dependencies=[Depends(authorize)])
Manager = Depends(manager)


@router.post("/api/runs", response_model=RunCreated, status_code=202,
             summary="Start a run: requirements are proposed in the background")
async def create_run(body: RunCreate, runs: RunManager = Manager) -> RunCreated:
    run = await runs.create(body)
    return RunCreated(run_id=run.run_id, status=run.status, state_url=f"/api/runs/{run.run_id}",
                      events_url=f"/ws/runs/{run.run_id}")


@router.get("/api/models", response_model=ModelChoices,
            summary="Model backends and the models the Ollama server has, for the New-run form")
async def models(runs: RunManager = Manager) -> ModelChoices:
    from infra.llm import build_llm, ollama_host

    settings = runs.settings

    async def served(backend: str) -> tuple[list[str], str | None]:
        try:
            llm: Any = build_llm(settings.updated(llm={"backend": backend}))
            return await llm.installed_models(), None
        except ForageError as exc:
            return [], describe(exc)

    found, error = await served("ollama")
    openai_found, openai_error = await served("openai") if settings.llm.backend == "openai" else ([], None)
    return ModelChoices(backends=["ollama", "openai", "embedded"], backend=settings.llm.backend,
                        model=settings.llm.model, ollama_host=ollama_host(settings), ollama_models=found,
                        ollama_error=error, openai_base_url=settings.llm.base_url, openai_models=openai_found,
                        openai_error=openai_error)


@router.get("/api/runs", response_model=list[RunListItem],
            summary="Every run in the runs folder and every run this gateway holds, newest first")
async def list_runs(runs: RunManager = Manager) -> list[RunListItem]:
    return runs.list()


@router.get("/api/runs/{run_id}", response_model=RunView,
            summary="A run's state (run.json and live); `proposal` is set once requirements await approval")
async def get_run(run_id: str, runs: RunManager = Manager) -> RunView:
    return runs.state(run_id)


@router.get("/api/runs/{run_id}/proposal", response_model=RunView,
            summary="Wait (up to `wait` seconds) until planning is over, then the run's state with its proposal")
async def proposal(run_id: str, wait: float = Query(30.0, ge=0, le=300), runs: RunManager = Manager) -> RunView:
    run = runs.held(run_id)
    try:
        await asyncio.wait_for(run.planned.wait(), wait)
    except TimeoutError:
        pass
    return runs.state(run_id)


@router.post("/api/runs/{run_id}/approve", response_model=RunView,
             summary="Approve the proposal, optionally with edited requirements and search strings")
async def approve(run_id: str, body: Approval | None = None, runs: RunManager = Manager) -> RunView:
    runs.approve(runs.held(run_id), body or Approval())
    return runs.state(run_id)


@router.post("/api/runs/{run_id}/cancel", response_model=RunView,
             summary="Cancel: before approval at once; a running run (also one another process drives, as "
                     "`forage cancel`) stops at its next stage boundary")
async def cancel(run_id: str, runs: RunManager = Manager) -> RunView:
    runs.cancel_id(run_id)
    return runs.state(run_id)


@router.post("/api/runs/{run_id}/resume", response_model=RunView,
             summary="Continue an interrupted, cancelled or failed run, as `forage resume` does",
             description="Finished ingestion and foraging are kept. The run's events go on on the same "
                         "WebSocket, numbered after the ones it already has.",
             responses={404: {"model": Message}, 409: {"model": Message}})
async def resume(run_id: str, runs: RunManager = Manager) -> RunView:
    await runs.resume(run_id)
    return runs.state(run_id)
