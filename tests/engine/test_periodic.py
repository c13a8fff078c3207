"""Periodic schedules on a real Redis: the scripts (advance, pause, resume, publish) and the
scheduler's pass (workerd.periodic.Periodic) stepped by hand with an injected clock."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import redis

from shared.engine.engine_types import ScheduleNotFound
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model import ticks
from shared.model.schedules import Schedule, parse_entry
from shared.read.schedule_state import published, read_states
from tests.engine.conftest import K
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.tools import commands_caused
from workerd.periodic import Periodic

MIN = 60_000
T = 1_800_000_000_000  # a whole hour and minute, ms


def schedule(name: str = "s", **entry: Any) -> Schedule:
    return parse_entry(name, {"job": {"type": "report", "queue": "q"}, **entry})


def state(scripts: Scripts, name: str = "s") -> Any:
    return read_states(scripts.redis, K, [name])[1][0]


def jobs_of(r: redis.Redis, queue: str = "q") -> list[str]:
    """Return the ids of the jobs in a queue's pending index, oldest first."""
    members = r.zrange(K.for_queue(queue).pending_since, 0, -1)
    return [m.decode() for m in members]


def enqueued_events(r: redis.Redis, queue: str = "q") -> list[str]:
    entries = r.xrange(K.for_queue(queue).events)
    return [f[b"j"].decode() for _, f in entries if f.get(b"e") == b"enqueued"]


def test_advance_is_an_atomic_max_that_counts_once(scripts: Scripts, r: redis.Redis) -> None:
    assert scripts.advance_schedule("s", T, None) is True
    assert scripts.advance_schedule("s", T + MIN, "j1", missed=2, jobs=1) is True
    # A second scheduler with the same pass, and one with a clock behind: nothing changes.
    assert scripts.advance_schedule("s", T + MIN, "j1", missed=2, jobs=1) is False
    assert scripts.advance_schedule("s", T, "j0", missed=5, jobs=1) is False
    st = state(scripts)
    assert (st.last_ms, st.job_id, st.job_tick_ms, st.jobs, st.missed) == (
        T + MIN,
        "j1",
        T + MIN,
        1,
        2,
    )
    assert r.keys("*") == [K.schedule("s").encode()]


def test_pause_and_resume_need_a_published_schedule_and_are_idempotent(scripts: Scripts) -> None:
    with pytest.raises(ScheduleNotFound):
        scripts.pause_schedule("s")
    with pytest.raises(ScheduleNotFound):
        scripts.resume_schedule("s")
    assert scripts.publish_schedules([("s", '{"name": "s"}')]) == 1
    first = scripts.pause_schedule("s", now_ms=T)
    again = scripts.pause_schedule("s", now_ms=T + 5)
    assert (first.since_ms, first.changed, again.since_ms, again.changed) == (T, True, T, False)
    assert scripts.resume_schedule("s", now_ms=T + 9) is True
    assert scripts.resume_schedule("s", now_ms=T + 10) is False
    st = state(scripts)
    assert (st.paused_ms, st.resumed_ms) == (None, T + 9)


def test_publish_replaces_the_definitions_whole(scripts: Scripts, r: redis.Redis) -> None:
    a, b = schedule("a", every="1m"), schedule("b", cron="0 3 * * *", timezone="Europe/Berlin")
    Periodic(scripts, [a, b]).publish()
    assert set(published(r, K)) == {"a", "b"}
    assert published(r, K)["b"] == b
    Periodic(scripts, [a]).publish()
    assert list(published(r, K)) == ["a"]


def test_first_sight_sets_the_latest_tick_and_enqueues_nothing(
    scripts: Scripts, r: redis.Redis
) -> None:
    periodic = Periodic(scripts, [schedule(every="1m")])
    periodic.step(now_ms=T + 30_000)
    assert state(scripts).last_ms == T
    assert jobs_of(r) == []
    periodic.step(now_ms=T + 59_000)
    assert jobs_of(r) == []


def test_each_tick_gets_one_job_with_its_id_however_many_schedulers_pass(
    scripts: Scripts, r: redis.Redis
) -> None:
    s = schedule(every="1m")
    schedulers = [Periodic(scripts, [s]) for _ in range(3)]
    schedulers[0].step(now_ms=T)
    for now in (T + MIN, T + MIN + 400, T + 2 * MIN + 10):
        for periodic in schedulers:
            periodic.step(now_ms=now)
    expected = [ticks.job_id("s", T + MIN, "q"), ticks.job_id("s", T + 2 * MIN, "q")]
    assert jobs_of(r) == expected
    assert enqueued_events(r) == expected
    st = state(scripts)
    assert (st.last_ms, st.job_id, st.jobs, st.missed) == (T + 2 * MIN, expected[1], 2, 0)
    assert b"q" in r.smembers(K.queues)


