"""The dashboard at /ui: server-rendered pages over the same engine calls as the API.

Pages (docs/DASHBOARD.md): overview, queues, workers, periodic schedules, jobs and one job,
the DLQ, login; a job found by id (the search box on every page).
Every asset ships in this package (templates/, static/): nothing is fetched from elsewhere.
"""

from __future__ import annotations

from flask import Flask

from gateway.context import Gateway
from gateway.ui import access, find, pages, security
from gateway.ui import dlq_pages as dlq
from gateway.ui import job_pages as jobs
from gateway.ui import schedule_pages as schedules
from gateway.ui.ui_base import bp

__all__ = ["access", "bp", "dlq", "find", "install", "jobs", "pages", "schedules"]


def install(app: Flask) -> None:
    """Give `app` the dashboard: its pages under /ui and the signed session they log in with."""
    gw: Gateway = app.extensions[Gateway.EXTENSION]
    security.install_sessions(app, gw.redis, gw.keys)
    app.register_blueprint(bp)
