"""What a request to the runs can fail with, said without HTTP: the REST app maps each to a status code in one
exception handler (gateway/server.py), the MCP server to a tool error (gateway/mcp_server.py).

Each is a :class:`~infra.errors.ForageError` whose ``retryable`` says whether the same request again could
succeed: only :class:`Unavailable` (a model server that does not answer yet) is.
"""

from __future__ import annotations

from infra.errors import ForageError


class RunRequestError(ForageError):
    """A request about a run that cannot be served; the message is one sentence for the caller."""


class NotFound(RunRequestError):
    """No such run, or no such file of a run."""


class Conflict(RunRequestError):
    """The run is not in a state that allows the request (approve a run that is not awaiting approval)."""


class Invalid(RunRequestError):
    """The request's own values are wrong (an empty query, a library that is not a folder)."""


class NotAllowed(RunRequestError):
    """The gateway's owner has not allowed it (a library outside the allow-list)."""


class Unavailable(RunRequestError):
    """Something the request needs does not answer now (the model server): a retry may succeed."""

    retryable = True


__all__ = ["RunRequestError", "NotFound", "Conflict", "Invalid", "NotAllowed", "Unavailable"]
