"""Bearer-token authentication for every endpoint but the health checks.

The dashboard (/ui, its blueprint ``ui``) is let through: it checks its own login (a signed
session cookie, gateway/ui/security.py) and sends a browser to its login form instead of a 401.
``GET /events`` also takes that cookie when it is logged in, since a browser's EventSource
cannot send an Authorization header. Every other endpoint takes the bearer token only.

A wrong token is counted against the client's address (gateway/lockout.py): after too many,
that address gets 429 with Retry-After, right token or not, until its window ends.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Any

from flask import Flask, current_app, request
from werkzeug.datastructures import Headers

from gateway.client_address import Network, client_address
from gateway.context import Gateway
from gateway.http_errors import ApiError
from gateway.lockout import Lockout
from gateway.ui.security import logged_in

# Load balancers and platform probes call these without credentials; they reveal nothing.
OPEN_ENDPOINTS = frozenset({"ops.health", "ops.ready"})
REALM = 'Bearer realm="taskforge"'
# The live event stream, which the dashboard's pages open with the session cookie.
EVENTS_PATH = "/events"
EXTENSION = "taskforge.auth"  # the app's TokenCheck, in app.extensions


def bearer_token(header: str | None) -> bytes | None:
    """Return the token of an ``Authorization: Bearer <token>`` header value, if there is one."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    # WSGI gives header values as latin-1 text: this recovers the bytes the client sent.
    return token.strip().encode("latin-1", errors="replace")


def _refused(message: str, error: str | None = None) -> ApiError:
    challenge = f'{REALM}, error="{error}"' if error else REALM
    return ApiError(401, message, headers={"WWW-Authenticate": challenge})


class TokenCheck:
    """The bearer-token check of every API request, with its lockout of guessing addresses."""

    def __init__(self, token: str, lockout: Lockout, proxies: tuple[Network, ...]) -> None:
        self.token = token
        self.expected = token.encode("utf-8")
        self.lockout = lockout
        self.proxies = proxies

    def client(self, environ: Mapping[str, Any]) -> str:
        """Return the address this request is counted and logged as."""
        return client_address(environ, self.proxies)

    def __call__(self, environ: Mapping[str, Any], headers: Headers) -> None:
        """Raise 401 unless `headers` carry ``Authorization: Bearer <token>``; 429 while the
        client's address is locked out (Redis is read only on the ways the docstring of
        gateway/lockout.py says)."""
        given = bearer_token(headers.get("Authorization"))
        if given is None:  # no guess: not counted
            raise _refused("authentication required: send Authorization: Bearer <token>")
        client = self.client(environ)
        locked = self.lockout.check(client)
        if locked is not None:
            raise locked.error()
        # Constant time: the comparison must not reveal how much of a guess was right.
        if not hmac.compare_digest(given, self.expected):
            locked = self.lockout.failed(client, "api")
            if locked is not None:
                raise locked.error()
            raise _refused("invalid bearer token", "invalid_token")


def token_check(app: Flask | None = None) -> TokenCheck | None:
    """Return the app's TokenCheck (the current app's by default); None when auth is off."""
    return (app or current_app).extensions.get(EXTENSION)


def install(app: Flask, token: str | None) -> None:
    """Require `token` on every request to `app` except OPEN_ENDPOINTS, the dashboard's own
    routes and a logged-in dashboard session's GET /events; do nothing when None."""
    if token is None:
        return
    gw: Gateway = app.extensions[Gateway.EXTENSION]
    lockout = Lockout(gw.redis, gw.keys, gw.settings.auth_max_failures)
    check = TokenCheck(token, lockout, gw.settings.trusted_proxies)
    app.extensions[EXTENSION] = check

    @app.before_request
    def require_token() -> None:
        """Refuse the request with 401 unless it carries the token."""
        # Unknown paths (endpoint None) are refused too: a stranger learns no routes.
        if request.endpoint in OPEN_ENDPOINTS or request.blueprint == "ui":
            return
        if _session_may_read_events(token):
            return
        check(request.environ, request.headers)


def _session_may_read_events(token: str) -> bool:
    """Tell whether this is GET /events from a logged-in dashboard session without a header."""
    if request.path != EVENTS_PATH or request.method not in ("GET", "HEAD"):
        return False
    # A bearer header, when sent, is checked as usual: a wrong one stays a 401.
    return "Authorization" not in request.headers and logged_in(token)
