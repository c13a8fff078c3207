"""Who may use the dashboard: the login page, logout, and the checks before every request."""

from __future__ import annotations

import logging

from flask import Response, redirect, request, session, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.context import gateway
from gateway.ui import security
from gateway.ui.base import bp, render

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
    """Put the dashboard's CSP and other headers on every /ui answer (errors and redirects too)."""
    if request.path == "/ui" or request.path.startswith("/ui/"):
        security.add_headers(response)
    return response


@bp.route("/login", methods=["GET", "POST"])
def login() -> BaseResponse | tuple[str, int]:
    """Show the login form; log in with the API token."""
    token = gateway().settings.api_token
    target = _safe_next(request.values.get("next"))
    if token is None or (request.method == "GET" and security.logged_in(token)):
        return redirect(target)  # open, or logged in already: nothing to do here
    error = None
    if request.method == "POST":
        if security.token_matches(request.form.get("token", ""), token):
            security.log_in(token)
            log.info("ui_login", extra={"client": request.remote_addr})
            return redirect(target, code=303)
        # An operator can alert on guessing (nothing limits the rate of attempts).
        log.warning("ui_login_failed", extra={"client": request.remote_addr})
        error = "That is not the API token."
    status = 401 if error else 200
    return render("login.html", "login", status=status, error=error, next=target)


@bp.route("/logout", methods=["POST"])
def logout() -> BaseResponse:
    """End the session: the browser must log in again."""
    session.clear()
    log.info("ui_logout", extra={"client": request.remote_addr})
    return redirect(url_for("ui.login"), code=303)
