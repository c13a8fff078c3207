"""Periodic schedules: list them with their next runs, pause one, resume one (docs/SCHEDULES.md).

The schedules are those the workerd hosts published from their TASKFORGE_SCHEDULES file; the
gateway only reads them, and pauses or resumes one (its state in Redis: a paused schedule's
ticks pass without jobs; a resumed one starts again at its next tick). Repeating a pause or a
resume changes nothing and answers 200 again; a name no host published is 404.
"""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint

from gateway import inputs
from gateway.actions import fleet_actions as actions
from gateway.context import gateway
from gateway.http_errors import ApiError
from gateway.routes import route
from shared.model.jobs import format_ms
from shared.model.schedules import NAME_PATTERN, NAME_RULE
from shared.read.schedule_state import ScheduleView, view_schedules

bp = Blueprint("schedules", __name__)


def schedule_json(view: ScheduleView) -> dict[str, Any]:
    """Return one schedule as GET /schedules lists it."""
    schedule, state, job = view.schedule, view.state, view.schedule.job
    return {
        "name": schedule.name,
        "cron": schedule.cron,
        "every": schedule.every_text,
        "timezone": schedule.timezone,
        "missed": schedule.missed,
        "job": {
            "type": job.type,
            "payload": json.loads(job.payload_json),
            "queue": job.queue,
            "priority": job.priority,
            "max_retries": job.max_retries,
            "timeout": job.timeout,
        },
        "paused": state.paused_ms is not None,
        "paused_since": format_ms(state.paused_ms),
        "last_tick": format_ms(state.last_ms),
        "last_job_id": state.job_id,
        "last_job_tick": format_ms(state.job_tick_ms),
        "jobs": state.jobs,
        "missed_ticks": state.missed,
        "next_runs": [moment.isoformat() for moment in view.next_runs],
    }


def schedule_name(raw: str) -> str:
    """Return a schedule name from the path; refuse one that breaks the rule with 400."""
    if not NAME_PATTERN.fullmatch(raw):
        raise ApiError(400, f"bad schedule name {raw[:64]!r}: a schedule name is {NAME_RULE}")
    return raw


def _one(name: str) -> dict[str, Any]:
    gw = gateway()
    views = view_schedules(gw.redis, gw.keys, name=name)
    if not views:
        raise ApiError(404, "schedule not found")
    return schedule_json(views[0])


@route(bp, "GET", "/schedules")
def list_schedules() -> dict[str, Any]:
    """Return every published schedule: definition, paused, last tick and job, next runs."""
    gw = gateway()
    return {"schedules": [schedule_json(view) for view in view_schedules(gw.redis, gw.keys)]}


@route(bp, "GET", "/schedules/<name>")
def get_schedule(name: str) -> dict[str, Any]:
    """Return one schedule."""
    return _one(schedule_name(name))


@route(bp, "POST", "/schedules/<name>/pause")
def pause(name: str) -> dict[str, Any]:
    """Pause a schedule: its ticks pass without jobs until it is resumed."""
    name = schedule_name(name)
    actions.pause_schedule(gateway(), name, by=inputs.asked_by())
    return _one(name)


@route(bp, "POST", "/schedules/<name>/resume")
def resume(name: str) -> dict[str, Any]:
    """Resume a paused schedule from its next tick (the ticks it was paused for never run)."""
    name = schedule_name(name)
    actions.resume_schedule(gateway(), name, by=inputs.asked_by())
    return _one(name)
