"""Whole research runs, scored without an LLM: `forage eval runs SUITE.yaml` and bench/runs.py.

A run suite names a library of PDFs and research queries, each with the library files that answer it
(``answering: []``: the library cannot answer it). The gateway (gateway/eval_runs.py) runs every query end to
end; this module reads what each run recorded in its own folder (run.json, events.jsonl, report.json and
report.md) and scores it against the labels:

- requirement fidelity: every question of the query keeps a requirement holding its subject words, and no
  requirement is something other than a need of the query (Forage's own status text such as "coverage 0.50;
  answering papers 0", a sentence about "the requirement to …" or the query itself, or one sharing no content
  word with the query);
- the answering files read in iteration 1 (from the ingest events), cited by the report (recall) and the cited
  files that do not answer (precision);
- coverage on answerable vs unanswerable queries, and false coverage (an unanswerable query with a requirement
  at or above :data:`FALSE_COVERAGE`);
- iterations used, why the run stopped (and per requirement, where run.json says), iterations that offered
  nothing new, LLM calls and wall time.

The question and word rules here are the measure's own, written apart from the planner's
(actors/steps/plan/requirements.py) on purpose: a change to the planner cannot move the ruler it is measured by.
Per-requirement stop reasons come from run.json's ``settled`` (unknown where a run did not record them). The figures
and how they were measured are in docs/evaluation-runs.md.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.steps.write.citations import SOURCES_HEADING
from messages.run_state import RunState

#: a requirement at or above this coverage on a query the library cannot answer is false coverage
FALSE_COVERAGE = 0.75
#: share of a question's subject words (at least one) a requirement must hold to stand for the question
SUBJECT_SHARE = 1 / 3


# -- the suite ----------------------------------------------------------------------------------------------
class SuiteQuery(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(min_length=3)
    answering: tuple[str, ...] = Field(description="File names of the library that answer the query; () = none.")

    @field_validator("answering", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("answering is required: a list of file names, [] when the library cannot answer")
        return value

    @property
    def answerable(self) -> bool:
        return bool(self.answering)


class RunSuite(BaseModel):
    """``library``: one folder of PDFs, or a list of folders (the runner links their files into one folder);
    each relative to the suite file or absolute."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    library: tuple[Path, ...] = Field(min_length=1)
    queries: tuple[SuiteQuery, ...] = Field(min_length=1)

    @field_validator("library", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str | Path) else value


def load_run_suite(path: Path) -> RunSuite:
    """The suite in ``path``, its library folders made absolute (relative ones are relative to the suite file).
    ValueError with the reason when it is not a valid suite: unreadable, a missing folder, two PDFs of one name in
    different folders, or an answering file the library does not hold."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the suite {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"the suite {path} must be a mapping with 'library' and 'queries'")
    try:
        suite = RunSuite.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"the suite {path} is not valid: {' '.join(str(exc).split())}") from None
    folders = tuple((f if f.expanduser().is_absolute() else path.parent / f).expanduser().resolve()
                    for f in suite.library)
    suite = suite.model_copy(update={"library": folders})
    names = library_names(suite)
    for q in suite.queries:
        unknown = [name for name in q.answering if name not in names]
        if unknown:
            raise ValueError(f"the suite {path}: query {q.query[:60]!r} names files the library does not hold: "
                             f"{', '.join(unknown)}")
    return suite


def library_names(suite: RunSuite) -> dict[str, Path]:
    """File name -> path of every PDF in the suite's library folders. ValueError for a missing folder or a
    name two folders share (a run tells its files apart by name)."""
    names: dict[str, Path] = {}
    for folder in suite.library:
        if not folder.is_dir():
            raise ValueError(f"the suite's library folder {folder} does not exist")
        for p in sorted(folder.rglob("*")):
            if p.is_file() and p.suffix.lower() == ".pdf":
                if p.name in names and names[p.name].resolve() != p.resolve():
                    raise ValueError(f"two library files are named {p.name}: {names[p.name]} and {p}")
                names[p.name] = p
    return names


# -- words and questions -----------------------------------------------------------------------------------
_WORD = re.compile(r"[^\W\d_]{2,}")
_STOP = frozenset("""
    a about above after again against all also among an and any are as at be because been before being between
    both but by can could did do does doing done during each few for from further had has have having how however
    if in into is it its itself more most no nor not of off on once only or other our out over own same should so
    some such than that the their them then there these they this those through to too under until up upon very
    was we were what when where which while who whom whose why will with within without would you your whether
    known used use using way ways role kind kinds type types make makes made get gets give gives one two
    report review overview summary topic study studies research literature paper papers document documents
    analysis work works find show shown evidence question questions query requirement requirements
