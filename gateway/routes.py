"""How every gateway route is declared: one method, no automatic OPTIONS.

HEAD and OPTIONS, decided: HEAD is answered wherever GET is (Flask adds it; HTTP requires it
of every GET resource and ``curl -I`` uses it). OPTIONS is not: the API serves no browsers
and no CORS, so an automatic ``200 Allow: ...`` would only let a preflight look as if it had
worked. OPTIONS therefore gets the JSON 405 with ``Allow`` like any other unsupported method.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint

View = Callable[..., Any]


def route(bp: Blueprint, method: str, rule: str) -> Callable[[View], View]:
    """Register a view for one method on `rule` (GET also answers HEAD)."""
    return bp.route(rule, methods=[method], provide_automatic_options=False)
