"""Drive Forage from a lab workstation without a terminal UI: submit several queries, approve them (as
proposed, or with edits from a file), stream every run's events, and collect the reports.

Through a gateway (``forage serve`` on this or another machine):

    python examples/driver.py queries.txt --gateway http://127.0.0.1:8765 --out reports/   # token read from the token file
    python examples/driver.py queries.txt --gateway http://10.0.0.1:8765 --token "$(cat ~/.config/forage/gateway-token)"

Or straight into a Ray cluster (no gateway; runs one query after another, each run's Foragers in parallel):

    python examples/driver.py queries.txt --ray-address auto --library ~/papers --out reports/

``queries.txt`` holds one query per line (blank lines and ``#`` comments skipped). ``--edits FILE`` (YAML or
JSON) maps a query to the requirements and search strings to approve instead of the proposed ones; queries
missing from it are approved as proposed::

    "How do JIT compilers specialize types?":
      requirements:                 # replaces the proposed requirements (ids R1, R2, ... follow the order)
        - Which type-specialization techniques tracing JITs use
        - Measured speedups of type specialization
      search:                       # replaces the proposed search strings; [] sends nothing
        - tracing JIT type specialization

Each report lands in ``OUT/<run_id>.md`` and a line per run in ``OUT/runs.jsonl``. The exit status is 0 when
every run finished, 1 when some did not (their errors are printed and recorded), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a plain script from a checkout
    sys.path.insert(0, str(REPO))


@dataclass
class Edit:
    requirements: list[str] | None = None
    search: list[str] | None = None


@dataclass
class Outcome:
    query: str
    run_id: str | None = None
    status: str = "not started"
    final_coverage: float | None = None
    report: str | None = None
    events: int = 0
    error: str | None = None
    requirements: list[str] = field(default_factory=list)


def read_queries(path: Path) -> list[str]:
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    queries = [line for line in lines if line and not line.startswith("#")]
    if not queries:
        raise ValueError(f"{path}: no queries (one per line; # starts a comment)")
    return queries


def read_edits(path: Path | None) -> dict[str, Edit]:
    """query -> Edit from a YAML or JSON mapping; a clear ValueError for anything else."""
    if path is None:
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the edits file: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of query -> {{requirements: [...], search: [...]}}")
    edits: dict[str, Edit] = {}
    for query, body in data.items():
        body = body or {}
        if not isinstance(body, dict) or set(body) - {"requirements", "search"}:
            raise ValueError(f"{path}: {query!r}: only 'requirements' and 'search' lists may be given")
        lists = {}
        for key in ("requirements", "search"):
            value = body.get(key)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
                raise ValueError(f"{path}: {query!r}: {key} must be a list of strings")
            lists[key] = value
        if lists["requirements"] is not None and not lists["requirements"]:
            raise ValueError(f"{path}: {query!r}: give at least one requirement (or leave the key out)")
        edits[" ".join(str(query).split())] = Edit(**lists)
    return edits


def edit_for(edits: dict[str, Edit], query: str) -> Edit | None:
    return edits.get(" ".join(query.split()))


def requirement_dicts(texts: list[str]) -> list[dict[str, str]]:
    return [{"id": f"R{i}", "text": text} for i, text in enumerate(texts, 1)]


def search_dicts(texts: list[str], requirement_ids: list[str]) -> list[dict[str, Any]]:
    return [{"text": text, "requirement_ids": requirement_ids} for text in texts]


def describe(event: Any) -> str:
    stage = getattr(event.stage, "value", event.stage)
    who = f" {event.requirement_id}" if getattr(event, "requirement_id", None) else ""
    return f"{event.seq:>4} {stage}{who} {event.kind}: {event.message}"


# -- through a gateway -----------------------------------------------------------------------------------
def run_via_gateway(queries: list[str], edits: dict[str, Edit], *, base_url: str, token: str | None,
                    library: str | None, preset: str | None, max_iterations: int | None,
                    offline: bool | None, proposal_timeout: float,
                    say: Callable[[str], None] = print) -> list[Outcome]:
    from gateway.client import GatewayClient, GatewayError

    outcomes = [Outcome(query=q) for q in queries]
    with GatewayClient(base_url, token=token) as gw:
        # submit everything first: planning of every query runs at once on the cluster
        for out in outcomes:
            try:
                created = gw.create_run(out.query, library=library, preset=preset,
                                        max_iterations=max_iterations, offline=offline)
                out.run_id, out.status = created.run_id, created.status
                say(f"[{out.run_id}] submitted: {out.query}")
            except GatewayError as exc:
                out.status, out.error = "refused", str(exc)
                say(f"[-] refused: {out.query}: {exc}")
        for out in outcomes:
            if out.run_id is None:
                continue
            try:
                proposal = gw.wait_for_proposal(out.run_id, timeout=proposal_timeout)
                edit = edit_for(edits, out.query)
                reqs = requirement_dicts(edit.requirements) if edit and edit.requirements else None
                ids = [r["id"] for r in (reqs or proposal.requirements)]
                searches = search_dicts(edit.search, ids) if edit and edit.search is not None else None
                state = gw.approve(out.run_id, requirements=reqs, search_queries=searches)
                out.requirements = [r["text"] for r in state.requirements]
                out.status = state.status
                shown = state.search_queries
                say(f"[{out.run_id}] approved {len(out.requirements)} requirement(s)"
                    + (" (edited)" if edit else "") + f", {len(shown)} search string(s) may leave the machine")
            except GatewayError as exc:
                out.status, out.error = "not approved", str(exc)
                say(f"[{out.run_id}] not approved: {exc}")

        live = [o for o in outcomes if o.run_id and o.error is None]

        async def follow(out: Outcome) -> None:
            assert out.run_id is not None
            async for event in gw.aevents(out.run_id):
                out.events += 1
                say(f"[{out.run_id}] {describe(event)}")

        async def follow_all() -> list[Any]:
            return await asyncio.gather(*(follow(o) for o in live), return_exceptions=True)

        for out, result in zip(live, asyncio.run(follow_all())):
            assert out.run_id is not None
            if isinstance(result, BaseException):
                out.error = f"event stream: {result}"
            state = gw.state(out.run_id)
            out.status, out.final_coverage = state.status, state.final_coverage
            if state.status == "finished":
                out.report = gw.report(out.run_id)
            elif out.error is None:
                out.error = state.error or f"run ended {state.status}"
    return outcomes


# -- straight into a Ray cluster ---------------------------------------------------------------------------
def run_via_ray(queries: list[str], edits: dict[str, Edit], *, settings: Any, llm: Any | None = None,
                say: Callable[[str], None] = print) -> list[Outcome]:
    """One :class:`ResearchSession` per query on the cluster at ``settings.ray.address`` (or a local Ray)."""
    from gateway.session import ResearchSession
    from messages.plan import Requirement, SearchQuery

    outcomes = []
    for query in queries:
        out = Outcome(query=query)
        outcomes.append(out)
        session = ResearchSession(settings, llm=llm, quiet=True)
        out.run_id = session.run_id
        try:
            say(f"[{out.run_id}] planning: {query}")
            plan = session.plan(query)
            edit = edit_for(edits, query)
            if edit and edit.requirements:
                reqs = [Requirement(id=f"R{i}", text=t) for i, t in enumerate(edit.requirements, 1)]
                plan = session.propose_search(plan.model_copy(update={"requirements": reqs}))
            if edit and edit.search is not None:
                ids = [r.id for r in plan.requirements]
                plan = plan.model_copy(update={"search_queries": [
                    SearchQuery(text=t, requirement_ids=tuple(ids)) for t in edit.search]})
            out.requirements = [r.text for r in plan.requirements]
            say(f"[{out.run_id}] approved {len(plan.requirements)} requirement(s)" + (" (edited)" if edit else "")
                + f", {len(plan.search_queries)} search string(s) may leave the machine")

            def on_event(event: Any, out: Outcome = out) -> None:
                out.events += 1
                say(f"[{out.run_id}] {describe(event)}")

            summary = session.run(plan.model_copy(update={"approved": True}), on_event=on_event)
            out.status = summary.status
            out.final_coverage = summary.mean_coverage
            if summary.report_path and Path(summary.report_path).exists():
                out.report = Path(summary.report_path).read_text(encoding="utf-8")
            if summary.status != "finished":
                out.error = f"run ended {summary.status} ({summary.stop_reason})"
        except Exception as exc:  # noqa: BLE001 — one failed query does not stop the others
            out.status, out.error = "failed", f"{type(exc).__name__}: {exc}"
            say(f"[{out.run_id}] failed: {out.error}")
        finally:
            session.close()
    return outcomes


def save(outcomes: list[Outcome], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with (out_dir / "runs.jsonl").open("a", encoding="utf-8") as log:
        for out in outcomes:
            if out.report is not None and out.run_id:
                (out_dir / f"{out.run_id}.md").write_text(out.report, encoding="utf-8")
            row = {k: v for k, v in asdict(out).items() if k != "report"}
            row["report_file"] = f"{out.run_id}.md" if out.report is not None else None
            log.write(json.dumps(row) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("queries", type=Path, help="file with one query per line")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--gateway", help="gateway URL, e.g. http://127.0.0.1:8765")
    where.add_argument("--ray-address", help="Ray cluster address ('auto' on a cluster node, ray://head:10001)")
    p.add_argument("--token", help="gateway token (default: this user's token file, "
                                   "~/.config/forage/gateway-token, which `forage serve` writes)")
    p.add_argument("--edits", type=Path, help="YAML/JSON: query -> {requirements: [...], search: [...]}")
    p.add_argument("--out", type=Path, default=Path("reports"), help="where reports go (default ./reports)")
    p.add_argument("--library", help="folder of PDFs (on the gateway's machine, or every cluster node)")
    p.add_argument("--preset", choices=["quick", "standard", "deep"])
    p.add_argument("--max-iterations", type=int)
    p.add_argument("--offline", action="store_true", default=None, help="send nothing off the machine")
    p.add_argument("--proposal-timeout", type=float, default=900.0, help="seconds to wait for requirements")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, *, llm: Any | None = None) -> int:
    args = parse_args(argv)
    try:
        queries = read_queries(args.queries)
        edits = read_edits(args.edits)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.gateway:
        outcomes = run_via_gateway(queries, edits, base_url=args.gateway, token=args.token, library=args.library,
                                   preset=args.preset, max_iterations=args.max_iterations, offline=args.offline,
                                   proposal_timeout=args.proposal_timeout)
    else:
        from infra.settings import Settings

        settings = Settings.load(args.preset)
        updates: dict[str, Any] = {"ray": {"address": args.ray_address}}
        if args.library:
            updates["search"] = {"library": Path(args.library).expanduser().resolve()}
        if args.max_iterations:
            updates["run"] = {"max_iterations": args.max_iterations}
        if args.offline:
            updates["net"] = {"offline": True}
        outcomes = run_via_ray(queries, edits, settings=settings.updated(**updates), llm=llm)
    save(outcomes, args.out)
    for out in outcomes:
        cov = "-" if out.final_coverage is None else f"{out.final_coverage:.2f}"
        print(f"{out.run_id or '-'}  {out.status:<10} coverage {cov}  events {out.events}  {out.query}"
              + (f"\n    error: {out.error}" if out.error else ""))
    print(f"reports in {args.out}/ (runs.jsonl lists every run)")
    return 0 if all(o.status == "finished" for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