""".split())  # noqa: SIM905 (a word list reads better as text)
_QWORD = r"(?:how|what|which|why|when|where|who|whom|whose|whether|does|do|did|is|are|was|were|can|could|should)"
_BREAK = re.compile(rf"(?<=\?)\s*|[,;]\s*(?:(?:and|but|or|as well as)\s+(?:also\s+)?)?(?={_QWORD}\b)"
                    rf"|\s+and\s+(?:also\s+)?(?={_QWORD}\b)",
                    re.IGNORECASE)


def words(text: str) -> set[str]:
    """Content words of ``text``, each keyed by its first 5 letters (plurals and -ion/-ed forms meet)."""
    return {w.casefold()[:5] for w in _WORD.findall(text) if len(w) >= 3 and w.casefold() not in _STOP}


# an item of a list: a line starting with "-", "*", "•", "1." or "a)", or "2)" / "(2)" / "b)" / "(b)" after a space
# in one line (the ", and" before it joins, it asks nothing)
_LINE_ITEM = re.compile(r"^\s*(?:[-*•]|\(?(?:\d+|[a-z])[.)])\s+", re.IGNORECASE | re.MULTILINE)
_NUMBER_ITEM = re.compile(r"(?:[,;]?\s+(?:and|or)\s+|(?<=\s))\(?(?:[2-9][.)]|[b-h]\))\s+")


# a part that states rather than asks, before a question: a premise ("Given that …", "Since …", "If …"), a clause
# with an auxiliary verb, or a claim credited to a source ("(Wellawatte et al. argue)", "(Smith, 2019)"); a topic's
# noun phrase asks ("Inhibitors of angiotensin-converting enzyme; how …"), as does a request ("Explain how …")
_STATED = re.compile(r"^\W*(?:given|since|because|as|although|though|while|whereas|if|assuming|considering|knowing)\b"
                     r"|\b(?:is|are|was|were|be|been|has|have|had|will|would|should|may|might|must)\b|\bet\s+al\b"
                     r"|\([^()]*\d{4}[a-z]?\)", re.IGNORECASE)
_ASKED = re.compile(rf"^\W*(?:{_QWORD}|explain|describe|summari[sz]e|compare|list|find|give|tell|show|identify|review"
                    r"|outline|discuss|define|provide|name|make)\b", re.IGNORECASE)


def questions(query: str) -> list[str]:
    """The questions a query asks, in order: each item of a list (the text before the first item, "I need:", is
    not one), and within them it splits after a question mark and before ", and how …", "; what …", " and
    why …"; a part with fewer than two content words joins the one before it; a sentence of the researcher's own
    situation or said to the assistant ("Please include …", "Ignore all previous instructions …") asks nothing, nor
    does an ordinal left alone ("First, how …" splits at "how") or a premise or claim before a question
    (:data:`_STATED`: "Given that …, what …?", "Chemists distrust black-box models (… et al. argue); which …?")."""
    items = [i for i in _LINE_ITEM.split(query)[1:] if i.strip()] if len(_LINE_ITEM.findall(query)) >= 2 else []
    first = r"^\s*(?:[^:]*:\s*)?\(?(?:1[.)]|a\))\s+"
    if not items and re.match(first, query) and _NUMBER_ITEM.search(query):
        items = _NUMBER_ITEM.split(re.sub(first, "", query))
    parts: list[str] = []
    pieces = [p for item in (items or [query]) for p in _BREAK.split(" ".join(item.split())) if p.strip(" ,;.?!")]
    for n, raw in enumerate(pieces):
        last = re.split(r"(?<!\bal\.)(?<!e\.g\.)(?<!i\.e\.)(?<=[.!])\s+", raw.strip())[-1]  # its last sentence
        if not items and n + 1 < len(pieces) and not raw.rstrip().endswith("?") and not _ASKED.match(last) \
                and _STATED.search(last):
            continue  # "Given that …, what …?": the premise is the question's context
        # within a part, its sentences that ask: not the researcher's situation ("I am writing a review.", "We need
        # this for a grant.") nor what is said to the assistant ("Please include …"); an ordinal opening it goes
        said = [s for s in re.split(r"(?<=[.!])\s+", raw.strip(" ,;.?!")) if s and not _context(s)
                and not _SAID_TO_ASSISTANT.search(s)]
        part = re.sub(r"^(?:first|second|third|fourth|fifth|finally|lastly|also|next|then)(?:ly)?,?\s*$", "",
                      " ".join(said), flags=re.IGNORECASE).strip(" ,;.?!")
        if not part:
            continue
        if parts and len(words(part)) < 2 and not re.match(rf"{_QWORD}\b", part, re.IGNORECASE):
            parts[-1] = f"{parts[-1]} {part}"
        else:
            parts.append(part)
    return parts or [query.strip()]


def subject_words(query: str) -> list[set[str]]:
    """Per question of the query, its subject words: its content words the other questions do not have (all of
    its words when the others have them all)."""
    qs = [words(q) for q in questions(query)]
    out = []
    for i, own in enumerate(qs):
        others = set().union(*(w for j, w in enumerate(qs) if j != i))
        out.append((own - others) or own)
    return out


def holds_subject(requirement: str, subject: set[str]) -> bool:
    """Whether a requirement holds :data:`SUBJECT_SHARE` (at least one) of a question's subject words."""
    if not subject:
        return True
    return len(subject & words(requirement)) >= max(1, math.ceil(len(subject) * SUBJECT_SHARE))