def test_a_scheduler_killed_between_enqueue_and_advance_leaves_the_tick_to_the_next(
    scripts: Scripts, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = schedule(every="1m")
    Periodic(scripts, [s]).step(now_ms=T)
    dying = Periodic(scripts, [s])

    def killed(*args: Any, **kwargs: Any) -> bool:
        raise redis.ConnectionError("killed before the advance")

    monkeypatch.setattr(dying.scripts, "advance_schedule", killed)
    with pytest.raises(redis.ConnectionError):
        dying.step(now_ms=T + MIN)
    monkeypatch.undo()
    assert state(scripts).last_ms == T  # the tick is still due
    Periodic(scripts, [s]).step(now_ms=T + MIN + 900)
    assert jobs_of(r) == enqueued_events(r) == [ticks.job_id("s", T + MIN, "q")]
    assert state(scripts).last_ms == T + MIN


@pytest.mark.parametrize(("missed", "jobs"), [("skip", 0), ("catch_up", 1)])
def test_after_an_outage_skip_runs_nothing_late_and_catch_up_runs_one(
    scripts: Scripts, r: redis.Redis, missed: str, jobs: int, caplog: pytest.LogCaptureFixture
) -> None:
    s = schedule(every="1h", missed=missed)
    hour = 3_600_000
    start = T - T % hour
    Periodic(scripts, [s]).step(now_ms=start)
    with caplog.at_level(logging.WARNING):
        Periodic(scripts, [s]).step(now_ms=start + 5 * hour + 10 * MIN)  # 5 ticks due, all late
    assert jobs_of(r) == [ticks.job_id("s", start + 5 * hour, "q")][:jobs]
    st = state(scripts)
    assert (st.last_ms, st.missed, st.jobs) == (start + 5 * hour, 5 - jobs, jobs)
    [line] = [rec for rec in caplog.records if rec.message == "schedule_missed"]
    assert (line.schedule, line.missed, line.policy) == ("s", 5 - jobs, missed)


def test_a_paused_schedule_passes_its_ticks_and_resumes_at_the_next_one(
    scripts: Scripts, r: redis.Redis
) -> None:
    s = schedule(every="1m", missed="catch_up")
    periodic = Periodic(scripts, [s])
    periodic.step(now_ms=T)
    scripts.pause_schedule("s", now_ms=T + 1)
    periodic.step(now_ms=T + MIN + 5)
    assert jobs_of(r) == [] and state(scripts).last_ms == T + MIN
    # Paused across ticks nobody saw (no scheduler ran), then resumed: none is caught up.
    scripts.resume_schedule("s", now_ms=T + 10 * MIN + 30_000)
    periodic.step(now_ms=T + 10 * MIN + 31_000)
    assert jobs_of(r) == []
    periodic.step(now_ms=T + 11 * MIN + 200)
    assert jobs_of(r) == [ticks.job_id("s", T + 11 * MIN, "q")]
    assert state(scripts).missed == 0


def test_an_idle_pass_is_one_round_trip(scripts: Scripts, r: redis.Redis) -> None:
    many = [schedule(f"s{i}", every="1h") for i in range(20)]
    periodic = Periodic(scripts, many)
    periodic.step(now_ms=T)  # publishes, first sight
    stats = commands_caused(r, lambda: periodic.step(now_ms=T + 1_000))
    assert stats == {"time": 1, "exists": 1, "hmget": 20}


def test_definitions_a_flushed_redis_lost_are_published_again(
    scripts: Scripts, r: redis.Redis
) -> None:
    periodic = Periodic(scripts, [schedule(every="1m")])
    periodic.step(now_ms=T)
    r.flushall()
    periodic.step(now_ms=T + 1_000)
    assert list(published(r, K)) == ["s"]


def test_a_schedule_that_fails_is_logged_and_the_others_go_on(
    scripts: Scripts,
    r: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad, good = schedule("bad", every="1m"), schedule("good", every="1m")
    periodic = Periodic(scripts, [bad, good])
    periodic.step(now_ms=T)
    real = ticks.plan

    def broken(s: Schedule, last: int, now: int) -> ticks.Plan | None:
        if s.name == "bad":
            raise RuntimeError("a bug")
        return real(s, last, now)

    monkeypatch.setattr(ticks, "plan", broken)
    with caplog.at_level(logging.ERROR):
        periodic.step(now_ms=T + MIN)
    assert jobs_of(r) == [ticks.job_id("good", T + MIN, "q")]
    [line] = [rec for rec in caplog.records if rec.message == "schedule_failed"]
    assert (line.schedule, line.error) == ("bad", "RuntimeError: a bug")


def test_keys_live_in_the_global_slot() -> None:
    keys = Keys("ns")
    assert keys.schedules == "{ns}:v2:schedules"
    assert keys.schedule("nightly") == "{ns}:v2:schedule:nightly"


def test_an_enqueue_of_an_id_already_there_says_it_existed(scripts: Scripts) -> None:
    job = schedule(every="1m").job
    first = scripts.enqueue(job, ticks.job_id("s", T, "q"), now_ms=T)
    again = scripts.enqueue(job, ticks.job_id("s", T, "q"), now_ms=T + 5)
    assert (first.existed, again.existed) == (False, True)
