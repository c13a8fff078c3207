"""Who may use the dashboard: the login page, logout, and the checks before every request."""

from __future__ import annotations

import logging

from flask import Response, redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway import auth
from gateway.context import gateway
from gateway.lockout import Locked
from gateway.ui import security
from gateway.ui.ui_base import bp, render

log = logging.getLogger(__name__)

# Reachable without logging in: the login form itself and the CSS/JS it needs.
OPEN_ENDPOINTS = frozenset({"ui.login", "ui.static"})


def _safe_next(target: str | None) -> str:
    """Return where to go after login: a dashboard path only (never another site)."""
    # No control characters: a CR or LF cannot go into the Location header (a 500, not a page).
    if target and target.startswith("/ui") and not target.startswith("//") and target.isprintable():
        return target
    return url_for("ui.overview")


@bp.before_request
def guard() -> BaseResponse | tuple[str, int] | None:
    """Send a logged-out browser to the login page; refuse a POST without its CSRF token."""
    if request.endpoint == "ui.static":
        return None  # files: no session, no Redis
    security.ensure_session_key()
    token = gateway().settings.api_token
    if request.endpoint not in OPEN_ENDPOINTS and not security.logged_in(token):
        return redirect(url_for("ui.login", next=request.full_path.rstrip("?")))
    if request.method == "POST":
        try:
            security.check_csrf()
        except security.CsrfError:
            message = (
                "This form was missing its security (CSRF) token or carried an old one. "
                "Go back, reload the page and try again."
            )
            return render("error.html", "error", status=400, message=message)
    return None


@bp.after_app_request
def headers(response: Response) -> Response:
    """Put the dashboard's CSP and other headers on every /ui answer (errors and redirects too),
    and ``Cache-Control: no-store`` on every answer of the gateway but the dashboard's files.

    Pages and API replies carry job payloads, results and errors: no browser cache or shared
    proxy may keep them (say, after logout on a shared machine). A reply that chose its own
    Cache-Control (the event stream's no-cache, the static files) keeps it.
    """
    if request.path == "/ui" or request.path.startswith("/ui/"):
        security.add_headers(response)
    if request.endpoint != "ui.static" and "Cache-Control" not in response.headers:
        response.headers["Cache-Control"] = security.NO_STORE
    return response


def _client() -> str:
    """Return the address this request is counted and logged as (trusted proxies honoured)."""
    check = auth.token_check()
    return check.client(request.environ) if check is not None else str(request.remote_addr)


@bp.route("/login", methods=["GET", "POST"])
def login() -> BaseResponse | tuple[str, int] | tuple[str, int, dict[str, str]]:
    """Show the login form; log in with the API token (429 while the address is locked out)."""
    token = gateway().settings.api_token
    check = auth.token_check()
    target = _safe_next(request.values.get("next"))
    if token is None or check is None or (request.method == "GET" and security.logged_in(token)):
        return redirect(target)  # open, or logged in already: nothing to do here
    error = None
    if request.method == "POST":
        client = check.client(request.environ)
        locked = check.lockout.check(client)  # a Redis read only after a failure from here
        if locked is not None:
            return _locked_out(locked, target)
        if security.token_matches(request.form.get("token", ""), token):
            security.log_in(token)
            log.info("ui_login", extra={"client": client})
            return redirect(target, code=303)
        # An operator can alert on guessing; gateway/lockout.py logs each lockout too.
        log.warning("ui_login_failed", extra={"client": client})
        locked = check.lockout.failed(client, "login")
        if locked is not None:
            return _locked_out(locked, target)
        error = "That is not the API token."
    status = 401 if error else 200
    return render("login.html", "login", status=status, error=error, next=target)


def _locked_out(locked: Locked, target: str) -> tuple[str, int, dict[str, str]]:
    """Answer a login from a locked-out address: 429, the form, and when to try again."""
    error = (
        f"Too many failed logins from this address. Try again in {locked.retry_after} s "
        "(the token is not checked until then)."
    )
    html, status = render("login.html", "login", status=429, error=error, next=target)
    return html, status, {"Retry-After": str(locked.retry_after)}


@bp.route("/logout", methods=["POST"])
def logout() -> BaseResponse:
    """End the session, server-side: this browser and any copy of its cookie must log in again."""
    security.log_out()
    log.info("ui_logout", extra={"client": _client()})
    return redirect(url_for("ui.login"), code=303)
