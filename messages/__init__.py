"""Typed contracts between Forage's actors (pydantic only; no Ray, no FastAPI)."""

from messages.base import Frozen, Message
from messages.forage import ChunkJudgement, DocumentSummary, Evidence, ForageRequest, RequirementCoverage
from messages.ingest import IngestRequest, IngestResult
from messages.plan import PlanRequest, Requirement, RequirementsPlan, ResearchQuery, SearchQuery
from messages.search import Candidate, SearchRequest, SearchResults, Skipped
from messages.status import RunSummary, Stage, StatusEvent
from messages.write import CitedChunk, Report, SourceRef, WriteRequest

__all__ = [
    "Candidate", "ChunkJudgement", "CitedChunk", "DocumentSummary", "Evidence", "ForageRequest", "Frozen",
    "IngestRequest", "IngestResult", "Message", "PlanRequest", "Report", "Requirement", "RequirementCoverage",
    "RequirementsPlan", "ResearchQuery", "RunSummary", "SearchQuery", "SearchRequest", "SearchResults", "Skipped", "SourceRef",
    "Stage", "StatusEvent", "WriteRequest",
]