# what a query says to the assistant rather than asks: a request about the answer, an attempt to steer the model
_ADDRESSED = (r"^\W*please\s+(?:include|use|add|mention|cite|keep|write|answer|respond|format|be|make)\b",
              r"\b(?:ignore|disregard|forget)\s+(?:all\s+|any\s+)?(?:the\s+|your\s+)?(?:previous|prior|above)\b",
              r"\bsystem\s+prompt\b")
_SAID_TO_ASSISTANT = re.compile("|".join(_ADDRESSED), re.IGNORECASE)


# Forage's own progress and status lines, as a re-plan could echo them
_STATUS = re.compile(
    r"\bcoverage\s*(?:of\s*)?\d|\banswering\s+(?:papers|passages)\b|\d\.\d+\s*(?:→|->)\s*\d|\biteration\s+\d"
    r"|\b\d+\s+new\s+documents?\b|\bcoverage\s+stalled\b|\b(?:unconfirmed|overruled)\s+\d|\bR\d+\b"
    r"|\b(?:method|result|background)s?\s*:\s*\d|;\s*\w+\s+\d+(?:\.\d+)?\s*(?:;|$)", re.IGNORECASE)
# sentences about the research, the plan or the report rather than its subject matter
_META = re.compile(
    r"\b(?:this|that|each|every|these|those|its|our|your|such)\s+(?:research\s+)?requirements?\b"
    r"|\brequirements?\s+(?:to|is|are)\b|\bthe\s+(?:query|researcher|user|report\s+(?:must|should|will))\b"
    r"|\bresearch\s+question\b|\bliterature\s+search\b|\b(?:find|search\s+for|look\s+for|read)\s+(?:the\s+)?"
    r"(?:papers|studies|literature|articles|sources)\b|\bthe\s+(?:model|assistant)\s+(?:named|found|should)\b"
    r"|\bmissing\s+dimensions?\b|\bsource[_ ]diversity\b|^\s*the\s+(?:question|answer)\s+is\b"
    r"|\b(?:list|summary|summari[sz]e)\s+of\s+(?:the\s+)?(?:query|\d+\s+requirements)\b"
    r"|\ba\s+request\s+(?:to|for)\b|\banswer\s+to\s+the\s+question\b"
    r"|" + r"|".join(_ADDRESSED), re.IGNORECASE)


# the researcher's own situation restated ("Our lab studies soil microbiomes on farms."): a first-person sentence that
# asks nothing and states no need
_CONTEXT = re.compile(r"^\W*(?:[Ww]e|[Oo]ur|I|[Mm]y)\s+[a-z][^?]*$")  # not "I/O …", "US aid …"
_NEED = re.compile(r"\b(?:need|want|seek|look(?:ing)?\s+for|require|wish|would\s+like|interested\s+in)\b",
                   re.IGNORECASE)


