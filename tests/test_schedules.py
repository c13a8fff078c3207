"""Periodic schedules without Redis: the file's validation and the tick arithmetic (shared.model.ticks).

Clocks are injected (epoch ms); the DST cases use Europe/Berlin's 2026 changes (29 March,
02:00 -> 03:00; 25 October, 03:00 -> 02:00) and America/New_York's.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from shared.model import ticks
from shared.model.jobs import JOB_ID_PATTERN
from shared.model.schedules import Schedule, ScheduleError, from_json, load_file, parse_entry

BERLIN = ZoneInfo("Europe/Berlin")
JOB = {"type": "generate_pdf"}


def schedule(name: str = "s", **entry: Any) -> Schedule:
    """Return a validated schedule (job defaults to a generate_pdf with nothing else)."""
    return parse_entry(name, {"job": JOB, **entry})


def at(text: str, zone: str = "UTC") -> int:
    """Return epoch ms of a wall-clock time in `zone` (the first one, in a repeated hour)."""
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000)


def wall(ms: int, zone: ZoneInfo = BERLIN) -> str:
    return datetime.fromtimestamp(ms / 1000, zone).isoformat()


def ticks_between(s: Schedule, start: int, end: int) -> list[int]:
    out = []
    for tick in ticks.ticks_after(s, start):
        if tick > end:
            return out
        out.append(tick)
    return out


# --- the file ------------------------------------------------------------------------------


def test_a_full_file_parses_with_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(
        """
[schedules.nightly-report]
cron = "0 3 * * *"
timezone = "Europe/Berlin"
missed = "catch_up"

[schedules.nightly-report.job]  # TOML 1.0: an inline table must fit on one line
type = "generate_pdf"
payload = { report = "daily" }
queue = "reports"
priority = 5
max_retries = 2
timeout = "1m"

