"""EmbedEndpoint actors: one in-process embedding model (MiniLM) per node, serving every actor of every run there.

Each Forager and Ingestor used to load its own MiniLM: torch, transformers, sentence-transformers and the weights,
seconds of a core and a few hundred MB of memory per actor (docs/cluster.md has the figures). With ``embed.shared``
(the default) the first actor on a node that needs the model creates that node's endpoint (named per node and per
embedding configuration, detached in Forage's namespace, like the LLM endpoints of :mod:`actors.llm_endpoint`), and
every actor on the node embeds through it: one load per node, kept between runs of one Ray session.

Texts reach the endpoint as the actor's own calls do and nothing is kept there between calls. Token windows are
cut in the calling actor with the model's own tokenizer (``tokenizers``, no torch), so chunking costs no round
trip. An embedding is idempotent: a call whose endpoint died (killed, or a restart) is made again, on the restarted
or a newly created endpoint.

Not shared (each actor builds its own, as before): the Ollama and OpenAI-compatible backends (already a server),
``embed.device`` naming a GPU, and an actor Ray gave a GPU share (an Ingestor with ``ingest.embed_gpus``: its
model runs on its own share).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Sequence
from typing import Any

from actors.options import method_options, options_for
from infra.embed import build_embedder
from infra.embed.base import Embedder, Windowed
from infra.embed.minilm import DIM, MODEL_NAME, MiniLMEmbedder, load_tokenizer, model_path, spans_from_tokenizer
from infra.errors import ForageError
from infra.settings import Settings

ENDPOINT_PREFIX = "forage-embed-"
#: how many times a call is made again when its endpoint died under it (a restarted or new endpoint answers)
CALL_ATTEMPTS = 3


class EmbedEndpoint:
    """One node's in-process embedding model; ``embed`` calls from many actors run on the actor's threads."""

    def __init__(self, settings: Settings) -> None:
        self.embedder = build_embedder(settings)

    def embed(self, texts: Sequence[str]) -> Any:
        """The vectors as one float32 array (rows in order): cheaper to ship than lists of floats."""
        import numpy as np

        return np.asarray(self.embedder.embed(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    def embed_windowed(self, items: Sequence[Windowed]) -> Any:
        """:meth:`Embedder.embed_windowed` as one float32 array (rows in order)."""
        import numpy as np

        return np.asarray(self.embedder.embed_windowed(list(items)), dtype=np.float32)

    def warm(self) -> int:
        """Load the model now; the endpoint's pid."""
        import os

        self.embedder.warm()
        return os.getpid()


def endpoint_key(settings: Settings) -> str:
    """What makes two endpoints' vectors differ: backend, device and precision (batch sizes change no vector but
    are kept so a setting changed between runs takes effect)."""
    embed = settings.embed
    raw = f"{embed.backend}|{embed.device}|{embed.precision}|{embed.batch_size}|{embed.window_vectors}"
    return hashlib.sha256(raw.encode()).hexdigest()[:10]


def endpoint_name(settings: Settings, node_id: str) -> str:
    return f"{ENDPOINT_PREFIX}{node_id[:16]}-{endpoint_key(settings)}"


def shares_node_model(settings: Settings) -> bool:
    """True where this process (a Ray actor) should embed through its node's endpoint rather than load a model of
    its own: ``embed.shared``, the MiniLM backend on the CPU, Ray running, and no GPU given to this process."""
    embed = settings.embed
    if not embed.shared or embed.backend != "minilm" or embed.device not in ("auto", "cpu"):
        return False
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    return not ray.get_gpu_ids()


def actor_embedder(settings: Settings, given: Embedder | None = None) -> Embedder:
    """The embedder an actor uses, the one recipe for all of them: ``given`` (a test's, shipped to the actor), else
    its node's shared endpoint where :func:`shares_node_model`, else its own (``build_embedder``)."""
    if given is not None:
        return given
    if shares_node_model(settings):
        return NodeEmbedder(settings)
    return build_embedder(settings)


class NodeEmbedder:
    """The Embedder port through this node's :class:`EmbedEndpoint` (created on first use); token spans here."""

    name = MODEL_NAME
    dim = DIM

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.max_tokens = MiniLMEmbedder._max_seq_length(model_path())
        self.windows_pooled = settings.embed.window_vectors == "pooled"
        self._tokenizer: Any = None
        self._handle: Any = None

    def endpoint(self) -> Any:
        """This node's endpoint actor, found by name or created (pinned to the node, options from
        :func:`actors.options.options_for`)."""
        if self._handle is None:
            import ray

            node_id = ray.get_runtime_context().get_node_id()
            options = options_for("embed_endpoint", self.settings, name=endpoint_name(self.settings, node_id),
                                  endpoint_node=node_id)
            self._handle = ray.remote(EmbedEndpoint).options(**options).remote(self.settings)
        return self._handle

    def _call(self, method: str, *args: Any) -> Any:
        from ray.exceptions import RayActorError

        options = method_options("embed_endpoint", method, self.settings)  # retried by Ray too: idempotent
        for attempt in range(1, CALL_ATTEMPTS + 1):
            try:
                ref = getattr(self.endpoint(), method).options(**options).remote(*args)
                # waited on as a future: a Forager (an async actor) embeds from worker threads, where ray.get
                # would log "blocking ray.get inside async actor" though its event loop is not blocked
                return ref.future().result()
            except RayActorError as exc:  # the endpoint died under the call: find or create it again
                self._handle = None
                if attempt == CALL_ATTEMPTS:
                    raise ForageError(f"the node's embedding endpoint died {attempt} times in a row: {exc}",
                                      retryable=True) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def check(self) -> None:
        """Nothing to reach before the first call: the endpoint is found, or made, then."""

    def warm(self) -> None:
        """The endpoint's model loaded now (seconds, once per node), and the tokenizer here."""
        self._call("warm")
        self._ensure_tokenizer()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._call("embed", list(texts)).tolist()

    def embed_windowed(self, items: Sequence[Windowed]) -> list[list[float]]:
        if not items:
            return []
        return self._call("embed_windowed", list(items)).tolist()

    def _ensure_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer()
        return self._tokenizer

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        return spans_from_tokenizer(self._ensure_tokenizer(), text)
