"""Work started when the test session starts (tests/conftest.py ``_early_starts``), read by the module that
asked for it. A plain module, so the conftest and the test modules share one stash key."""

from __future__ import annotations

from typing import Any

import pytest

#: ``config.stash`` key: module name -> what its ``early_start`` returned (or the exception it raised)
EARLY_STARTS = pytest.StashKey[dict[str, Any]]()


def early_started(request: pytest.FixtureRequest) -> Any:
    """What the requesting module's ``early_start`` returned when the session started (it raises what that
    raised, a skip included)."""
    handle = request.config.stash[EARLY_STARTS][request.module.__name__]
    if isinstance(handle, BaseException):
        raise handle
    return handle