def _context(sentence: str) -> bool:
    """A sentence on the researcher's own situation that asks nothing and names no need of its own ("We need this
    for a grant proposal." says what the answer is for)."""
    return bool(_CONTEXT.search(sentence)) and (not _NEED.search(sentence) or bool(re.search(
        r"\b(?:need|want|require)s?\s+(?:this|it|these|them|that)\b", sentence, re.IGNORECASE)))


# a statement (not a question) with a figure the query does not give: the model's answer written as a need ("The death
# rate of people on probation is 2.5% higher than …")
_CLAIM = re.compile(r"^(?!\W*" + _QWORD + r"\b)[^?]*\s(?:is|are|was|were|has|have|had)\s[^?]*$", re.IGNORECASE)


# a claim without a figure: a copula or "has/have" before any word that opens a clause ("The silkworm is a type of
# moth", "The death rate on parole is higher than …"), in a requirement that asks nothing
_VERDICT = re.compile(r"^(?!\W*" + _QWORD + r"\b)(?:(?!\b(?:that|which|who|whom|whose|whether|if|how|what|why|when"
                      r"|where|to)\b)[^?])*?\b(?:is|are|was|were|has|have|had)\b[^?]*$", re.IGNORECASE)


def _states_answer(requirement: str, query: str) -> bool:
    figures = set(re.findall(r"\d+(?:\.\d+)?", requirement)) - set(re.findall(r"\d+(?:\.\d+)?", query))
    if figures and _CLAIM.match(requirement) is not None:
        return True
    return _VERDICT.match(re.sub(r"\s*\(about:[^()]*\)$", "", requirement)) is not None


def not_a_need(requirement: str, query: str) -> str:
    """Why a requirement is not a need of the query ("status", "meta", "context", "answer" or "off query"), ''
    when it is one."""
    if _STATUS.search(requirement):
        return "status"
    if _META.search(requirement):
        return "meta"
    if _context(requirement):
        return "context"
    if _states_answer(requirement, query):
        return "answer"
    if not words(requirement) & words(query):
        return "off query"
    return ""


def _quoted(question: str) -> list[str]:
    """The terms a question puts in double quotation marks ("global analysis")."""
    return [t for pair in re.findall(r'"([^"]+)"|“([^”]+)”', question) for t in pair if t and words(t)]


