"""How every gateway route is declared: one method, its query parameters, no automatic OPTIONS.

HEAD and OPTIONS, decided: HEAD is answered wherever GET is (Flask adds it; HTTP requires it
of every GET resource and ``curl -I`` uses it). OPTIONS is not: the API serves no browsers
and no CORS, so an automatic ``200 Allow: ...`` would only let a preflight look as if it had
worked. OPTIONS therefore gets the JSON 405 with ``Allow`` like any other unsupported method.

Query parameters, decided: a route names the ones it reads and refuses any other with 400.
A misspelt or imagined filter (``GET /dlq?type=x``) silently ignored looks as if it had
worked, and the client acts on an answer to a question it did not ask.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flask import Blueprint

from gateway.inputs import refuse_unknown_query

View = Callable[..., Any]


def route(
    bp: Blueprint, method: str, rule: str, *, query: tuple[str, ...] = ()
) -> Callable[[View], View]:
    """Register a view for one method on `rule` (GET also answers HEAD) taking `query` only."""
    allowed = frozenset(query)

    def register(view: View) -> View:
        @functools.wraps(view)
        def checked(*args: Any, **kwargs: Any) -> Any:
            refuse_unknown_query(allowed)
            return view(*args, **kwargs)

        checked.query = allowed  # type: ignore[attr-defined]  # tests compare it with the document
        bp.add_url_rule(rule, view_func=checked, methods=[method], provide_automatic_options=False)
        return view

    return register
