"""One MiniLM embedder per test process: the model (about 3-5 s to load on a busy 2-core machine) is loaded
once, at the first ``embed``, and serves every test that embeds with it (the ``minilm`` fixture of
tests/conftest.py, and helpers that are not fixtures, such as tests/unit/finished_run.py)."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def shared_minilm() -> Any:
    from infra.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder()
