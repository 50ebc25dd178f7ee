"""Parallel foraging: 8 requirements, 1 / 2 / 4 LLM slots, an LLM stand-in with a fixed delay.

    .venv/bin/python bench/forage_parallel.py                     # delay 0.3 s, slots 1 2 4
    .venv/bin/python bench/forage_parallel.py --delay 0.5 --slots 1 2 4 8

The LLM stand-in is :class:`tests.loopback_ollama.LoopbackOllama`: a real HTTP server on 127.0.0.1
speaking Ollama's ``/api/chat`` (and ``/api/embed``), answering every structured call after
``--delay`` seconds, so the product's own OllamaLLM / OllamaEmbedder clients are what is timed.
Its answers are computed from the prompt (a passage sharing words with the requirement answers or
is interesting), so every run makes the same calls.

The store: the 8 requirements are the first 8 SciFact test queries; their relevant abstracts and
others (``--docs`` in all) are ingested through the product's text ingestion into a temporary
LanceDB folder (vectors from the stand-in's ``/api/embed``).

For each slot count a fresh local Ray is started declaring that many ``llm_slot`` resources
(``ray.llm_slots``), fresh Forager actors are created and warmed up (store tables, clients, the endpoint
actors reached, each requirement's embedding: what the Orchestrator does while an iteration searches and
ingests), then ONE
forage iteration of all 8 requirements runs through :class:`actors.orchestrator.RayCrew`: all
Foragers run at once and each LLM call is made by the node's LLM endpoint actor, which holds the
``llm_slot`` units (:class:`infra.llm.slotted.SlottedLLM`, :mod:`actors.llm_endpoint`), so at most
``slots`` calls are at the stand-in at a time. ``--order`` picks who gets a slot that frees up
(``ray.llm_order``): ``chain`` the call with the most rounds of dependent calls still ahead of its
requirement first and summaries nothing waits for last, ``fifo`` the order calls reach the endpoint. Printed: wall time, LLM calls per requirement,
the critical-path bound (LLM calls of the longest requirement × delay), the slot bound
(max(critical path, ⌈all calls / slots⌉ × delay): every call takes the same delay, so some slot serves at least
⌈calls / slots⌉ of them one after another, and no schedule on that many slots can be faster; before 2026-11-27 the
bound was all calls × delay / slots, which no schedule reaches when the calls do not divide evenly), and
the speed-up over 1 slot; then where the time between calls goes: when the first call arrived, the gap between a
requirement's dependent calls (p50, p90), and the machine's CPU seconds per LLM call by process role (Foragers,
the LLM endpoint, the status hub, Ray's daemons, the driver with the stand-in). Goals (issue 5): wall ≤ 1.15 × the critical path (printed as wall/critical; with fewer
slots than requirements the slot bound is the reachable floor, printed as wall/bound); ≥ 3.5× over 1 slot at 4 slots.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actors.steps.evaluation.retrieval import load_beir  # noqa: E402
from infra.settings import Settings  # noqa: E402
from messages.forage import ForageRequest  # noqa: E402
from messages.plan import Requirement  # noqa: E402
from tests.loopback_ollama import LoopbackOllama  # noqa: E402

CHAT_MODEL = "bench-stand-in"
EMBED_MODEL = "nomic-embed-text"
WORD = re.compile(r"[a-z][a-z0-9-]{3,}")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


ARRIVALS: list[tuple[float, str]] = []  # (time.perf_counter() at arrival, requirement text) of each chat call


def cpu_by_role() -> dict[str, float]:
    """CPU seconds (user + system) used so far by each kind of process on this machine: Ray actors by their
    process title (``ray::Forager``, ``ray::LLMEndpoint``, ...), Ray's own daemons, this process (the driver and
    the LLM stand-in), and everything else."""
    import os

    import psutil

    out: dict[str, float] = {}
    for proc in psutil.process_iter(["pid", "name", "cmdline", "cpu_times"]):
        times = proc.info["cpu_times"]
        if times is None:
            continue
        cmd = " ".join(proc.info["cmdline"] or []) or proc.info["name"] or "?"
        if proc.info["pid"] == os.getpid():
            role = "driver + stand-in"
        elif cmd.startswith("ray::"):
            role = cmd.split()[0].split(".")[0]
        elif any(d in cmd for d in ("gcs_server", "raylet", "dashboard", "log_monitor", "runtime_env", "monitor.py")):
            role = "ray daemons"
        else:
            role = "other"
        out[role] = out.get(role, 0.0) + times.user + times.system
    return out


def gaps(requirements: list[Requirement], delay: float) -> list[float]:
    """Per chat call: seconds between the end of the requirement's previous call (its answer sent: arrival +
    delay) and this call's arrival — the Forager's work between dependent calls plus the hops to and from the
    endpoint. Calls that overlap their requirement's previous one (a batch sent together) count as 0."""
    out = []
    last: dict[str, float] = {}
    for at, text in sorted(ARRIVALS):
        rid = next((r.id for r in requirements if text and r.text.startswith(text[:60])), None)
        if rid is None:
            continue
        if rid in last:
            out.append(max(0.0, at - last[rid]))
        last[rid] = max(last.get(rid, 0.0), at + delay)
    return out


