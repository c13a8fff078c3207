"""The HTTP gateway: a Flask app (``create_app()``) served by gunicorn (``deploy/``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    """Import the app only when asked for (PEP 562).

    gunicorn's master imports ``gateway.server`` for its logger before
    PROMETHEUS_MULTIPROC_DIR is ready for use, and must not pull Flask and prometheus_client in
    with it; workers load ``create_app`` after the fork.
    """
    if name == "create_app":
        from gateway.app import create_app

        return create_app
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
