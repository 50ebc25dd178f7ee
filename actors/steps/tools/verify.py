"""Re-checking a finished report against the store: `forage verify RUN`.

A report is sound when its Markdown passes :func:`~actors.steps.write.citations.check_citations` (every [n]
resolves, names a source with evidence for its section, every Evidence sentence is cited, every
entry is listed once), every line of evidence.jsonl names a chunk that is still in the store with
the same sha256 and a quote that occurs in it, under the source it claims, and every cited source
has at least one such chunk. The answers of the run's asks.jsonl (`forage ask --run`) are checked alike: every
[n] of an answer is one of its cited passages, each a chunk of one of the run's documents still in the store with
the sha256 it had when cited, and each quoted sentence (“…” [n]) occurs in passage n. Nothing here calls a model.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from actors.steps.run.rundir import RUN_ID, RunDir, find_run_dir
from actors.steps.text import prose_sentences
from actors.steps.tools.ask import read_asks, run_filter
from actors.steps.write.citations import SOURCES_HEADING, check_citations, citation_numbers
from infra.store.base import Store
from messages.run_state import RunState
from messages.write import CitedChunk, Report


@dataclass(frozen=True)
class Check:
    """One verified claim of the report."""

    what: str
    ok: bool
    detail: str = ""


def find_run(run: str, runs_dir: Path) -> RunDir:
    """A run by the path of its folder, or by id or unique id prefix under ``runs_dir`` (ConfigError for a prefix
    several runs share). FileNotFoundError when it has no run.json."""
    path = Path(run).expanduser()
    if (path / "run.json").exists():
        rundir = RunDir(path.resolve().parent, path.resolve().name)
    elif RUN_ID.fullmatch(run):
        rundir = find_run_dir(runs_dir, run)
    else:
        rundir = RunDir(runs_dir, run)
    if not rundir.run_json.exists():
        raise FileNotFoundError(f"no run {run!r}: {rundir.run_json} does not exist")
    return rundir


def load_cited_chunks(rundir: RunDir) -> list[CitedChunk]:
    if not rundir.evidence_jsonl.exists():
        return []
    lines = rundir.evidence_jsonl.read_text(encoding="utf-8").splitlines()
    return [CitedChunk.model_validate_json(line) for line in lines if line.strip()]


def load_report(rundir: RunDir, state: RunState | None = None) -> Report:
    """The run's report: report.json when saved; else rebuilt from run.json's sources and report.md."""
    if rundir.report_json.exists():
        return rundir.load_report()
    state = state if state is not None else rundir.require_state()
    if not rundir.report_md.exists():
        raise FileNotFoundError(f"run {rundir.run_id} has no report ({rundir.report_md} does not exist)")
    return Report.model_validate({"run_id": rundir.run_id, "markdown": rundir.report_md.read_text(encoding="utf-8"),
                                  "sources": [src.model_dump() for src in state.sources],
                                  "cited_chunks": [c.model_dump() for c in load_cited_chunks(rundir)]})


def body_citations(markdown: str) -> list[int]:
    """Source numbers cited before the Sources Consulted heading."""
    return citation_numbers(markdown.split(f"\n## {SOURCES_HEADING}", 1)[0])


def verify_report(report: Report, cited: list[CitedChunk], store: Store) -> list[Check]:
    """Every check of a finished report; see the module docstring."""
    checks: list[Check] = []
    problems = check_citations(report.markdown, report.sources, report.sections or None)
    cited_numbers = sorted(set(body_citations(report.markdown)))
    checks.append(Check(f"citations in the text ({len(cited_numbers)} sources cited)", not problems,
                        "; ".join(problems[:5]) + (f"; … {len(problems) - 5} more" if len(problems) > 5 else "")))
    by_n = {s.n: s for s in report.sources}
    for c in cited:
        label = f"[{c.n}] chunk {c.chunk_id}"
        chunk = store.get_chunk(c.chunk_id)
        if chunk is None:
            checks.append(Check(label, False, "not in the store"))
            continue
        faults = []
        if hashlib.sha256(chunk.text.encode("utf-8")).hexdigest() != c.sha256:
            faults.append("text changed (sha256 differs)")
        if c.quote not in chunk.text:
            faults.append("quote not found in the chunk")
        if chunk.doc_id != c.doc_id:
            faults.append(f"belongs to document {chunk.doc_id[:12]}, not {c.doc_id[:12]}")
        source = by_n.get(c.n)
        if source is None:
            faults.append(f"[{c.n}] is not a source of the report")
        elif source.doc_id != c.doc_id:
            faults.append(f"[{c.n}] is another document")
        checks.append(Check(label, not faults, "; ".join(faults) or f"“{c.quote[:60]}”"))
    backed = {c.n for c in cited}
    for n in cited_numbers:
        if n in by_n and n not in backed:
            checks.append(Check(f"[{n}] evidence", False, "cited in the text but no chunk in evidence.jsonl"))
    return checks


_QUOTE = re.compile(r"“([^”]+)” \[(\d+)\]")


def verify_asks(asks: list[dict[str, object]], state: RunState, store: Store) -> list[Check]:
    """Every check of the run's answered asks; see the module docstring."""
    run_docs = set(run_filter(state).doc_ids or ())
    checks: list[Check] = []
    for i, ask in enumerate(asks, start=1):
        if ask.get("kind") != "answer":
            continue
        text = str(ask.get("text", ""))
        listed = ask.get("cited")
        cited = {int(c["n"]): c for c in (listed if isinstance(listed, list) else []) if isinstance(c, dict)}
        unknown = sorted(set(citation_numbers(text)) - set(cited))
        checks.append(Check(f"ask {i}: citations ({len(cited)} passages)", not unknown,
                            f"[{', '.join(map(str, unknown))}] not among its cited passages" if unknown else
                            str(ask.get("question", ""))[:60]))
        quotes: dict[int, list[str]] = {}
        for quote, n in _QUOTE.findall(text):
            quotes.setdefault(int(n), []).append(" ".join(quote.split()))
        for n, c in sorted(cited.items()):
            label = f"ask {i}: [{n}] chunk {c.get('chunk_id')}"
            chunk = store.get_chunk(str(c.get("chunk_id")))
            if chunk is None:
                checks.append(Check(label, False, "not in the store"))
                continue
            faults = []
            if c.get("sha256") and hashlib.sha256(chunk.text.encode("utf-8")).hexdigest() != c["sha256"]:
                faults.append("text changed (sha256 differs)")
            if chunk.doc_id != c.get("doc_id"):
                faults.append(f"belongs to document {chunk.doc_id[:12]}, not {str(c.get('doc_id'))[:12]}")
            if chunk.doc_id not in run_docs:
                faults.append("not a document of this run")
            # as quoted now and as a report written before may have quoted it (a footnote, a cut first sentence)
            prose = " ".join(prose_sentences(chunk.text) + prose_sentences(chunk.text, as_before=True))
            faults += [f"quote “{q[:40]}…” not in the chunk" for q in quotes.get(n, []) if q not in prose]
            checks.append(Check(label, not faults, "; ".join(faults) or str(c.get("title", ""))[:60]))
    return checks


def verify_run(rundir: RunDir, store: Store) -> list[Check]:
    """The report's checks, then those of the answers asked of the run."""
    report = load_report(rundir)
    checks = verify_report(report, load_cited_chunks(rundir), store)
    asks = read_asks(rundir.asks_jsonl)
    return checks + (verify_asks(asks, rundir.require_state(), store) if asks else [])


def store_path(rundir: RunDir) -> Path:
    """The store the run used (run.json's store_path)."""
    state = rundir.require_state()
    if not state.store_path:
        raise ValueError(f"run {rundir.run_id} records no store_path in run.json; pass --store")
    return Path(state.store_path)