[schedules.heartbeat]
every = "15m"
job = { type = "demo.noop" }
"""
    )
    nightly, beat = load_file(str(path))
    assert (nightly.cron, nightly.timezone, nightly.missed) == (
        "0 3 * * *",
        "Europe/Berlin",
        "catch_up",
    )
    assert (nightly.job.queue, nightly.job.priority, nightly.job.max_retries) == ("reports", 5, 2)
    assert (nightly.job.timeout, nightly.job.payload_json) == (60.0, '{"report":"daily"}')
    assert (beat.every_ms, beat.timezone, beat.missed, beat.job.queue) == (
        900_000,
        "UTC",
        "skip",
        "default",
    )
    assert from_json_round_trip(nightly) == nightly


def from_json_round_trip(s: Schedule) -> Schedule:
    import json

    return from_json(json.dumps(s.to_json()))


@pytest.mark.parametrize(
    ("name", "entry", "message"),
    [
        ("a b", {"every": "1s", "job": JOB}, 'schedule "a b": bad name: must be 1-64'),
        ("n", {"cron": "0 3 * *", "job": JOB}, 'schedule "n": bad cron expression "0 3 * *": '),
        ("n", {"cron": "61 * * * *", "job": JOB}, 'schedule "n": bad cron expression "61 * * * *"'),
        ("n", {"cron": "0 0 30 2 *", "job": JOB}, 'schedule "n": bad cron expression "0 0 30 2 *"'),
        ("n", {"job": JOB}, 'schedule "n": give exactly one of cron and every'),
        ("n", {"cron": "* * * * *", "every": "1s", "job": JOB}, "exactly one of cron and every"),
        ("n", {"every": "500ms", "job": JOB}, 'schedule "n": interval "500ms" must be from 1s'),
        ("n", {"every": "soon", "job": JOB}, 'schedule "n": bad interval "soon"'),
        (
            "n",
            {"cron": "0 3 * * *", "timezone": "Mars/Olympus", "job": JOB},
            'unknown time zone "Mars/Olympus"',
        ),
        (
            "n",
            {"every": "1m", "timezone": "UTC", "job": JOB},
            "timezone applies to cron schedules only",
        ),
        (
            "n",
            {"every": "1m", "missed": "all", "job": JOB},
            'missed must be skip or catch_up, not "all"',
        ),
        ("n", {"every": "1m"}, 'schedule "n": job must be a table'),
        ("n", {"every": "1m", "job": {"type": "x y"}}, 'schedule "n": job.type: must be 1-128'),
        (
            "n",
            {"every": "1m", "job": {"type": "t", "priority": 2**40}},
            "job.priority: must be an integer",
        ),
        ("n", {"every": "1m", "job": {"type": "t", "delay": 5}}, "job.delay: unknown field"),
        ("n", {"every": "1m", "job": {"type": "t", "queue": "a:b"}}, "job.queue: "),
        ("n", {"every": "1m", "job": JOB, "when": 1}, "unknown field 'when'"),
    ],
)
def test_a_bad_entry_is_refused_in_one_line_naming_the_schedule(
    name: str, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_entry(name, entry)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f'schedule "{name}": ')
    assert "\n" not in str(caught.value)


def test_a_file_that_is_not_toml_or_not_there_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[schedules.x\n")
    with pytest.raises(ScheduleError, match="is not valid TOML"):
        load_file(str(bad))
    with pytest.raises(ScheduleError, match="cannot read"):
        load_file(str(tmp_path / "missing.toml"))
    stray = tmp_path / "stray.toml"
    stray.write_text('[jobs.x]\nevery = "1s"\n')
    with pytest.raises(ScheduleError, match="unknown top-level key 'jobs'"):
        load_file(str(stray))


# --- ticks ---------------------------------------------------------------------------------


def test_interval_ticks_are_multiples_of_the_interval_since_the_epoch() -> None:
    s = schedule(every="15m")
    now = at("2026-05-01T10:07:31")
    assert ticks.latest_at_or_before(s, now) == at("2026-05-01T10:00")
    assert ticks.next_after(s, now) == at("2026-05-01T10:15")
    assert ticks.next_after(s, at("2026-05-01T10:15")) == at("2026-05-01T10:30")  # strictly after
    assert ticks.latest_at_or_before(s, at("2026-05-01T10:15")) == at("2026-05-01T10:15")


def test_cron_ticks_follow_the_schedules_zone() -> None:
    s = schedule(cron="0 3 * * *", timezone="Europe/Berlin")
    winter = ticks.next_after(s, at("2026-01-10T12:00"))
    summer = ticks.next_after(s, at("2026-07-10T12:00"))
    assert wall(winter) == "2026-01-11T03:00:00+01:00"  # 02:00 UTC
    assert wall(summer) == "2026-07-11T03:00:00+02:00"  # 01:00 UTC
    assert ticks.latest_at_or_before(s, at("2026-07-11T01:00")) == summer  # at the tick itself
    assert ticks.latest_at_or_before(s, at("2026-07-11T00:59:59")) == at("2026-07-10T01:00")


def test_the_job_id_is_a_v4_shaped_uuid_fixed_by_schedule_and_tick() -> None:
    a = ticks.job_id("nightly", 1_000)
    assert JOB_ID_PATTERN.fullmatch(a)
    assert a == ticks.job_id("nightly", 1_000)
    assert len({a, ticks.job_id("nightly", 2_000), ticks.job_id("nightly2", 1_000)}) == 3


def test_nothing_is_due_before_the_next_tick_nor_when_the_clock_went_back() -> None:
    s = schedule(every="1m")
    last = at("2026-05-01T10:00")
    assert ticks.plan(s, last, last + 59_999) is None
    assert ticks.plan(s, last, last - 3_600_000) is None  # backwards: ticks <= last never again


def test_a_tick_on_time_gets_its_job_and_so_does_one_a_pass_came_late_for() -> None:
    s = schedule(every="1s")
    last = 1_000_000
    assert ticks.plan(s, last, last + 1_020) == ticks.Plan(last + 1_000, (last + 1_000,), 0)
    # A pass 2.3 s late (a slow Redis, a paused process): both ticks still within the grace.
    late = ticks.plan(s, last, last + 2_300)
    assert late == ticks.Plan(last + 2_000, (last + 1_000, last + 2_000), 0)


def test_skip_drops_the_ticks_of_an_outage_and_runs_the_latest_only_if_on_time() -> None:
    hourly = schedule(cron="0 * * * *")
    last = at("2026-05-01T02:00")
    # Back at 05:10: 03:00, 04:00 and 05:00 are due, the latest 10 minutes old (grace 60 s).
    assert ticks.plan(hourly, last, at("2026-05-01T05:10")) == ticks.Plan(
        at("2026-05-01T05:00"), (), 3
    )
    # Back at 05:00:30: the 05:00 tick is on time and runs; 03:00 and 04:00 are dropped.
    back = ticks.plan(hourly, last, at("2026-05-01T05:00:30"))
    assert back == ticks.Plan(at("2026-05-01T05:00"), (at("2026-05-01T05:00"),), 2)
    # A fast interval after an hour away: the ticks of the last 5 s (the grace floor) run.
    fast = schedule(every="1s")
    plan = ticks.plan(fast, 0, 3_600_000)
    assert plan is not None
    assert plan.jobs == tuple(range(3_595_000, 3_600_001, 1_000)) and plan.missed == 3_594


def test_catch_up_runs_one_job_for_the_latest_tick_whatever_its_age() -> None:
    hourly = schedule(cron="0 * * * *", missed="catch_up")
    last = at("2026-05-01T02:00")
    plan = ticks.plan(hourly, last, at("2026-05-03T05:10"))  # two days away: 51 ticks due
    assert plan == ticks.Plan(at("2026-05-03T05:00"), (at("2026-05-03T05:00"),), 50)


def test_a_week_of_per_second_cron_ticks_is_counted_up_to_the_cap() -> None:
    s = schedule(cron="* * * * * *", missed="catch_up")  # six fields: every second
    now = 7 * 86_400_000
    plan = ticks.plan(s, 0, now)
    assert plan is not None
    assert plan.tick_ms == now and plan.jobs == tuple(range(now - 5_000, now + 1, 1_000))
    assert plan.missed == ticks.COUNT_CAP


# --- daylight-saving time ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "spring", "fall", "repeated"),
    [
        ("Europe/Berlin", "2026-03-29", "2026-10-25", "30 2 * * *"),  # 03:00 -> 02:00
        ("America/New_York", "2026-03-08", "2026-11-01", "30 1 * * *"),  # 02:00 -> 01:00
    ],
)
def test_a_fixed_time_in_the_skipped_and_the_repeated_hour_runs_once_a_day(
    zone: str, spring: str, fall: str, repeated: str
) -> None:
    tz, day = ZoneInfo(zone), 86_400_000
    # Spring forward (02:00 -> 03:00 in both zones): 02:30 does not exist that night; cronsim,
    # like Debian's cron, runs it at the first minute that does, 03:00; the days around keep 02:30.
    s = schedule(cron="30 2 * * *", timezone=zone)
    midnight = at(f"{spring}T00:00", zone)
    days = [wall(t, tz)[11:19] for t in ticks_between(s, midnight - day, midnight + 2 * day)]
    assert days == ["02:30:00", "03:00:00", "02:30:00"]
    # Fall back: the time happens twice that night; it runs once, at the first (summer time).
    s = schedule(cron=repeated, timezone=zone)
    fall_ticks = ticks_between(s, at(f"{fall}T00:00", zone), at(f"{fall}T23:00", zone))
    assert len(fall_ticks) == 1
    assert datetime.fromtimestamp(fall_ticks[0] / 1000, tz).dst()  # the first one


def test_an_hourly_schedule_follows_real_hours_across_both_changes() -> None:
    s = schedule(cron="0 * * * *", timezone="Europe/Berlin")
    spring = ticks_between(
        s, at("2026-03-29T00:30", "Europe/Berlin"), at("2026-03-29T04:30", "Europe/Berlin")
    )
    assert [wall(t) for t in spring] == [
        "2026-03-29T01:00:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:00 does not exist: one real hour after 01:00
        "2026-03-29T04:00:00+02:00",
    ]
    fall = ticks_between(
        s,
        at("2026-10-25T00:30", "Europe/Berlin"),
        at("2026-10-25T03:30", "Europe/Berlin"),
    )
    assert [wall(t) for t in fall] == [
        "2026-10-25T01:00:00+02:00",
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",  # the repeated hour is a real hour: it runs, once
        "2026-10-25T03:00:00+01:00",
    ]
    assert all(b - a == 3_600_000 for a, b in itertools.pairwise(fall))
    # A scheduler that starts inside the repeated hour does not run its first 02:00 again.
    inside = at("2026-10-25T02:10", "Europe/Berlin") + 3_600_000  # 02:10+01:00
    assert wall(ticks.next_after(s, inside)) == "2026-10-25T03:00:00+01:00"
    daily = schedule(cron="30 2 * * *", timezone="Europe/Berlin")
    assert wall(ticks.next_after(daily, inside)) == "2026-10-26T02:30:00+01:00"


def test_next_runs_are_aware_datetimes_in_the_schedules_zone() -> None:
    s = schedule(cron="0 3 * * *", timezone="Europe/Berlin")
    runs = ticks.next_runs(s, at("2026-10-23T12:00"), 3)
    assert [r.isoformat() for r in runs] == [
        "2026-10-24T03:00:00+02:00",
        "2026-10-25T03:00:00+01:00",
        "2026-10-26T03:00:00+01:00",
    ]


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("doc", ["README.md", "docs/SCHEDULES.md"])
def test_the_documented_files_are_valid(doc: str) -> None:
    import re
    import tomllib

    from shared.model.schedules import parse_document

    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / doc).read_text(), re.S)
    assert blocks, doc
    for block in blocks:
        assert parse_document(tomllib.loads(block))
    assert len(load_file(str(ROOT / "deploy/schedules.example.toml"))) == 2


@pytest.mark.parametrize(
    ("every", "shown"),
    [
        ("15m", "15m"),
        ("900s", "15m"),
        ("90s", "90s"),
        ("7200s", "2h"),
        ("36h", "36h"),
        ("1d", "1d"),
        ("1500ms", "1500ms"),
    ],
)
def test_an_interval_is_shown_in_the_largest_exact_unit_and_reads_back(
    every: str, shown: str
) -> None:
    schedule = parse_entry("n", {"every": every, "job": JOB})
    assert schedule.every_text == shown
    assert from_json_round_trip(schedule) == schedule
