"""What every `forage` command module shares: the Typer apps, the consoles, the progress view, the one-line
error text and the settings a run's options resolve to.

gateway/cli.py holds the run commands and adds the command groups of the other gateway/cli_*.py modules; those
modules import this one, never gateway/cli.py, so the command modules form no import cycle (an import contract
checks it).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from infra.errors import strip_ansi, unwrap, validation_text
from infra.settings import PresetName, Settings, settings_for_run
from messages.plan import Requirement, RequirementsPlan
from messages.status import Stage, StatusEvent

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Forage: local-first literature research.")
console = Console(stderr=False)
err = Console(stderr=True)
library_app = typer.Typer(no_args_is_help=True, help="Manage the shared paper library (sources, stores).")
app.add_typer(library_app, name="library")
eval_app = typer.Typer(no_args_is_help=True, help="Measure Forage's parts on public benchmarks.")
app.add_typer(eval_app, name="eval")


# -- progress ----------------------------------------------------------------------------------------
class ProgressView:
    """Live progress: iteration, stage, per-requirement coverage, documents ingested / failed."""

    def __init__(self, plan: RequirementsPlan, live: bool) -> None:
        self.plan = plan
        self.live = live
        self.iteration = 0
        self.stage = "starting"
        self.coverage: dict[str, float | str] = {r.id: "—" for r in plan.requirements}
        self.llm_calls: dict[str, int] = {}
        self.stored = self.skipped = self.failed = 0
        self.last = ""

    def update(self, ev: StatusEvent) -> None:
        if ev.iteration:
            self.iteration = max(self.iteration, ev.iteration)
        self.stage = ev.stage.value
        if ev.stage == Stage.INGEST and ev.kind == "document":
            status = ev.payload.get("status")
            self.stored += status == "stored"
            self.skipped += status == "skipped"
        if ev.stage == Stage.INGEST and ev.kind == "failed":
            self.failed += 1
        if ev.stage == Stage.FORAGE and ev.kind == "coverage" and ev.requirement_id:
            self.coverage[ev.requirement_id] = float(ev.payload.get("coverage", 0.0))
            self.llm_calls[ev.requirement_id] = int(ev.payload.get("llm_calls", 0))
        if ev.stage == Stage.FORAGE and ev.kind == "failed" and ev.requirement_id:
            self.coverage[ev.requirement_id] = "failed"
        if ev.stage == Stage.RUN and ev.kind == "replanned" and ev.payload.get("requirements"):
            added = tuple(Requirement.model_validate(r) for r in ev.payload["requirements"])
            self.plan = self.plan.model_copy(update={"requirements": (*self.plan.requirements, *added)})
            self.coverage.update({r.id: "—" for r in added})
        self.last = ev.message
        if self.live and ev.stage == Stage.RUN and ev.kind == "replanned":  # shown before they are searched
            console.print(f"[bold]re-planned:[/bold] {ev.message}", highlight=False)
        if not self.live and ev.message and ev.kind in (
                "iteration", "results", "document", "failed", "coverage", "finished", "started", "replanned",
                "replan_skipped", "retried", "waiting", "placed", "fitted"):
            who = f"[{ev.requirement_id}] " if ev.requirement_id else ""
            console.print(f"[dim]{ev.seq:>4}[/dim] {ev.stage.value:<8} {who}{ev.message}", highlight=False)

    def __rich__(self) -> Table:
        table = Table(title=f"Forage — iteration {self.iteration} · {self.stage}", expand=False)
        table.add_column("req")
        table.add_column("requirement", max_width=70)
        table.add_column("coverage", justify="right")
        table.add_column("LLM calls", justify="right")
        for r in self.plan.requirements:
            cov = self.coverage[r.id]
            table.add_row(r.id, r.text, f"{cov:.1f}" if isinstance(cov, float) else cov,
                          str(self.llm_calls.get(r.id, "")))
        table.caption = (f"documents: {self.stored} stored · {self.skipped} already known · {self.failed} failed"
                         f"\n{self.last[:100]}")
        return table


def run_settings(preset: PresetName | None, library: Path | None, llm_backend: str | None, model: str | None,
              runs_dir: Path | None, store: Path | None, offline: bool = False, mailto: str | None = None,
              zotero: bool = False, address: str | None = None) -> Settings:
    return settings_for_run(Settings.load(), preset=preset, library=library, llm_backend=llm_backend, model=model,
                            runs_dir=runs_dir, store=store, offline=offline or None, mailto=mailto,
                            zotero_push=zotero or None, address=address)


def one_line(exc: BaseException) -> str:
    exc = unwrap(exc)  # a Ray task's error: what its task raised, not Ray's traceback
    text = strip_ansi(str(exc))
    if hasattr(exc, "errors"):  # pydantic ValidationError: which value and what is wrong, no pydantic prefix
        try:
            text = validation_text(exc, field_names={"query": "the research query", "text": "the research query"})
        except Exception:  # noqa: BLE001
            pass
    return " ".join(text.split())