def fidelity(query: str, requirements: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Requirement fidelity of (id, text) ``requirements`` for ``query``: the questions without a requirement that
    holds their subject words and every term they quote (a status, meta or context requirement does not count), and
    each requirement that is not a need of the query, with why."""
    not_needs = {rid: why for rid, text in requirements if (why := not_a_need(text, query))}
    needs = [text for rid, text in requirements if rid not in not_needs]
    qs = questions(query)
    missing = [q for q, subject in zip(qs, subject_words(query), strict=True)
               if not any(holds_subject(t, subject) and all(words(term) <= words(t) for term in _quoted(q))
                          for t in needs)]
    return {"questions": len(qs), "questions_kept": len(qs) - len(missing), "missing_questions": missing,
            "requirements": len(requirements), "not_needs": not_needs,
            "status_or_meta": sum(1 for why in not_needs.values() if why in ("status", "meta", "context")),
            "answers": sum(1 for why in not_needs.values() if why == "answer"),
            "off_query": sum(1 for why in not_needs.values() if why == "off query")}


# -- what a run recorded ------------------------------------------------------------------------------------
def _name(key_or_path: str | None) -> str:
    """A library file's name from its dedupe key ('file:/abs/path.pdf') or path."""
    if not key_or_path:
        return ""
    return Path(key_or_path.removeprefix("file:")).name


def read_events(path: Path) -> list[dict[str, Any]]:
    """events.jsonl's events (a line that is not a JSON object is passed over); [] without the file."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict):
            out.append(ev)
    return out


def files_read(events: Iterable[dict[str, Any]]) -> dict[int, list[str]]:
    """Per iteration, the library files offered for reading (ingest 'queued' events; a search's 'offered' names
    where a run has no such event), in order, each once."""
    queued: dict[int, list[str]] = {}
    offered: dict[int, list[str]] = {}
    for ev in events:
        it, payload = ev.get("iteration"), ev.get("payload") or {}
        if not isinstance(it, int):
            continue
        if ev.get("stage") == "ingest" and ev.get("kind") == "progress" and payload.get("phase") == "queued":
            queued.setdefault(it, []).append(_name(payload.get("key")))
        elif ev.get("stage") == "search" and ev.get("kind") == "results" and isinstance(payload.get("offered"), list):
            offered.setdefault(it, []).extend(str(n) for n in payload["offered"])
    return {it: list(dict.fromkeys(n for n in names if n)) for it, names in (offered | queued).items()}


_CITATION = re.compile(r"\[(\d+(?:\s*[,;–-]\s*\d+)*)\]")


def cited_numbers(markdown: str) -> set[int]:
    """Source numbers the report cites: every [n], [n, m] or [n–m] before its Sources Consulted heading (the
    report numbers sources no sentence cites too, after the cited ones: those are not cited)."""
    body = re.split(rf"^#+\s*{re.escape(SOURCES_HEADING)}\s*$", markdown, maxsplit=1, flags=re.M)[0]
    out: set[int] = set()
    for group in _CITATION.findall(body):
        for part in re.split(r"\s*[,;]\s*", group):
            ends = [int(x) for x in re.split(r"\s*[–-]\s*", part) if x.strip().isdigit()]
            if len(ends) == 2 and 0 < ends[1] - ends[0] < 50:
                out.update(range(ends[0], ends[1] + 1))
            else:
                out.update(ends)
    return out


def cited_files(run_dir: Path, state: RunState) -> list[str] | None:
    """Names of the library files the report cites; None when the run wrote no report."""
    report_json, report_md = run_dir / "report.json", run_dir / "report.md"
    if not report_json.exists():
        return None
    sources = json.loads(report_json.read_text(encoding="utf-8")).get("sources") or []
    numbers = cited_numbers(report_md.read_text(encoding="utf-8")) if report_md.exists() else None
    by_doc = {d.doc_id: _name(d.path or d.key) for d in state.documents.values() if d.doc_id}
    out = []
    for src in sources:
        if numbers is not None and src.get("n") not in numbers:
            continue
        name = by_doc.get(src.get("doc_id", "")) or _name(src.get("origin"))
        out.append(name or str(src.get("doc_id")))
    return list(dict.fromkeys(out))


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 3) if den else None


def score_run(run_dir: Path, query: SuiteQuery, *, wall_s: float | None = None,
              first_read: Sequence[str] | None = None) -> dict[str, Any]:
    """One query's run scored from its folder's records (see the module docstring). A run that never got past
    planning (``--plan-only``) is scored on its proposed requirements; ``first_read``: the files its first
    iteration would read, when the run has no ingest events."""
    run_dir = Path(run_dir)
    state = RunState.load(run_dir / "run.json")
    if state is None:
        raise FileNotFoundError(f"no run.json in {run_dir}")
    reqs = state.requirements or state.proposed_requirements
    answering = set(query.answering)
    row: dict[str, Any] = {
        "query": query.query, "answerable": query.answerable, "answering": list(query.answering),
        "run_id": state.run_id, "status": state.status,
        "requirements": [{"id": r.id, "text": r.text} for r in reqs],
        "replanned": sum(len(rep.added) for rep in state.replans),
        "degraded": list(state.degraded),  # steps that fell back (a plan made without the model's requirements)
        "fidelity": fidelity(query.query, [(r.id, r.text) for r in reqs]),
    }
    reads = files_read(read_events(run_dir / "events.jsonl"))
    first = list(reads.get(1, [])) if reads else list(first_read or [])
    row["read_first"] = first
    row["answering_read_first"] = (_ratio(len(answering & set(first)), len(answering))
                                   if query.answerable and (reads or first_read is not None) else None)
    cited = cited_files(run_dir, state)
    row["cited"] = cited
    if cited is not None:
        hit = answering & set(cited)
        row["cited_recall"] = _ratio(len(hit), len(answering)) if query.answerable else None
        row["cited_answering"] = len(hit)
        row["cited_not_answering"] = len(set(cited) - answering)
        row["cited_precision"] = _ratio(len(hit), len(cited))
    else:
        row.update(cited_recall=None, cited_answering=None, cited_not_answering=None, cited_precision=None)
    coverage = dict(state.coverage) or (dict(state.iterations[-1].coverage) if state.iterations else {})
    row["coverage"] = coverage
    row["mean_coverage"] = state.final_coverage if state.final_coverage is not None else (
        round(statistics.fmean(coverage.values()), 3) if coverage else None)
    row["false_coverage"] = (None if query.answerable or not coverage
                             else any(c >= FALSE_COVERAGE for c in coverage.values()))
    row["iterations"] = len(state.iterations)
    row["stop_reason"] = state.stop_reason
    row["requirement_stops"] = ({r.id: state.settled.get(r.id) or "unknown" for r in reqs}
                                if state.iterations else {})
    # an iteration read nothing new when it brought no document and no requirement a new passage
    row["iterations_nothing_new"] = sum(1 for it in state.iterations
                                        if it.new_documents == 0 and not any(it.new_passages.values()))
    forage_calls = sum(state.iterations[-1].llm_calls.values()) if state.iterations else 0
    writer_calls = 0
    if (run_dir / "report.json").exists():
        writer_calls = int(json.loads((run_dir / "report.json").read_text(encoding="utf-8")).get("llm_calls", 0))
    row["llm_calls"] = forage_calls + writer_calls if state.iterations else None
    row["run_s"] = state.seconds
    row["wall_s"] = round(wall_s, 1) if wall_s is not None else state.seconds
    return row


# -- the totals -----------------------------------------------------------------------------------------------
def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.fmean(vals), 3) if vals else None


def _median(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return round(float(statistics.median(vals)), 1) if vals else None


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The suite's figures over the scored rows (failed queries are counted, not scored)."""
    scored = [r for r in rows if "fidelity" in r]
    answerable = [r for r in scored if r["answerable"]]
    unanswerable = [r for r in scored if not r["answerable"]]
    fid = [r["fidelity"] for r in scored]
    first = [r["answering_read_first"] for r in answerable if r["answering_read_first"] is not None]
    recall = [r["cited_recall"] for r in answerable if r["cited_recall"] is not None]
    cited = sum(r["cited_answering"] + r["cited_not_answering"] for r in scored if r["cited"] is not None)
    false = [r["false_coverage"] for r in unanswerable if r["false_coverage"] is not None]
    ran = [r for r in scored if r["iterations"]]
    return {
        "queries": len(rows), "failed": len(rows) - len(scored),
        "answerable": len(answerable), "unanswerable": len(unanswerable),
        "questions": sum(f["questions"] for f in fid),
        "questions_without_requirement": sum(f["questions"] - f["questions_kept"] for f in fid),
        "queries_every_question_kept": sum(1 for f in fid if not f["missing_questions"]),
        "requirements": sum(f["requirements"] for f in fid),
        "status_or_meta_requirements": sum(f["status_or_meta"] for f in fid),
        "answer_requirements": sum(f.get("answers", 0) for f in fid),
        "off_query_requirements": sum(f["off_query"] for f in fid),
        "replanned_requirements": sum(r["replanned"] for r in scored),
        "runs_with_fallbacks": sum(1 for r in scored if r["degraded"]),
        "answering_read_first": _mean(first),
        "queries_all_answering_read_first": _ratio(sum(1 for v in first if v == 1.0), len(first)),
        "cited_recall": _mean(recall),
        "queries_answering_cited": _ratio(sum(1 for v in recall if v > 0), len(recall)),
        "cited_precision": _ratio(sum(r["cited_answering"] for r in scored if r["cited"] is not None), cited),
        "coverage_answerable": _mean(r["mean_coverage"] for r in answerable),
        "coverage_unanswerable": _mean(r["mean_coverage"] for r in unanswerable),
        "false_coverage": _ratio(sum(1 for v in false if v), len(false)),
        "median_iterations": _median(r["iterations"] for r in ran),
        "iterations_nothing_new": sum(r["iterations_nothing_new"] for r in ran) if ran else None,
        "llm_calls": sum(r["llm_calls"] for r in ran if r["llm_calls"] is not None) if ran else None,
        "median_wall_s": _median(r["wall_s"] for r in scored),
        "wall_s": round(sum(r["wall_s"] or 0.0 for r in scored), 1),
    }
