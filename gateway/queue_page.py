"""The page of queues GET /stats and GET /queues answer: limit, cursor and q, checked once.

Every queue is listed while they fit in one page; past that a page holds about ``limit``
queues, the reply's ``next_cursor`` the next (shared.read.queue_view says how, and what it costs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import request

from gateway.http_errors import ApiError
from shared.model.u64 import U64_PATTERN
from shared.read.queue_view import QueueView, is_cursor, page

QUEUE_PAGE_QUERY = ("limit", "cursor", "q")
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
CURSOR_PATTERN = f"^{U64_PATTERN}$"
SEARCH_MAX = 64


@dataclass(frozen=True)
class QueuePage:
    """What a request asked for: how many queues, from where, whose name contains what."""

    limit: int
    cursor: str | None
    search: str | None


def _bad(name: str, message: str) -> ApiError:
    return ApiError(400, f"{name} {message}", fields=[{"field": name, "message": message}])


def page_query() -> QueuePage:
    """Return the page of queues a request asks for; 400 naming the parameter otherwise."""
    for name in QUEUE_PAGE_QUERY:
        if len(request.args.getlist(name)) > 1:
            raise _bad(name, "is given more than once; give each parameter at most once")
    text = request.args.get("limit", str(DEFAULT_LIMIT))
    if not (len(text) <= 4 and text.isascii() and text.isdigit() and 1 <= int(text) <= MAX_LIMIT):
        raise _bad("limit", f"must be an integer from 1 to {MAX_LIMIT}, got {text[:20]!r}")
    cursor = request.args.get("cursor")
    if cursor is not None and not is_cursor(cursor):
        raise _bad("cursor", f"must be the next_cursor of a previous page, got {cursor[:24]!r}")
    search = request.args.get("q")
    if search is not None and not 1 <= len(search) <= SEARCH_MAX:
        raise _bad("q", f"must be 1 to {SEARCH_MAX} characters")
    return QueuePage(int(text), cursor, search)


def read_page(scripts: Any, wanted: QueuePage) -> QueueView:
    """Read the queues of one page live, and the totals of every queue."""
    return page(scripts, limit=wanted.limit, cursor=wanted.cursor, match=wanted.search)


def page_fields(view: QueueView) -> dict[str, Any]:
    """Return what every queue page adds to its reply: how many queues, the next page."""
    return {"queue_count": view.listed, "next_cursor": view.next_cursor}
