"""The periodic schedules' part of the OpenAPI document (gateway/schedules_api.py's routes).

Kept apart from gateway/openapi.py, which merges it in: the path parameter, the
404 and the four operations of ``/schedules``.
"""

from __future__ import annotations

from typing import Any

from shared.model.schedules import NAME_PATTERN
from shared.read.schedule_state import NEXT_RUNS

TIMESTAMP_OR_NULL = {"type": ["string", "null"], "format": "date-time"}
COUNT = {"type": "integer", "minimum": 0}
SCHEDULE_EXAMPLE = "nightly-report"  # the path parameter's example


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _object(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


def parameters() -> dict[str, Any]:
    """Return the ScheduleName path parameter."""
    return {
        "ScheduleName": {
            "name": "name",
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": f"^{NAME_PATTERN.pattern}$"},
            "example": SCHEDULE_EXAMPLE,
        }
    }


def responses(error: dict[str, Any]) -> dict[str, Any]:
    """Return the ScheduleNotFound response (`error`: the Error schema's response shape)."""
    return {
        "ScheduleNotFound": {
            **error,
            "description": 'No published schedule has that name: {"error": "schedule not found"}.',
        }
    }


def paths(auth_errors: dict[str, Any]) -> dict[str, Any]:
    """Return the /schedules operations; `auth_errors` maps 400/401/503 to their responses."""
    one = {
        "200": {
            "description": "The schedule as it is now.",
            "content": {"application/json": {"schema": _ref("schemas", "Schedule")}},
        },
        **auth_errors,
        "404": _ref("responses", "ScheduleNotFound"),
    }
    name = [_ref("parameters", "ScheduleName")]

    def operation(op_id: str, summary: str) -> dict[str, Any]:
        return {"operationId": op_id, "summary": summary, "parameters": name, "responses": one}

    listed = {key: value for key, value in auth_errors.items() if key != "400"}
    return {
        "/schedules": {
            "get": {
                "operationId": "listSchedules",
                "summary": "Every periodic schedule workerd published: definition, paused, "
                f"last tick and its job, the next {NEXT_RUNS} runs.",
                "responses": {
                    "200": {
                        "description": "Every schedule, by name.",
                        "content": {"application/json": {"schema": _ref("schemas", "Schedules")}},
                    },
                    **listed,
                },
            }
        },
        "/schedules/{name}": {"get": operation("getSchedule", "One periodic schedule.")},
        "/schedules/{name}/pause": {
            "post": operation(
                "pauseSchedule", "Pause a schedule: its ticks pass without jobs until resumed."
            )
        },
        "/schedules/{name}/resume": {
            "post": operation(
                "resumeSchedule", "Resume a schedule at its next tick (no catch-up of the pause)."
            )
        },
    }