def responder(messages: list[dict[str, str]], fmt: object) -> dict:
    """Answers by the schema's title, judging each passage by its word overlap with the requirement."""
    name = fmt.get("title", "") if isinstance(fmt, dict) else ""
    user = next((m["content"] for m in messages if m.get("role") == "user"), "")
    found = re.search(r"Requirement: (.*)", user)
    ARRIVALS.append((time.perf_counter(), found.group(1).strip() if found else ""))
    requirement = words(found.group(1)) if found else set()
    if name in ("BatchVerdict", "DeepDiveBatchVerdict"):
        out = []
        for number, passage in re.findall(r"<<<PASSAGE (\d+)\n(.*?)\nPASSAGE \1>>>", user, re.S):
            overlap = len(requirement & words(passage))
            tag = "answers" if overlap >= 3 else "interesting" if overlap >= 2 else "unrelated"
            if name == "DeepDiveBatchVerdict" and tag == "interesting":
                tag = "unrelated"
            out.append({"passage": int(number), "tag": tag, "kind": "result" if "%" in passage else "method",
                        "motive": f"{overlap} shared words"})
        return {"verdicts": out}
    if name == "DocumentGist":
        return {"summary": "A scientific abstract."}
    if name == "RelevanceGate":
        return {"continue_search": True, "reason": "on topic"}
    if name == "SectionChoice":
        return {"sections": [line[2:] for line in re.findall(r"^- .*$", user, re.M)][:2]}
    if name == "Reformulation":
        return {"query": (found.group(1) if found else "") + " evidence"}
    raise ValueError(f"no answer for schema {name!r}")


def build_store(settings: Settings, beir: Path, n_docs: int, n_requirements: int) -> list[Requirement]:
    from actors.steps.ingest.documents import TextDocument
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.store import build_store as make_store

    data = load_beir(beir)
    qrels = data.qrels("test")
    qids = list(qrels)[:n_requirements]
    chosen = list(dict.fromkeys([c for q in qids for c in qrels[q] if c in data.corpus] + list(data.corpus)))[:n_docs]
    step = IngestStep(settings, make_store(settings), build_embedder(settings))
    docs = [TextDocument(key=f"beir:scifact:{c}", title=data.corpus[c][0], text=data.corpus[c][1]) for c in chosen]
    results = step.ingest_texts("bench", docs)
    assert all(r.status == "stored" for r in results), [r.reason for r in results if r.status != "stored"][:3]
    step.index_new_chunks()  # as the crew does after an iteration's ingestion, before the Foragers search
    return [Requirement(id=f"R{i}", text=data.queries[q][:300]) for i, q in enumerate(qids, start=1)]


def tail(requirements: list[Requirement], started: float, wall: float, delay: float) -> str:
    """When each requirement's last call ended (s after the start, from the stand-in's arrival times plus the
    delay): a long tail shows where a schedule loses against the slot bound."""
    last = {}
    for at, text in ARRIVALS:
        for r in requirements:
            if text and r.text.startswith(text[:60]):
                last[r.id] = max(last.get(r.id, 0.0), at - started + delay)
    ends = sorted(last.values())
    if not ends:
        return ""
    final = max(at for at, _ in ARRIVALS) - started + delay  # any call, also those that name no requirement
    return "ends " + " ".join(f"{e:.1f}" for e in ends) + f" (last call {final:.1f}, wall {wall:.1f})"


