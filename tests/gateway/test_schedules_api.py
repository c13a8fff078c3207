"""Periodic schedules through the HTTP API, under real gunicorn on the private Redis.

The schedules are published as a workerd host publishes its file (workerd.periodic.Periodic),
and the scheduler's pass is stepped by hand with a clock of the test's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
import redis

from gateway.openapi import document
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model import ticks
from shared.model.jobs import format_ms
from shared.model.schedules import parse_entry
from tests.support.gunicorn import Gunicorn
from workerd.periodic import Periodic

K = Keys()
NIGHTLY = parse_entry(
    "nightly-report",
    {
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "missed": "catch_up",
        "job": {"type": "generate_pdf", "payload": {"report": "daily"}, "queue": "reports"},
    },
)
BEAT = parse_entry("beat", {"every": "15m", "job": {"type": "demo.noop", "timeout": "30s"}})


@pytest.fixture
def periodic(r: redis.Redis) -> Periodic:
    """Return a scheduler pass over the two schedules, their definitions published."""
    periodic = Periodic(Scripts(r, K), [NIGHTLY, BEAT])
    periodic.publish()
    return periodic


def test_the_list_shows_each_schedule_with_its_next_five_runs(
    gw: Gunicorn, periodic: Periodic
) -> None:
    status, _, doc = gw.request("GET", "/schedules")
    assert status == 200
    assert [s["name"] for s in doc["schedules"]] == ["beat", "nightly-report"]
    beat, nightly = doc["schedules"]
    assert {k: nightly[k] for k in ("cron", "every", "timezone", "missed")} == {
        "cron": "0 3 * * *",
        "every": None,
        "timezone": "Europe/Berlin",
        "missed": "catch_up",
    }
    assert nightly["job"] == {
        "type": "generate_pdf",
        "payload": {"report": "daily"},
        "queue": "reports",
        "priority": 0,
        "max_retries": 3,
        "timeout": None,
    }
    assert (beat["every"], beat["cron"], beat["job"]["timeout"]) == ("15m", None, 30.0)
    assert (nightly["paused"], nightly["last_tick"], nightly["last_job_id"]) == (False, None, None)
    runs = [datetime.fromisoformat(run) for run in nightly["next_runs"]]
    assert len(runs) == 5 and runs == sorted(runs)
    assert all((run.hour, run.minute) == (3, 0) and run.utcoffset() is not None for run in runs)
    assert nightly["next_runs"][0].endswith(("+01:00", "+02:00"))  # Berlin's offset
    quarter = [datetime.fromisoformat(run) for run in beat["next_runs"]]
    assert all(run.minute % 15 == 0 and run.second == 0 for run in quarter)


def test_the_last_tick_and_its_job_show_once_a_scheduler_passed(
    gw: Gunicorn, periodic: Periodic
) -> None:
    now = 1_800_000_000_000
    periodic.step(now_ms=now)
    periodic.step(now_ms=now + 900_000)  # beat's next tick: one job
    status, _, doc = gw.request("GET", "/schedules/beat")
    tick = now + 900_000 - (now + 900_000) % 900_000
    assert status == 200
    assert doc["last_tick"] == doc["last_job_tick"] == format_ms(tick)
    assert doc["last_job_id"] == ticks.job_id("beat", tick)
    assert (doc["jobs"], doc["missed_ticks"]) == (1, 0)
    status, _, job = gw.request("GET", f"/jobs/{doc['last_job_id']}")
    assert status == 200 and job["type"] == "demo.noop" and job["timeout"] == 30.0
    status, _, history = gw.request("GET", f"/jobs/{doc['last_job_id']}/history")
    assert status == 200
    assert {k: history["history"][0][k] for k in ("event", "actor")} == {
        "event": "enqueued",
        "actor": "scheduler",
    }


def test_pause_and_resume_are_idempotent_and_404_for_an_unknown_name(
    gw: Gunicorn, periodic: Periodic
) -> None:
    status, _, doc = gw.request("POST", "/schedules/nightly-report/pause")
    assert status == 200 and doc["paused"] is True and doc["paused_since"]
    again = gw.request("POST", "/schedules/nightly-report/pause")
    assert again[0] == 200 and again[2]["paused_since"] == doc["paused_since"]
    status, _, doc = gw.request("POST", "/schedules/nightly-report/resume")
    assert status == 200 and (doc["paused"], doc["paused_since"]) == (False, None)
    assert gw.request("POST", "/schedules/nightly-report/resume")[0] == 200
    for method, path in (
        ("GET", "/schedules/nope"),
        ("POST", "/schedules/nope/pause"),
        ("POST", "/schedules/nope/resume"),
    ):
        status, _, error = gw.request(method, path)
        assert (status, error) == (404, {"error": "schedule not found"})
    status, _, error = gw.request("GET", "/schedules/a%20b")
    assert status == 400 and "bad schedule name" in error["error"]


def test_no_schedule_published_is_an_empty_list(gw: Gunicorn) -> None:
    assert gw.request("GET", "/schedules")[:3:2] == (200, {"schedules": []})


def test_the_document_describes_the_schedule_routes() -> None:
    doc: dict[str, Any] = document(False)
    assert {
        "/schedules",
        "/schedules/{name}",
        "/schedules/{name}/pause",
        "/schedules/{name}/resume",
    } <= set(doc["paths"])
    schema = doc["components"]["schemas"]["Schedule"]
    assert set(schema["required"]) == set(schema["properties"])
