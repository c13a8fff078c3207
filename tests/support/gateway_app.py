"""A gateway app for tests that talk to a private redis-server in-process.

The app's fleet view (gateway.fleet_view) starts a daemon thread at the first enqueue that
reads the registry every 2 s for as long as the test process lives. In a test process shared
with others (xdist), that thread of a finished test went on sending ZRANGE and HMGET to the
same private server and landed in another test's command count (test_budgets saw a stray
ZRANGE in CI). Tests that do not read the view get an app whose view is stopped.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from gateway import create_app
from gateway.context import Gateway
from shared.settings.config import Settings


def app_without_fleet_thread(settings: Settings, **kwargs: Any) -> Flask:
    """Return create_app(settings, **kwargs) with its fleet view stopped (no warnings, no
    registry reads in a thread)."""
    app = create_app(settings, **kwargs)
    app.extensions[Gateway.EXTENSION].fleet.stop()
    return app
