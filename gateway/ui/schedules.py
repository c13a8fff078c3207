"""The periodic schedules page: each schedule, its next runs, and its pause and resume."""

from __future__ import annotations

import logging

from flask import flash, redirect, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.context import gateway
from gateway.ui.base import UiError, bp, events_url, render
from shared.engine_types import ScheduleNotFound
from shared.schedule_state import view_schedules
from shared.schedules import NAME_PATTERN, NAME_RULE

log = logging.getLogger(__name__)


# A tick's job is an `enqueued` event in its queue's stream: the page refreshes on those (a
# pause or a resume is a page of its own, redirected back to).
SCHEDULE_EVENTS = "enqueued gap"


@bp.route("/schedules")
def schedules() -> tuple[str, int]:
    """Show every periodic schedule: when it ticks, its last tick and job, the next runs."""
    gw = gateway()
    return render(
        "schedules.html",
        "schedules",
        live_events=events_url(),
        live_refresh=url_for("ui.schedules_live"),
        live_on=SCHEDULE_EVENTS,
        views=view_schedules(gw.redis, gw.keys),
    )


@bp.route("/live/schedules")
def schedules_live() -> tuple[str, int]:
    """Return the schedules table alone, for live.js to swap in."""
    gw = gateway()
    return render("_schedules_live.html", "schedules", views=view_schedules(gw.redis, gw.keys))


def _name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise UiError(400, f"bad schedule name {name[:64]!r}: a schedule name is {NAME_RULE}")
    return name


def _set_paused(name: str, paused: bool) -> BaseResponse:
    name = _name(name)
    scripts = gateway().scripts
    try:
        changed = scripts.pause_schedule(name).changed if paused else scripts.resume_schedule(name)
    except ScheduleNotFound:
        raise UiError(404, "No workerd host published a schedule of that name.") from None
    log.info(
        "schedule_paused" if paused else "schedule_resumed",
        extra={"schedule": name, "changed": changed},
    )
    if paused:
        flash(f"Schedule {name} paused: its ticks pass without jobs until it is resumed.")
    else:
        flash(
            f"Schedule {name} resumed from its next tick."
            if changed
            else f"Schedule {name} was not paused."
        )
    return redirect(url_for("ui.schedules"), code=303)


@bp.route("/schedules/<name>/pause", methods=["POST"])
def pause_schedule(name: str) -> BaseResponse:
    """Pause a schedule (as POST /schedules/<name>/pause does) and go back to the list."""
    return _set_paused(name, True)


@bp.route("/schedules/<name>/resume", methods=["POST"])
def resume_schedule(name: str) -> BaseResponse:
    """Resume a schedule at its next tick and go back to the list."""
    return _set_paused(name, False)
