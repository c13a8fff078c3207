"""``taskforge schedules ls|pause|resume`` against the real gateway on a real Redis."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from gateway.ui.schedule_pages import zoned_text as dashboard_zoned_text
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.schedules import parse_entry
from taskforge.cli import Exit, render
from taskforge.cli.schedule_commands import in_its_zone
from tests.cli.conftest import Taskforge
from workerd.periodic import Periodic

NIGHTLY = {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"type": "pdf"}}
BEAT = {"every": "15m", "missed": "catch_up", "job": {"type": "demo.noop", "queue": "low"}}


def publish(r: redis.Redis, **schedules: dict[str, Any]) -> None:
    """Publish schedules as a workerd host does from its file."""
    found = [parse_entry(name, entry) for name, entry in schedules.items()]
    Periodic(Scripts(r, Keys()), found).publish()


def test_schedules_ls_shows_each_with_its_next_run(taskforge: Taskforge, r: redis.Redis) -> None:
    assert "no periodic schedules" in taskforge("schedules", "ls").out
    publish(r, nightly=NIGHTLY, beat=BEAT)
    listed = taskforge("schedules", "ls")
    assert listed.code == Exit.OK, listed.err
    header, *rows = listed.out.splitlines()
    assert header.split()[:6] == ["NAME", "WHEN", "ZONE", "ON", "MISS", "MISSED"]
    beat = next(row for row in rows if row.startswith("beat"))
    # ON MISS is the policy, MISSED the count of ticks that got no job (none yet).
    assert re.search(r"\bcatch_up +0 +active\b", beat), beat
    nightly = next(row for row in rows if row.startswith("nightly"))
    assert "every 15m" in beat and "catch_up" in beat and "demo.noop on low" in beat
    assert re.match(r"beat +every 15m +UTC +catch_up\b", beat), beat  # ZONE: its ticks' zone
    assert "cron 0 3 * * *" in nightly and "Europe/Berlin" in nightly and "active" in nightly
    # The next run, in Berlin's time and named so (never the UTC 02:00 or 01:00).
    assert re.search(r" \d{4}-\d\d-\d\d 03:00:00 Europe/Berlin *$", nightly), nightly
    doc = json.loads(taskforge("--json", "schedules", "ls").out)
    assert [s["name"] for s in doc["schedules"]] == ["beat", "nightly"]


def test_schedules_pause_and_resume_print_the_state_and_next_runs(
    taskforge: Taskforge, r: redis.Redis
) -> None:
    publish(r, nightly=NIGHTLY)
    paused = taskforge("schedules", "pause", "nightly")
    assert paused.code == Exit.OK
    assert paused.out.strip() == "nightly paused: its ticks pass without jobs until it is resumed"
    row = taskforge("schedules", "ls").out.splitlines()[1]
    assert "paused" in row and row.rstrip().endswith("(paused)")  # no next run while paused
    resumed = taskforge("schedules", "resume", "nightly")
    assert resumed.out.startswith("nightly active; next runs:")
    assert len(resumed.out.splitlines()) == 6
    doc = json.loads(taskforge("--json", "schedules", "resume", "nightly").out)
    assert doc["paused"] is False and len(doc["next_runs"]) == 5
    missing = taskforge("schedules", "pause", "nope")
    assert missing.code == Exit.API_ERROR
    assert missing.error_line() == "taskforge: error: schedule not found (HTTP 404)"


def test_last_tick_and_next_run_are_in_the_schedules_zone_and_name_it(
    taskforge: Taskforge, r: redis.Redis
) -> None:
    publish(r, nightly=NIGHTLY)
    tick = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)  # 03:00 in Berlin (winter: UTC+1)
    assert Scripts(r, Keys()).advance_schedule("nightly", int(tick.timestamp() * 1000), None)
    row = next(row for row in taskforge("schedules", "ls").out.splitlines() if "nightly" in row)
    shown = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+", row)
    assert shown[0] == "2026-12-02 03:00:00 Europe/Berlin", row  # the last tick
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00:00 Europe/Berlin", shown[1]), row  # next run
    resumed = taskforge("schedules", "resume", "nightly").out.splitlines()[1:]
    assert len(resumed) == 5
    assert all(re.fullmatch(r"  \d{4}-\d\d-\d\d 03:00:00 Europe/Berlin", run) for run in resumed)


BERLIN = SimpleNamespace(timezone="Europe/Berlin")
# Moments and how a schedule in Berlin shows them; in the hour the fall-back repeats
# (25 October 2026, 02:00-03:00), the wall-clock time is followed by its offset.
SHOWN_IN_BERLIN = [
    (datetime(2026, 12, 2, 2, 0, tzinfo=UTC), "2026-12-02 03:00:00 Europe/Berlin"),
    (datetime(2026, 7, 1, 22, 30, 15, 999_000, tzinfo=UTC), "2026-07-02 00:30:15 Europe/Berlin"),
    (datetime(2026, 10, 25, 0, 30, tzinfo=UTC), "2026-10-25 02:30:00 Europe/Berlin UTC+02:00"),
    (datetime(2026, 10, 25, 1, 30, tzinfo=UTC), "2026-10-25 02:30:00 Europe/Berlin UTC+01:00"),
    (datetime(2026, 10, 25, 2, 30, tzinfo=UTC), "2026-10-25 03:30:00 Europe/Berlin"),
]


@pytest.mark.parametrize(("moment", "shown"), SHOWN_IN_BERLIN)
def test_a_time_is_shown_in_the_schedules_zone_as_the_dashboard_shows_it(
    moment: datetime, shown: str
) -> None:
    assert in_its_zone(BERLIN, moment) == shown
    assert dashboard_zoned_text(moment, "Europe/Berlin") == shown  # one rule, both surfaces


def test_an_interval_schedules_times_are_named_utc_and_a_missing_one_is_a_dash() -> None:
    tick = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    assert in_its_zone(SimpleNamespace(timezone="UTC"), tick) == "2026-12-02 02:00:00 UTC"
    assert in_its_zone(BERLIN, None) == render.NONE  # no tick yet
