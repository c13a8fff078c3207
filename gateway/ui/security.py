"""The dashboard's security: the signed session, login state, CSRF tokens, response headers.

The session is Flask's signed cookie. Its signing key lives in Redis (``Keys.ui_secret``, 32
random bytes set once with SET NX), so every gunicorn process and every gateway host signs and
checks alike, and a restart logs nobody out. A logged-in session holds an HMAC of the API token
under that key, never the token: changing TASKFORGE_API_TOKEN logs everyone out. It also holds
a random session id whose record in Redis (``Keys.ui_session``, as long as SESSION_LIFETIME)
logout deletes: a copy of the cookie stops working with the session it was copied from. Reading
that record is the one Redis read a logged-in page pays for its login (once per request).

Every POST from the dashboard carries the session's CSRF token (a random value kept in the
session), checked in constant time, with or without an API token: the cookie alone (which a
browser attaches to a cross-site form post when SameSite fails or is absent) changes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from datetime import timedelta
from typing import Any

import redis
from flask import Flask, Request, Response, current_app, g, request, session
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from gateway.http_errors import redis_unavailable
from shared.engine.keys import Keys

SECRET_BYTES = 32
CSRF_FIELD = "csrf"
SESSION_ID_FIELD = "sid"
COOKIE_NAME = "taskforge_ui"
SESSION_LIFETIME = timedelta(hours=12)  # a login lasts at most this long
# No inline script and no inline style anywhere in the dashboard: its CSS and JS are files it
# serves itself; the chart is inline SVG, whose presentation attributes are not styles.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
NO_STORE = "no-store"  # what no cache may keep: every answer but the dashboard's files
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class CsrfError(Exception):
    """A dashboard POST without the session's CSRF token (or with another one)."""


def load_secret(client: redis.Redis, keys: Keys) -> bytes:
    """Return the dashboard's signing key, creating it if no process has yet (one round trip)."""
    pipe = client.pipeline(transaction=False)
    pipe.set(keys.ui_secret, secrets.token_bytes(SECRET_BYTES), nx=True)
    pipe.get(keys.ui_secret)
    _, secret = pipe.execute()
    return bytes(secret)


class RedisKeyedSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie sessions, signed with the key kept in Redis.

    The key is read once per process, at the first request that carries a session cookie or
    writes a session: API requests (no cookie) never touch it, so they answer as before when
    Redis is down.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._lock = threading.Lock()

    def session_alive(self, session_id: str) -> bool:
        """Tell whether a logged-in session's record is still in Redis (not logged out)."""
        return bool(self._client.exists(self._keys.ui_session(session_id)))

    def start(self, session_id: str) -> None:
        """Record a new logged-in session for as long as a login lasts."""
        self._client.set(self._keys.ui_session(session_id), 1, ex=SESSION_LIFETIME)

    def end(self, session_id: str) -> None:
        """Forget a session: its cookie, wherever copied, is logged out from now on."""
        self._client.delete(self._keys.ui_session(session_id))

    def ensure_key(self, app: Flask) -> None:
        """Load the signing key from Redis unless this process has it (raises RedisError)."""
        if app.secret_key:
            return
        with self._lock:  # gthread: two first requests at once read it once
            if not app.secret_key:
                app.secret_key = load_secret(self._client, self._keys)

    def get_signing_serializer(self, app: Flask) -> Any:
        """Return Flask's serializer with the Redis-kept key."""
        self.ensure_key(app)
        return super().get_signing_serializer(app)

    def get_cookie_secure(self, app: Flask) -> bool:
        """Mark the cookie Secure when the browser reached us over https."""
        return request.is_secure

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        """Return the request's session; an empty one without a cookie (no Redis read)."""
        if request.cookies.get(self.get_cookie_name(app)) is None:
            return self.session_class()
        try:
            return super().open_session(app, request)
        except redis.exceptions.RedisError as exc:
            if not redis_unavailable(exc):
                raise
            # Redis is down: the page itself answers 503; the cookie is kept for later.
            return self.session_class()


