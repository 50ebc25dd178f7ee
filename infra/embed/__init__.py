"""Embedders. ``build_embedder(settings)`` picks the backend named in ``settings.embed``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.embed.base import Embedder
from infra.errors import ConfigError

if TYPE_CHECKING:
    from infra.settings import Settings

__all__ = ["Embedder", "build_embedder"]


def build_embedder(settings: Settings) -> Embedder:
    """MiniLM in-process (``embed.backend='minilm'``, offline), an Ollama model (``'ollama'``) or an
    OpenAI-compatible embedding server (``'openai'``).

    Nothing heavy happens here: models load and servers are contacted on first use.
    """
    embed = settings.embed
    if embed.backend == "minilm":
        from infra.embed.minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=embed.batch_size, device=embed.device, precision=embed.precision,
                              pool_windows=embed.window_vectors == "pooled")
    if embed.backend == "ollama":
        from infra.embed.ollama import OllamaEmbedder

        return OllamaEmbedder(host=embed.host, model=embed.model, batch_size=embed.batch_size,
                              timeout_s=settings.llm.timeout_s)
    if embed.backend == "openai":
        from infra.embed.openai_compat import OpenAICompatEmbedder

        return OpenAICompatEmbedder(host=embed.base_url, model=embed.model, api_key=embed.api_key,
                                    batch_size=embed.batch_size, timeout_s=settings.llm.timeout_s, dim=embed.dim)
    raise ConfigError(f"unknown embed backend {embed.backend!r}; choose 'minilm', 'ollama' or 'openai'")
