"""The gateway's wire contract, without FastAPI: the REST API's request and response models and the
token file the gateway, the CLI and the typed client (:mod:`gateway.client`) share.

A driver script imports this and :mod:`gateway.client` (httpx) only; :mod:`gateway.server` builds the app
from the same models.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infra.private_files import private_dir
from infra.settings import PresetName

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


# -- token ---------------------------------------------------------------------------------------------
def config_dir() -> Path:
    """``$XDG_CONFIG_HOME/forage`` (default ``~/.config/forage``)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "forage"


def token_path() -> Path:
    return config_dir() / "gateway-token"


def read_token(path: Path | None = None) -> str | None:
    """The owner's gateway token if there is one (the typed client and examples/driver.py use it when given no
    token): None when the file is missing, empty or not readable by this user."""
    path = path or token_path()
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def gateway_token(host: str, *, no_token: bool = False, path: Path | None = None) -> str | None:
    """The token a gateway bound to ``host`` requires: always the per-install token, unless ``no_token`` on a
    loopback address (then any local user of this machine can use the gateway; it says so when it starts)."""
    if no_token:
        if not is_loopback(host):
            raise ValueError(f"--no-token is only for a loopback address, not {host!r}: every other address "
                             "needs the token")
        return None
    return load_or_create_token(path)


def is_loopback(host: str) -> bool:
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_or_create_token(path: Path | None = None) -> str:
    """The gateway token, generated on first use and kept user-only (0600, folder 0700)."""
    path = path or token_path()
    if path.exists():
        os.chmod(path, 0o600)
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token
    private_dir(path.parent)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (token + "\n").encode())
    finally:
        os.close(fd)
    os.chmod(path, 0o600)
    return token



# -- API models ----------------------------------------------------------------------------------------
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunCreate(_Model):
    """A new run: the query and how hard to look."""

    query: str = Field(min_length=1, max_length=4000, description="The research question (stays on this machine).")
    preset: PresetName | None = Field(default=None, description="quick / standard / deep (default: settings).")
    library: str | None = Field(default=None, description="Folder of PDFs on the gateway's machine.")
    max_iterations: int | None = Field(default=None, ge=1, le=50, description="Most search/forage iterations.")
    min_coverage: float | None = Field(default=None, ge=0, le=1, description="Stop once mean coverage reaches it.")
    max_requirements: int | None = Field(default=None, ge=1, le=10, description="Most requirements to derive.")
    offline: bool | None = Field(default=None, description="Send nothing at all: only the library is searched.")
    llm_backend: Literal["ollama", "openai", "embedded"] | None = Field(
        default=None, description="Model backend: ollama (an Ollama server), openai (the gateway's OpenAI-compatible "
                                  "server at llm.base_url: vLLM, llama.cpp, LM Studio) or embedded (the small model "
                                  "that ships with Forage); default: the gateway's settings.")
    model: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/+-]{0,199}$",
                              description="Model name for the backend (Ollama: one GET /api/models lists).")


class RequirementIn(_Model):
    id: str = Field(pattern=r"^R\d+$", description="R1, R2, ...")
    text: str = Field(min_length=3, max_length=400)


class Approval(_Model):
    """Approve the proposal, optionally with edited requirements and search strings."""

    requirements: list[RequirementIn] | None = Field(
        default=None, description="Replace the proposed requirements (at least one).")
    search_queries: list[dict[str, Any]] | None = Field(
        default=None, description="Replace the proposed search strings (SearchQuery objects); [] sends nothing.")


class Proposal(_Model):
    requirements: list[dict[str, Any]]
    search_queries: list[dict[str, Any]] = Field(description="The exact strings that would leave the machine.")
    search_filters: list[list[str]] = Field(
        default=[], description="Per search string, in the same order, the filters sent with it in words (years, "
                                "open access, with a PDF, authors, venue, lookups): shown at approval.")
    degraded: list[str] = []


class Documents(_Model):
    found: int = Field(description="Candidates the searcher offered.")
    downloaded: int = Field(description="PDFs downloaded from online sources.")
    ingested: int = Field(description="Documents stored (or already known) in the store.")
    failed: int
    failures: dict[str, str] = Field(default_factory=dict, description="key -> reason, for failed documents.")


class RunView(_Model):
    run_id: str
    status: str = Field(description="planning, awaiting_approval, running, finished, failed, cancelled, "
                                    "interrupted (run.json says running, but the process that drove it is gone: "
                                    "its gateway, driver or Orchestrator stopped), unknown.")
    query: str | None = None
    live: bool = Field(description="This gateway holds the run (it can still change).")
    resumable: bool = Field(default=False, description="POST /api/runs/{run_id}/resume continues it (interrupted, "
                                                       "cancelled or failed after approval, or running with "
                                                       "no driver to be seen from this machine).")
    proposal: Proposal | None = Field(default=None, description="Requirements and search strings to approve.")
    requirements: list[dict[str, Any]] = []
    search_queries: list[dict[str, Any]] = []
    iterations: int = 0
    coverage: dict[str, float] = {}
    final_coverage: float | None = None
    stop_reason: str | None = None
    error: str | None = None
    documents: Documents
    egress_requests: int = Field(description="Requests recorded in egress.jsonl.")
    last_seq: int = Field(description="Seq of the last status event known.")
    report_ready: bool
    artifacts: list[str]


class ModelChoices(_Model):
    """What the New-run form offers: the backends, the gateway's default, and the models the Ollama server has."""

    backends: list[str]
    backend: str = Field(description="The gateway's default backend.")
    model: str = Field(description="The gateway's default model for that backend.")
    ollama_host: str
    ollama_models: list[str] = Field(default=[], description="Installed on the Ollama server (empty when it cannot "
                                                             "say: see ollama_error).")
    ollama_error: str | None = None
    openai_base_url: str | None = Field(default=None, description="The OpenAI-compatible server (backend openai).")
    openai_models: list[str] = Field(default=[], description="Served there (asked only when it is the gateway's "
                                                             "default backend; see openai_error).")
    openai_error: str | None = None


class RunCreated(_Model):
    run_id: str
    status: str
    state_url: str
    events_url: str


class RunListItem(_Model):
    run_id: str
    status: str
    query: str | None = None
    final_coverage: float | None = None
    live: bool
    resumable: bool = False


class Chunk(_Model):
    chunk_id: str
    doc_id: str
    title: str | None
    section_path: str
    pages: list[int]
    text: str


class Message(_Model):
    message: str


class AskIn(_Model):
    """A question about one run (the dashboard's ask box)."""

    question: str = Field(min_length=1, max_length=2000, description="Answered from the run's documents only.")


class AskCited(_Model):
    n: int
    chunk_id: str
    doc_id: str
    title: str
    section_path: str
    sha256: str = Field(default="", description="Of the passage's text when it was cited ('' in asks recorded "
                                                "before it was kept); `forage verify` checks it.")


class AskOut(_Model):
    """An answer from the run's evidence (as `forage ask --run`), also appended to the run's asks.jsonl."""

    kind: str = Field(description="'answer', 'insufficient' (not enough evidence: the text says what was "
                                  "searched) or 'chit_chat'.")
    text: str = Field(description="The answer, citing passages [n].")
    cited: list[AskCited] = []
    question: str | None = Field(default=None, description="The question (in the run's asks).")
    asked_at: str | None = Field(default=None, description="When it was asked (ISO 8601, UTC).")