def ensure_session_key() -> None:
    """Have the session's signing key before a page may write a session: without Redis the
    page answers 503 (its view runs no further) rather than fail as it sets its cookie."""
    interface = current_app.session_interface
    if isinstance(interface, RedisKeyedSessions):
        interface.ensure_key(current_app)


def install_sessions(app: Flask, client: redis.Redis, keys: Keys) -> None:
    """Give `app` the Redis-keyed signed-cookie session and its cookie flags."""
    app.session_interface = RedisKeyedSessions(client, keys)
    app.config.update(
        SESSION_COOKIE_NAME=COOKIE_NAME,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        # A signature older than this is refused (and the session's record in Redis expires
        # then too); logout ends it sooner, for every copy of the cookie.
        PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME,
    )


def login_digest(token: str) -> str:
    """Return what a logged-in session holds: an HMAC of the API token under the session key."""
    key = current_app.secret_key
    if isinstance(key, str):
        key = key.encode()
    assert key, "the session key is loaded before a session can be logged in"
    return hmac.new(key, b"taskforge-ui-login\0" + token.encode(), hashlib.sha256).hexdigest()


def token_matches(given: str, token: str) -> bool:
    """Tell whether a token typed into the login form is the API token (constant time)."""
    # Digests of equal length: compare_digest would otherwise reveal the token's length.
    given_digest = hashlib.sha256(given.encode("utf-8", "replace")).digest()
    return hmac.compare_digest(given_digest, hashlib.sha256(token.encode("utf-8")).digest())


def logged_in(token: str | None) -> bool:
    """Tell whether this request's session is logged in (always, when no token is set).

    A logged-in cookie costs one Redis read per request (its record, which logout deletes),
    remembered for the rest of the request; no cookie or one without a login costs none.
    """
    if token is None:
        return True
    cached = g.get("taskforge_logged_in")
    if cached is not None:
        return bool(cached)
    held, session_id = session.get("auth"), session.get(SESSION_ID_FIELD)
    alive = (
        isinstance(held, str)
        and isinstance(session_id, str)
        and hmac.compare_digest(held.encode(), login_digest(token).encode())
        and _sessions().session_alive(session_id)
    )
    g.taskforge_logged_in = alive
    return alive


def log_in(token: str) -> None:
    """Start a fresh logged-in session (a new CSRF token: nothing from before carries over)."""
    session.clear()
    session_id = secrets.token_urlsafe(16)
    _sessions().start(session_id)
    session["auth"] = login_digest(token)
    session[SESSION_ID_FIELD] = session_id
    session[CSRF_FIELD] = secrets.token_urlsafe(32)
    g.taskforge_logged_in = True


def log_out() -> None:
    """End this session server-side and clear its cookie in this browser."""
    session_id = session.get(SESSION_ID_FIELD)
    if isinstance(session_id, str):
        _sessions().end(session_id)
    session.clear()
    g.taskforge_logged_in = False


def _sessions() -> RedisKeyedSessions:
    interface = current_app.session_interface
    assert isinstance(interface, RedisKeyedSessions), "install_sessions ran in create_app"
    return interface


def csrf_token() -> str:
    """Return this session's CSRF token, creating it on first use."""
    token = session.get(CSRF_FIELD)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session[CSRF_FIELD] = token
    return token


def check_csrf() -> None:
    """Raise CsrfError unless the posted form carries this session's CSRF token."""
    expected = session.get(CSRF_FIELD)
    given = request.form.get(CSRF_FIELD)
    if not isinstance(expected, str) or not given:
        raise CsrfError()
    if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
        raise CsrfError()


def add_headers(response: Response) -> Response:
    """Put the dashboard's security headers on a response."""
    response.headers.update(HEADERS)
    return response
