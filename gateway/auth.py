"""Bearer-token authentication for every endpoint but the health checks.

The dashboard (/ui, its blueprint ``ui``) is let through: it checks its own login (a signed
session cookie, gateway/ui/security.py) and sends a browser to its login form instead of a 401.
``GET /events`` also takes that cookie when it is logged in, since a browser's EventSource
cannot send an Authorization header. Every other endpoint takes the bearer token only.
"""

from __future__ import annotations

import hmac

from flask import Flask, request
from werkzeug.datastructures import Headers

from gateway.errors import ApiError
from gateway.ui.security import logged_in

# Load balancers and platform probes call these without credentials; they reveal nothing.
OPEN_ENDPOINTS = frozenset({"ops.health", "ops.ready"})
REALM = 'Bearer realm="taskforge"'
# The live event stream, which the dashboard's pages open with the session cookie.
EVENTS_PATH = "/events"


def bearer_token(header: str | None) -> bytes | None:
    """Return the token of an ``Authorization: Bearer <token>`` header value, if there is one."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    # WSGI gives header values as latin-1 text: this recovers the bytes the client sent.
    return token.strip().encode("latin-1", errors="replace")


def check_token(headers: Headers, expected: bytes) -> None:
    """Raise 401 unless `headers` carry ``Authorization: Bearer <expected>``."""
    given = bearer_token(headers.get("Authorization"))
    if given is None:
        raise ApiError(
            401,
            "authentication required: send Authorization: Bearer <token>",
            headers={"WWW-Authenticate": REALM},
        )
    # Constant time: the comparison must not reveal how much of a guess was right.
    if not hmac.compare_digest(given, expected):
        raise ApiError(
            401,
            "invalid bearer token",
            headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
        )


def install(app: Flask, token: str | None) -> None:
    """Require `token` on every request to `app` except OPEN_ENDPOINTS, the dashboard's own
    routes and a logged-in dashboard session's GET /events; do nothing when None."""
    if token is None:
        return
    expected = token.encode("utf-8")

    @app.before_request
    def require_token() -> None:
        """Refuse the request with 401 unless it carries the token."""
        # Unknown paths (endpoint None) are refused too: a stranger learns no routes.
        if request.endpoint in OPEN_ENDPOINTS or request.blueprint == "ui":
            return
        if _session_may_read_events(token):
            return
        check_token(request.headers, expected)


def _session_may_read_events(token: str) -> bool:
    """Tell whether this is GET /events from a logged-in dashboard session without a header."""
    if request.path != EVENTS_PATH or request.method not in ("GET", "HEAD"):
        return False
    # A bearer header, when sent, is checked as usual: a wrong one stays a 401.
    return "Authorization" not in request.headers and logged_in(token)
