"""`forage eval report RUN --judge MODEL`, `forage eval suite [FILE.yaml]` (see gateway/eval_suite.py),
`forage eval evidence --beir DIR` (actors/steps/evaluation/evidence.py) and `forage eval runs SUITE.yaml`
(gateway/eval_runs.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gateway import cli_base as base
from infra.errors import ForageError
from infra.settings import Settings, settings_for_run


def eval_report(
    run: Annotated[str, typer.Argument(help="Run id (or the path of its folder).")],
    judge: Annotated[str, typer.Option(help="Ollama model that judges the report (on the configured host).")],
    runs_dir: Annotated[Path, typer.Option(help="Runs folder.")] = Path("runs"),
) -> None:
    """Score a finished report on the thesis rubric (correctness, usefulness, scope, 1-5) with an evidence
    audit of unsupported claims; writes runs/<id>/eval.json."""
    import asyncio

    from actors.steps.evaluation.report_judge import judge_run, run_metrics
    from actors.steps.run.rundir import atomic_write
    from actors.steps.tools.verify import find_run, store_path
    from gateway.eval_suite import judge_llm
    from infra.store import build_store

    try:
        rundir = find_run(run, runs_dir)
        settings = Settings.load()
        llm = judge_llm(settings, judge)
        asyncio.run(llm.check())
        store = build_store(settings.updated(store={"path": store_path(rundir)}))
        verdict = asyncio.run(judge_run(rundir, store, llm, judge))
    except (ForageError, FileNotFoundError, ValueError) as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None
    result = {"metrics": run_metrics(rundir), "judgement": verdict.as_dict()}
    atomic_write(rundir.path / "eval.json", json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    table = Table(title=f"{rundir.run_id} judged by {judge}")
    for col in ("correctness", "usefulness", "scope", "mean"):
        table.add_column(col, justify="right")
    table.add_row(str(verdict.correctness), str(verdict.usefulness), str(verdict.scope), f"{verdict.mean:.2f}")
    base.console.print(table)
    if verdict.rationale:
        base.console.print(verdict.rationale, highlight=False, markup=False)
    base.console.print(f"unsupported claims: {len(verdict.unsupported_claims)}")
    for claim in verdict.unsupported_claims:
        base.console.print(f"- {claim}", highlight=False, markup=False)
    base.console.print(f"written: {rundir.path / 'eval.json'}")


def eval_suite(
    file: Annotated[Path | None, typer.Argument(help="Suite YAML (default: the thesis's three queries).")] = None,
    judge: Annotated[str | None, typer.Option(help="Ollama model that judges each report.")] = None,
    library: Annotated[Path | None, typer.Option(help="Folder of PDFs (overrides the suite's library).")] = None,
    preset: Annotated[str | None, typer.Option(help="quick / standard / deep (overrides the suite).")] = None,
    model: Annotated[str | None, typer.Option(help="Ollama model for the runs.")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Where runs/<run_id>/ go.")] = None,
    out: Annotated[Path, typer.Option(help="Results: OUT.json and OUT.md.")] = Path("eval-suite"),
) -> None:
    """Run every query of a suite end to end and tabulate coverage, sources, citations removed, schema
    compliance, LLM calls, wall time and (with --judge) the rubric scores."""
    from gateway.eval_suite import COLUMNS, DEFAULT_SUITE, judge_llm, load_suite, run_suite, save_results

    try:
        suite = load_suite(file or DEFAULT_SUITE)
        settings = base.run_settings(preset or suite.preset, library or suite.library, None, model, runs_dir, None)  # type: ignore[arg-type]
        judge_name = judge or suite.judge
        llm = judge_llm(settings, judge_name) if judge_name else None
    except ValueError as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None

    def progress(i: int, n: int, query: str) -> None:
        base.console.print(f"[bold]{i}/{n}[/bold] {query}", highlight=False)

    rows = run_suite(settings, suite, judge=llm, judge_name=judge_name or "", progress=progress)
    json_path, md_path = save_results(rows, out)
    table = Table(title=f"suite: {len(rows)} queries" + (f", judged by {judge_name}" if judge_name else ""))
    for col in COLUMNS:
        table.add_column(col, max_width=40 if col == "query" else None)
    from gateway.eval_suite import _cell

    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in COLUMNS))
    base.console.print(table)
    base.console.print(f"results: {json_path} and {md_path}")
    if any(r.get("status") != "finished" for r in rows):
        raise typer.Exit(1)


def eval_evidence(
    beir: Annotated[Path, typer.Option(help="BEIR folder (corpus.jsonl, queries.jsonl, qrels/).")],
    queries: Annotated[int, typer.Option(min=2, help="Test queries, each one requirement; half are made "
                                                     "unanswerable (their relevant documents removed).")] = 50,
    seed: Annotated[int, typer.Option(help="Chooses the unanswerable half.")] = 0,
    split: Annotated[str, typer.Option(help="qrels split.")] = "test",
    mode: Annotated[list[str] | None, typer.Option(help="judge (the judge's word alone) and/or checked (the "
                                                        "relevance check on); default both.")] = None,
    llm: Annotated[str | None, typer.Option(
        help="LLM backend: embedded, ollama or openai (default: settings).")] = None,
    model: Annotated[str | None, typer.Option(help="Ollama model name.")] = None,
    preset: Annotated[str | None, typer.Option(help="quick / standard / deep.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the figures (and every query's outcome) as JSON.")] = None,
    judge: Annotated[str | None, typer.Option(
        help="simulated:TPR,FPR[,seed]: a judge of known quality answering from the qrels instead of the model "
             "(the check is told its rates).")] = None,
    store: Annotated[Path | None, typer.Option(
        help="A store of the whole corpus kept between runs (`forage eval retrieval --store`): copied, the held-out "
             "documents deleted from the copy, instead of embedding the corpus again.")] = None,
    iterations: Annotated[int | None, typer.Option(
        min=1, help="The most iterations a requirement gets, as in a run over a fixed library: it stops once its "
                    "coverage reaches the goal or an iteration finds it nothing new (default: the preset's "
                    "run.max_iterations; 1: the Forager's first iteration alone).")] = None,
) -> None:
    """Evidence quality of the real Forager, scored by the qrels alone (no LLM scores it): evidence hit rate,
    evidence recall, coverage on answerable vs unanswerable requirements, false coverage, LLM calls."""
    from actors.steps.evaluation.evidence import EVIDENCE_MODES, evaluate_evidence

    # the embedded model gets its own window (infra/settings.py EMBEDDED_WINDOW), as `forage demo` does
    settings = settings_for_run(Settings.load(), preset=preset, llm_backend=llm, model=model)  # type: ignore[arg-type]

    def loading(done: int, total: int, seconds: float) -> None:
        base.err.print(f"[dim]loaded {done:,}/{total:,} documents ({seconds:.0f} s)[/dim]", highlight=False)

    def progress(name: str, n: int, total: int, o: object) -> None:
        base.err.print(f"[dim]{name} {n}/{total}: {o.qid} coverage {o.coverage:.2f} "  # type: ignore[attr-defined]
                       f"{'answerable' if o.answerable else 'unanswerable'} hit {o.hit} "  # type: ignore[attr-defined]
                       f"({o.seconds:.0f} s)[/dim]", highlight=False)  # type: ignore[attr-defined]

    try:
        results = evaluate_evidence(settings, beir, n_queries=queries, seed=seed, split=split,
                                    modes=tuple(mode or EVIDENCE_MODES), progress=progress,  # type: ignore[arg-type]
                                    loading=loading, judge=judge, base_store=store,
                                    iterations=iterations)
    except ForageError as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(1 if exc.retryable else 2) from None
    show_evidence(results)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        base.console.print(f"results: {out}")


def show_evidence(results: dict) -> None:
    table = Table(title=f"{results['dataset']} · {results['split']} · {results['answerable']} answerable + "
                        f"{results['unanswerable']} unanswerable requirements · {results['llm']} · "
                        f"retrieval P@1 {results['retrieval_p1']:.2f} · up to {results.get('max_iterations', 1)} "
                        f"iterations, goal {results.get('min_coverage', math.nan):.2f}")
    columns = ("evidence_hit_rate", "evidence_recall", "coverage_answerable", "coverage_unanswerable",
               "false_coverage", "answered_answerable", "ece", "judge_tpr", "judge_fpr", "iterations", "llm_calls",
               "overruled", "wall_s")
    table.add_column("mode")
    for col in columns:
        table.add_column(col.replace("_", " "), justify="right")
    for name, figures in results["modes"].items():
        table.add_row(name, *(f"{figures.get(c, math.nan):.2f}" if c not in ("llm_calls", "overruled", "wall_s")
                              else f"{figures[c]:.0f}" for c in columns))
    base.console.print(table)
    for name, rows in results.get("reliability", {}).items():
        bins = Table(title=f"{name}: reliability (requirements by coverage; a calibrated coverage matches the share "
                           f"answerable) · ECE {results['modes'][name]['ece']:.2f}")
        for col in ("coverage bin", "requirements", "mean coverage", "share answerable"):
            bins.add_column(col, justify="right")
        for row in rows:
            label = "1.0" if row["bin"] >= 1.0 else f"{row['bin']:.2f}–"
            bins.add_row(label, f"{row['n']:.0f}", f"{row['mean_coverage']:.2f}", f"{row['answerable']:.2f}")
        base.console.print(bins)
    tpr, fpr = results.get("judge_rates_told", (None, None))
    base.console.print(f"the check was told the judge's rates TPR {tpr}, FPR {fpr}; judge TPR / FPR above: measured "
                       "from its verdicts against the qrels (in checked mode on the passages it was shown)",
                       highlight=False)


def calibrate(
    llm: Annotated[str | None, typer.Option(
        help="LLM backend: embedded, ollama or openai (default: settings).")] = None,
    model: Annotated[str | None, typer.Option(help="Model name (Ollama, or the served model id).")] = None,
    beir: Annotated[Path | None, typer.Option(
        help="Labelled set: a BEIR folder (corpus.jsonl, queries.jsonl, qrels/). Default: the set Forage ships (19 "
             "questions on passages of 13 CC BY papers of 11 fields, labelled by hand).")] = None,
    split: Annotated[str | None, typer.Option(help="qrels split to measure on (not the one you report on); default: "
                                                   "train for a folder you name, test (all its questions) for the "
                                                   "set Forage ships.")] = None,
    queries: Annotated[int, typer.Option(min=1, help="Queries judged: each its relevant documents' passages and "
                                                     "as many near ones that are not.")] = 20,
    near: Annotated[int, typer.Option(min=1, help="Passages of near, not relevant documents per query.")] = 3,
    save: Annotated[bool, typer.Option(help="Keep the rates for this model in the user's config "
                                            "($XDG_CONFIG_HOME/forage/judges.json).")] = True,
) -> None:
    """Measure how well the configured model judges (its true and false positive rate on a labelled set, with the
    Forager's own judging prompt) and keep the rates for that model: its runs then weigh its verdicts by them."""
    from actors.steps.evaluation.calibrate import LABELLED_SET, measure_judge
    from infra.judges import keep_rates

    settings = settings_for_run(Settings.load(), llm_backend=llm, model=model)  # type: ignore[arg-type]
    folder = beir or LABELLED_SET

    def progress(n: int, total: int, qid: str, got: list) -> None:
        shown = ", ".join(f"{tag}{'*' if rel else ''}" for tag, rel in got)
        base.err.print(f"[dim]{n}/{total} query {qid}: {shown} (* relevant)[/dim]", highlight=False)

    try:
        result = measure_judge(settings, folder, n_queries=queries, split=split or ("train" if beir else "test"),
                               near=near, progress=progress)
        path = keep_rates(result["key"], {k: result[k] for k in ("tpr", "fpr", "relevant", "other", "calibrated",
                                                                 "labelled_set", "queries")}) if save else None
    except ForageError as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(1 if exc.retryable else 2) from None
    base.console.print(f"judge {result['key']} ({result['labelled_set']}, {result['queries']} queries): "
                       f"TPR {result['tpr']:.2f} on {result['relevant']} relevant passages, FPR {result['fpr']:.2f} on "
                       f"{result['other']} others; {result['unjudged']} without a verdict, {result['llm_calls']} "
                       "LLM calls", highlight=False)
    if path is not None:
        base.console.print(f"kept for {result['key']} in {path}: its runs weigh its verdicts by these rates "
                           "(forage.judge_tpr / judge_fpr, where set, still win)", highlight=False)


def eval_runs(
    suite_file: Annotated[Path, typer.Argument(help="Run suite YAML: library (folder, or list of folders) and "
                                                    "queries, each with the file names that answer it.")],
    preset: Annotated[str | None, typer.Option(help="quick / standard / deep.")] = None,
    llm: Annotated[str, typer.Option(help="LLM backend: embedded, ollama or openai.")] = "embedded",
    model: Annotated[str | None, typer.Option(help="Model name (Ollama, or the served model id).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write every query's scores and the totals as JSON.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Only the first N queries.")] = None,
    plan_only: Annotated[bool, typer.Option("--plan-only", help="Stop each query after planning: score its "
                                            "requirements and the files its first iteration would read.")] = False,
    runs_dir: Annotated[Path | None, typer.Option(help="Where runs/<run_id>/ go.")] = None,
    store: Annotated[Path | None, typer.Option(help="LanceDB store folder.")] = None,
) -> None:
    """Run each query of a suite end to end (plan, loop, report; offline over the suite's library, requirements
    accepted as with --yes) and score it from the run's own records, without an LLM: requirement fidelity,
    answering files read in iteration 1 and cited, coverage, false coverage, iterations, LLM calls, wall time."""
    from actors.steps.evaluation.runs import load_run_suite
    from gateway.eval_runs import columns, run_suite_runs, table_rows, totals_lines

    try:
        suite = load_run_suite(suite_file)
        settings = base.run_settings(preset, None, llm, model, runs_dir, store, offline=True)  # type: ignore[arg-type]
    except (ForageError, ValueError) as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None

    def progress(i: int, n: int, query: str) -> None:
        base.err.print(f"[bold]{i}/{n}[/bold] {query}", highlight=False)

    def scored(row: dict) -> None:
        if "fidelity" not in row:
            base.err.print(f"[red]failed:[/red] {row.get('error')}", highlight=False, markup=False)
            return
        reqs = "; ".join(f"{r['id']}: {r['text']}" for r in row["requirements"])
        base.err.print(f"[dim]{reqs}[/dim]", highlight=False)

    result = run_suite_runs(settings, suite, plan_only=plan_only, limit=limit, progress=progress, scored=scored)
    table = Table(title=f"runs: {len(result['rows'])} queries · {settings.llm.backend}"
                        f"{' ' + settings.llm.model if settings.llm.backend != 'embedded' else ''}"
                        f" · {settings.preset}{' · plan only' if plan_only else ''}")
    for col in columns(result):
        table.add_column(col, max_width=40 if col == "query" else None, justify="left" if col in (
            "query", "stop") else "right")
    for cells in table_rows(result):
        table.add_row(*cells)
    base.console.print(table, width=max(base.console.width, 160))  # a full line per query, also into a file
    summary = Table(title="totals", show_header=False)
    summary.add_column("figure")
    summary.add_column("value", justify="right")
    for label, value in totals_lines(result):
        summary.add_row(label, value)
    base.console.print(summary)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        base.console.print(f"results: {out}")
    if result["totals"]["failed"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    base.eval_app.command("report")(eval_report)
    base.eval_app.command("suite")(eval_suite)
    base.eval_app.command("evidence")(eval_evidence)
    base.eval_app.command("runs")(eval_runs)
    app.command("calibrate")(calibrate)
