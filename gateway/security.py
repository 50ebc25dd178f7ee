"""Who may use the gateway, and what every response says to the browser: the HTTP edge's checks, in one place.

* the per-install token (``Authorization: Bearer …``; ``?token=`` on a page or download link a browser opens
  without headers, and on a WebSocket), compared in constant time;
* with ``--no-token`` (loopback only): a loopback Host on every request (no DNS rebinding) and, on a WebSocket from
  a browser, a loopback Origin (no cross-site WebSocket hijacking);
* before a request is read: a body over the limit (413/411), a state-changing request from another origin (403);
* on every response: a Content-Security-Policy that loads and connects to this gateway only, no framing, no
  sniffing, no referrer.

Starlette's types only (FastAPI's are the same classes): the MCP server's HTTP app uses :func:`same_secret` too.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.websockets import WebSocket

from gateway.api import is_loopback

# only this gateway: the browser itself refuses anything from elsewhere (Swagger UI styles inline)
DOCS_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
            "font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
NO_TOKEN = ("missing or wrong token: open the address `forage serve` printed (it carries the token once), or send "
            "Authorization: Bearer TOKEN (the owner's token file: $XDG_CONFIG_HOME/forage/gateway-token)")


def same_secret(given: str, token: str) -> bool:
    """Constant-time comparison of a presented secret with the token, as bytes (any text: never a 500)."""
    return secrets.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


def authorize(request: Request) -> None:
    """A dependency of every API route: the app's token (``app.state.token``) as a Bearer header; with no token,
    a loopback Host. 401 / 403 otherwise."""
    token = request.app.state.token
    if token is not None:
        given = request.headers.get("authorization", "")
        if not (given.startswith("Bearer ") and same_secret(given[7:].strip(), token)):
            raise HTTPException(401, NO_TOKEN, headers={"WWW-Authenticate": "Bearer"})
    else:
        check_loopback_host(request.headers.get("host", ""))


def authorize_page(request: Request) -> None:
    """As :func:`authorize`, and a page a browser opens (no headers) may carry the token as ``?token=``."""
    token = request.app.state.token
    given = request.query_params.get("token")
    if token is not None and given and same_secret(given, token):
        return
    authorize(request)


def refuse(request: Request, max_body: int) -> JSONResponse | None:
    """A response refusing the request before it is read, or None: a body over ``max_body`` (by its
    Content-Length; a streamed body without one is refused too) → 413/411; a state-changing request a web
    page on another origin sent (its Origin is not this Host) → 403. Clients that are not browsers send no
    Origin; a browser always sends one with a POST."""
    if request.method in ("POST", "PUT", "PATCH", "DELETE"):
        length = request.headers.get("content-length")
        if length is None and request.headers.get("transfer-encoding", "").lower() == "chunked":
            return JSONResponse({"detail": "a request body needs a Content-Length"}, status_code=411)
        try:
            too_big = length is not None and int(length) > max_body
        except ValueError:
            return JSONResponse({"detail": "bad Content-Length"}, status_code=400)
        if too_big:
            return JSONResponse({"detail": f"request body over {max_body:,} bytes"}, status_code=413)
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
            return JSONResponse({"detail": f"cross-origin request from {origin[:100]!r} refused"}, status_code=403)
    return None


def security_headers(request: Request) -> dict[str, str]:
    """Every response: a page of this gateway loads scripts, styles, images and connections from this gateway
    only (no remote image in a report can carry data out), is never framed, and types are not sniffed."""
    host = request.headers.get("host", "")
    connect = f"'self' ws://{host} wss://{host}" if host and "'" not in host and ";" not in host else "'self'"
    return {"Content-Security-Policy": DOCS_CSP.replace("connect-src 'self'", f"connect-src {connect}"),
            "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"}


def check_loopback_host(host: str) -> None:
    """403 unless ``host`` (a Host header: name, IPv4 or [IPv6], with or without a port) is loopback."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if host.startswith("["):
        name = host.split("]")[0] + "]"
    if not is_loopback(name):
        raise HTTPException(403, f"Host {host!r} is not loopback: start the gateway with a token to serve it")


def ws_allowed(websocket: WebSocket) -> bool:
    """Whether a WebSocket may follow a run: the app's token (``?token=`` or a Bearer header); with no token, a
    loopback Host and, from a browser, a loopback Origin."""
    token = websocket.app.state.token
    if token is not None:
        given = websocket.query_params.get("token") or ""
        header = websocket.headers.get("authorization", "")
        if header.startswith("Bearer "):
            given = header[7:].strip()
        return bool(given) and same_secret(given, token)
    try:
        check_loopback_host(websocket.headers.get("host", ""))
    except HTTPException:
        return False
    origin = websocket.headers.get("origin")
    if origin:  # a browser: only the dashboard's own origin (no cross-site WebSocket hijacking)
        return is_loopback(urlsplit(origin).hostname or "")
    return True