async def one_run(settings: Settings, requirements: list[Requirement], slots: int,
                  delay: float) -> tuple[float, list[int], str]:
    from actors.llm_endpoint import llm_endpoints
    from actors.ray_crew import RayCrew

    crew = RayCrew(settings, f"bench-{slots}", hub=None, reserve=("forager",))  # its Foragers reserved together
    try:
        await crew.start_foragers(requirements)  # as the Orchestrator does while an iteration searches and ingests
        endpoints = llm_endpoints(settings)  # the endpoint actor that makes every LLM call, started before the clock
        await asyncio.gather(*(e.handle.stats.remote() for e in endpoints))
        requests = [ForageRequest(run_id=f"bench-{slots}", iteration=1, requirement=r) for r in requirements]
        ARRIVALS.clear()
        cpu_before = cpu_by_role()
        started = time.perf_counter()
        coverages = await crew.forage(requests)
        wall = time.perf_counter() - started
        cpu_after = cpu_by_role()
        schedule = tail(requirements, started, wall, delay) + "; "
        stats = [await e.handle.stats.remote() for e in endpoints]
        schedule += "endpoint: " + ", ".join(f"{s['queued']}/{s['admitted']} calls waited, peak {s['max_in_use']}, "
                                             f"{s['claimed']}/{s['kept']} kept slots taken by the next call"
                                             for s in stats)
        used = {role: cpu_after.get(role, 0.0) - cpu_before.get(role, 0.0) for role in cpu_after}
        n_calls = max(1, len(ARRIVALS))
        between = sorted(gaps(requirements, delay))
        first = min(at for at, _ in ARRIVALS) - started if ARRIVALS else 0.0
        schedule += (f"\n{'':>8} per call: first call {first:.2f} s after the start; between a requirement's "
                     f"dependent calls p50 {1000 * between[len(between) // 2]:.0f} ms, p90 "
                     f"{1000 * between[int(0.9 * (len(between) - 1))]:.0f} ms" if between else "")
        schedule += (f"\n{'':>8} CPU {sum(used.values()):.1f} s in {wall:.1f} s wall "
                     f"({1000 * sum(used.values()) / n_calls:.0f} ms per call): " + ", ".join(
                         f"{role} {1000 * sec / n_calls:.0f}" for role, sec in sorted(used.items(), key=lambda x: -x[1])
                         if sec >= 0.05) + " ms per call")
    finally:
        await crew.close()
    failed = [c.error for c in coverages if c.status != "ok"]
    if failed:
        raise RuntimeError(f"foraging failed: {failed[:2]}")
    return wall, [c.llm_calls for c in coverages], schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, default=REPO.parent / "shared" / "data" / "beir-scifact")
    parser.add_argument("--delay", type=float, default=0.3, help="seconds the stand-in takes per LLM call")
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--order", nargs="+", choices=["chain", "fifo"], default=["chain", "fifo"],
                        help="who gets a freed slot (ray.llm_order); each order runs every slot count")
    parser.add_argument("--hold", type=float, nargs="+", default=None,
                        help="seconds an endpoint keeps a finished call's slot for its requirement's next call "
                             "(ray.llm_hold_s; 'chain' order only); each value runs every slot count "
                             "(default: the setting's default)")
    parser.add_argument("--requirements", type=int, default=8)
    parser.add_argument("--docs", type=int, default=80)
    parser.add_argument("--num-cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--signal", choices=["store", "text"], default="store",
                        help="the relevance check's similarity (forage.relevance_signal): the store's own score, the "
                             "default with MiniLM since 2026-11-27, or the passage text embedded again (the stand-in's "
                             "/api/embed; the default with an Ollama embedder, and everywhere before)")
    args = parser.parse_args()
    if not (args.beir / "corpus.jsonl").is_file():
        print(f"SciFact not found at {args.beir}; pass --beir DIR", file=sys.stderr)
        return 2

    folder = Path(tempfile.mkdtemp(prefix="forage-parallel-"))
    try:
        return run_all(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the store and the runs of every slot count


def run_all(args: argparse.Namespace, folder: Path) -> int:
    """Every (order, hold, slots) run of ``args``, each on a fresh local Ray, the store and runs in ``folder``."""
    import ray

    from actors.options import llm_slot_resources
    from infra.ray_runtime import start_ray

    with LoopbackOllama(models=(CHAT_MODEL, EMBED_MODEL), embed_dim=768, responder=responder,
                        responder_delay_s=args.delay) as server:
        base = Settings.load().updated(
            llm={"backend": "ollama", "host": server.url, "model": CHAT_MODEL, "max_retries": 0},
            embed={"backend": "ollama", "host": server.url, "model": EMBED_MODEL},
            store={"path": folder / "store"}, run={"runs_dir": folder / "runs"},
            # the stand-in's embeddings are word hashes, not meanings: the relevance floors calibrated for real
            # embedders would hide every passage from the judge and leave one call per requirement
            forage={"answer_similarity": 0.0, "topic_similarity": 0.0, "relevance_signal": args.signal})
        requirements = build_store(base, args.beir, args.docs, args.requirements)
        print(f"{len(requirements)} requirements, {args.docs} abstracts, stand-in delay {args.delay:.2f} s per call, "
              f"Ray with {args.num_cpus} CPUs, relevance check on the {args.signal}'s similarity\n")
        holds = args.hold if args.hold is not None else [base.ray.llm_hold_s]
        print(f"{'order':>8} {'hold s':>6} {'slots':>5} {'wall s':>8} {'calls/req':>22} {'critical path s':>16} {'slot bound s':>13} "
              f"{'wall/bound':>10} {'wall/critical':>13} {'speed-up':>9}  schedule")
        for order, hold in [(o, h) for o in args.order for h in (holds if o == "chain" else [0.0])]:
            first_wall = None
            for slots in args.slots:
                settings = base.updated(ray={"llm_slots": slots, "num_cpus": args.num_cpus, "llm_order": order,
                                             "llm_hold_s": hold})
                start_ray(num_cpus=args.num_cpus, quiet=True, resources=llm_slot_resources(settings))
                try:
                    server.requests.clear()
                    wall, calls, schedule = asyncio.run(one_run(settings, requirements, slots, args.delay))
                finally:
                    ray.shutdown()
                critical = max(calls) * args.delay
                bound = max(critical, math.ceil(sum(calls) / slots) * args.delay)
                first_wall = first_wall or wall
                print(f"{order:>8} {hold:>6.2f} {slots:>5} {wall:>8.2f} {' '.join(map(str, calls)):>22} {critical:>16.2f} "
                      f"{bound:>13.2f} {wall / bound:>10.3f} {wall / critical:>13.3f} {first_wall / wall:>8.2f}x  {schedule}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
