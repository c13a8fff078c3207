"""The dashboard's blueprint and what every page shares: rendering, HTML errors, the nav."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import redis.exceptions
from flask import Blueprint, render_template, request, url_for
from markupsafe import Markup, escape
from werkzeug.wrappers import Response as BaseResponse

from gateway.context import gateway
from gateway.http_errors import OUTAGES, RETRY_AFTER_SECONDS, redis_unavailable, unexpected_response
from gateway.ui import security
from shared.model.jobs import format_ms

bp = Blueprint(
    "ui",
    __name__,
    url_prefix="/ui",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)

# The nav, in order: (label, endpoint, query arguments, the page it marks as current).
NAV: tuple[tuple[str, str, dict[str, str], str], ...] = (
    ("Overview", "ui.overview", {}, "overview"),
    ("Queues", "ui.queues", {}, "queues"),
    ("Workers", "ui.workers", {}, "workers"),
    ("Periodic", "ui.schedules", {}, "schedules"),
    ("Jobs", "ui.jobs", {}, "jobs"),
    ("Scheduled", "ui.jobs", {"state": "scheduled"}, "jobs:scheduled"),
    ("Retrying", "ui.jobs", {"state": "retrying"}, "jobs:retrying"),
    ("Dead (DLQ)", "ui.dlq", {}, "dlq"),
)


def events_url(**filters: str | None) -> str:
    """Return the address of the live event stream (GET /events) with these filters."""
    query = urlencode({name: value for name, value in filters.items() if value})
    return f"/events?{query}" if query else "/events"


def asked_by() -> str:
    """Return who asks for this form's operator action (gateway.actions): the dashboard and
    the client's address."""
    return f"dashboard {request.remote_addr}" if request.remote_addr else "dashboard"


class UiError(Exception):
    """A page that cannot be shown: rendered as an HTML error page with this status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def render(template: str, page: str, *, status: int = 200, **context: Any) -> tuple[str, int]:
    """Render a page: `page` is its ``body[data-page]`` (and which nav entry is current)."""
    token = gateway().settings.api_token
    context.setdefault("nav_current", page)
    html = render_template(
        template,
        page=page,
        nav=NAV,
        auth_required=token is not None,
        signed_in=token is not None and security.logged_in(token),
        **context,
    )
    return html, status


def live_page(
    template: str, page: str, live_endpoint: str, *, live_on: str | None = None, **context: Any
) -> tuple[str, int]:
    """Render a page whose changing part live.js refreshes from `live_endpoint` (with the
    context's ``live_query``, if any) when an event of `live_on` arrives (None: any event)."""
    live_query: dict[str, Any] = context.get("live_query", {})
    return render(
        template,
        page,
        live_events=events_url(),
        live_refresh=url_for(live_endpoint, **live_query),
        live_on=live_on,
        **context,
    )


@bp.errorhandler(UiError)
def ui_error(exc: UiError) -> tuple[str, int]:
    """Answer a UiError with the error page (inside the nav, so the operator can go on)."""
    return render("error.html", "error", status=exc.status, message=exc.message)


@bp.errorhandler(redis.exceptions.RedisError)
def redis_error(exc: redis.exceptions.RedisError) -> tuple[str, int, dict[str, str]] | BaseResponse:
    """Answer a Redis outage with an HTML 503 page (the API's JSON answer for anything else)."""
    if not redis_unavailable(exc):
        return unexpected_response(exc)  # a bug: logged, 500
    OUTAGES.warn(exc)
    message = "Redis is unavailable, so the dashboard cannot read the queues. Try again shortly."
    body, status = render("error.html", "error", status=503, message=message)
    return body, status, {"Retry-After": str(RETRY_AFTER_SECONDS)}


@bp.app_template_filter("when")
def when(ms: int | None) -> str:
    """Show a Redis-clock time (epoch ms) as RFC 3339 UTC, or a dash."""
    return format_ms(ms) or "—"


@bp.app_template_filter("when_wrap")
def when_wrap(ms: int | None) -> Markup:
    """Show a time as `when` does, allowed to break between the date and the time of day.

    A table column of RFC 3339 times is then half as wide: the listings fit 1280 px.
    """
    text = when(ms)
    date, sep, clock = text.partition("T")
    if not sep:
        return escape(text)
    # The datetime attribute keeps the time whole for a machine (and a copy of the page);
    # times.js shows it relative ("3 s ago"), the exact time in the title.
    return Markup('<time datetime="{0}" title="{0}">{1}<wbr>T{2}</time>').format(text, date, clock)


@bp.app_template_filter("at")
def at(ms: int | None) -> Markup:
    """Show a time as `when` does, in a <time> element times.js makes relative, or a dash."""
    if ms is None:
        return Markup("—")
    return Markup('<time datetime="{0}" title="{0}">{0}</time>').format(when(ms))


# After these a long name may break: a dotted job type wraps at its dots, not mid-word.
_NAME_BREAKS = re.compile(r"(?<=[._:/,-])")


@bp.app_template_filter("breakable")
def breakable(name: str | None) -> Markup:
    """Escape a name and let it break after its separators (``<wbr>``), or show a dash."""
    if not name:
        return Markup("—")
    return Markup("<wbr>").join(escape(part) for part in _NAME_BREAKS.split(name) if part)


# Past this many characters a listing shows the start of an error; the job's page has it all.
ERROR_PREVIEW = 200


@bp.app_template_filter("error_preview")
def error_preview(error: str | None) -> str:
    """Shorten an error message for a listing's cell (the cell's title holds all of it)."""
    if not error:
        return "—"
    return error if len(error) <= ERROR_PREVIEW else error[: ERROR_PREVIEW - 1].rstrip() + "…"


@bp.app_template_filter("counted")
def counted(n: int, noun: str, plural: str | None = None) -> str:
    """Say how many of a thing, singular or plural: "1 dead job", "1,200 dead jobs"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


@bp.app_template_filter("duration")
def duration(ms: int | None) -> str:
    """Show a length of time (ms) the way an operator reads it: 4 s, 3 min 20 s, 2 h 5 min."""
    if ms is None:
        return "—"
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.1f} s" if ms < 10_000 else f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


@bp.context_processor
def page_globals() -> dict[str, Any]:
    """Give every dashboard template the CSRF token its forms carry."""
    return {"csrf_token": security.csrf_token}
