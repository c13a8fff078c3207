"""Throughput per minute: trim.lua's roll-up into minute buckets, and throughput.lua's read of
them plus the live tail (shared/read/throughput.py)."""

from __future__ import annotations

import pytest
import redis

from shared.engine.scripts import Scripts
from shared.read.throughput import MINUTE_MS, Minute, last_hour
from tests.engine.conftest import T0, K, fail_to_retrying, finish, job_id, request
from tests.engine.test_budgets import commands_of

M0 = T0 // MINUTE_MS  # T0 is a whole minute


def totals(minutes: list[Minute]) -> tuple[int, int]:
    return sum(m.completed for m in minutes), sum(m.failed for m in minutes)


def by_minute(minutes: list[Minute]) -> dict[int, tuple[int, int]]:
    """Return the minutes that saw anything: epoch minute -> (completed, failed)."""
    return {
        m.start_ms // MINUTE_MS: (m.completed, m.failed) for m in minutes if m.completed or m.failed
    }


def test_last_hour_is_sixty_minutes_ending_with_the_current_one(scripts: Scripts) -> None:
    now = T0 + 90 * MINUTE_MS + 5_000

    minutes = last_hour(scripts, ["default"], now_ms=now)

    assert len(minutes) == 60
    assert minutes[-1].start_ms == T0 + 90 * MINUTE_MS
    assert minutes[0].start_ms == T0 + 31 * MINUTE_MS
    assert totals(minutes) == (0, 0)
    assert last_hour(scripts, [], now_ms=now) == minutes


def test_completions_across_a_minute_boundary_are_counted_once_whenever_trim_runs(
    scripts: Scripts,
) -> None:
    finish(scripts, job_id(1), now=T0 + 58_000)
    finish(scripts, job_id(2), now=T0 + 59_999)
    finish(scripts, job_id(3), now=T0 + 60_000)
    finish(scripts, job_id(4), now=T0 + 61_500)
    expected = {M0: (2, 0), M0 + 1: (2, 0)}

    # Before any trim: all live. Then trim every 700 ms across the boundary, reading each time.
    assert by_minute(last_hour(scripts, ["default"], now_ms=T0 + 61_500)) == expected
    for now in range(T0 + 61_500, T0 + 70_000, 700):
        scripts.trim(now_ms=now)
        scripts.trim(now_ms=now)  # a second call in the same second rolls nothing more
        assert by_minute(last_hour(scripts, ["default"], now_ms=now)) == expected, now

    buckets = scripts.redis.hgetall(K.throughput)
    assert buckets[f"c:{M0}".encode()] == b"2" and buckets[f"c:{M0 + 1}".encode()] == b"2"


def test_the_count_survives_trim_forgetting_completed_jobs(
    r: redis.Redis, scripts: Scripts
) -> None:
    # POLICY keeps 3 completed jobs: trim forgets 7 of these 10 at once, inside the settle
    # window (not rolled up yet): they are counted as they go.
    for n in range(10):
        finish(scripts, job_id(n + 1), now=T0 + 1_000 + n)
    scripts.trim(now_ms=T0 + 1_500)
    assert r.zcard(K.completed) == 3

    assert by_minute(last_hour(scripts, ["default"], now_ms=T0 + 1_500)) == {M0: (10, 0)}
    # Later trims roll the 3 left, then forget them at retention: still 10, once.
    for now in (T0 + 5_000, T0 + 30_000, T0 + 61_000 + scripts.policy.finished_retention_ms):
        scripts.trim(now_ms=now)
        assert by_minute(last_hour(scripts, ["default"], now_ms=now)) == {M0: (10, 0)}
    assert r.zcard(K.completed) == 0


def test_failures_are_rolled_into_minutes_before_trim_forgets_the_seconds(
    r: redis.Redis, scripts: Scripts
) -> None:
    # 70 failure seconds (more than trim keeps) across two minutes: 50 in the first, 20 after.
    for n in range(70):
        fail_to_retrying(scripts, job_id(n + 1), now=T0 + 10_000 + n * 1_000)
    now = T0 + 10_000 + 70 * 1_000
    assert by_minute(last_hour(scripts, ["default"], now_ms=now)) == {M0: (0, 50), M0 + 1: (0, 20)}

    for step in range(0, 120_000, 1_000):  # the scheduler's once a second, for two minutes
        scripts.trim(now_ms=now + step)
    later = now + 120_000

    assert r.hlen(K.failures) <= 64  # the seconds went
    assert by_minute(last_hour(scripts, ["default"], now_ms=later)) == {
        M0: (0, 50),
        M0 + 1: (0, 20),
    }


def test_the_live_tail_counts_what_finished_after_the_watermark(scripts: Scripts) -> None:
    finish(scripts, job_id(1), now=T0 + 10_000)
    scripts.trim(now_ms=T0 + 20_000)  # rolls up to T0 + 17,999
    finish(scripts, job_id(2), now=T0 + 19_000)
    finish(scripts, job_id(3), now=T0 + 21_000)
    fail_to_retrying(scripts, job_id(4), now=T0 + 21_500)

    # At T0 + 21,600 the current second's failure and completion count already.
    assert by_minute(last_hour(scripts, ["default"], now_ms=T0 + 21_600)) == {M0: (3, 1)}
    # A finish stamped after `now` (another clock) is not counted before its time.
    assert by_minute(last_hour(scripts, ["default"], now_ms=T0 + 20_500)) == {M0: (2, 0)}


def test_buckets_older_than_the_hour_are_dropped(r: redis.Redis, scripts: Scripts) -> None:
    finish(scripts, job_id(1), now=T0 + 1_000)
    fail_to_retrying(scripts, job_id(2), now=T0 + 1_000)
    scripts.trim(now_ms=T0 + 5_000)
    assert {f"c:{M0}".encode(), f"f:{M0}".encode()} <= set(r.hkeys(K.throughput))

    # Kept while the watermark's minute is within 61 of it (62 buckets: an hour and one spare)
    scripts.trim(now_ms=T0 + 61 * MINUTE_MS + 5_000)
    assert {f"c:{M0}".encode(), f"f:{M0}".encode()} <= set(r.hkeys(K.throughput))
    scripts.trim(now_ms=T0 + 62 * MINUTE_MS + 5_000)

    assert set(r.hkeys(K.throughput)) == {b"mark"}
    assert totals(last_hour(scripts, ["default"], now_ms=T0 + 62 * MINUTE_MS + 5_000)) == (0, 0)


def test_queues_are_summed_minute_by_minute(scripts: Scripts) -> None:
    for n, queue in enumerate(("alpha", "beta", "beta")):
        scripts.enqueue(request(queue=queue), job_id(n + 1), now_ms=T0 + n)
        claimed = scripts.claim("w1", queue=queue, now_ms=T0 + 30_000 * n)
        assert claimed is not None
        scripts.complete(claimed.id, claimed.token, queue=queue, now_ms=T0 + 30_000 * n)
    scripts.trim(queue="beta", now_ms=T0 + 62_000)

    both = last_hour(scripts, ["alpha", "beta"], now_ms=T0 + 62_000, minutes=5)

    assert len(both) == 5
    assert by_minute(both) == {M0: (2, 0), M0 + 1: (1, 0)}
    assert by_minute(last_hour(scripts, ["alpha"], now_ms=T0 + 62_000)) == {M0: (1, 0)}


@pytest.mark.parametrize("minutes", [0, 61])
def test_minutes_outside_one_to_sixty_are_refused(scripts: Scripts, minutes: int) -> None:
    with pytest.raises(ValueError, match="minutes must be"):
        last_hour(scripts, ["default"], now_ms=T0, minutes=minutes)


def test_the_roll_up_costs_trim_a_few_commands_a_second_whatever_the_job_rate(
    r: redis.Redis, scripts: Scripts
) -> None:
    # Before the roll-up a trim with nothing to forget ran 8 commands (GET of its
    # reply key, 3 ZRANGEBYSCORE, 3 ZCARD, HLEN) plus TIME in production. The roll-up adds HGET of the mark;
    # once a second ZCOUNT, HMGET of the failure seconds, HSET of the mark and an HINCRBY per
    # bucket that grew. Jobs finishing faster add nothing: one ZCOUNT counts any number.
    for n in range(50):
        finish(scripts, job_id(n + 1), now=T0 + 1_000 + n)
    fail_to_retrying(scripts, job_id(99), now=T0 + 1_500)
    scripts.trim(now_ms=T0 + 3_500)  # the mark: T0 + 999

    rolling = commands_of(r, lambda: scripts.trim(now_ms=T0 + 4_000))
    repeat = commands_of(r, lambda: scripts.trim(now_ms=T0 + 4_500))

    print(f"\ntrim commands: rolling a second {dict(rolling)}, same second {dict(repeat)}")
    assert rolling == {
        "get": 1,
        "hget": 1,
        "zcount": 1,
        "hmget": 1,
        "hset": 1,
        "hincrby": 2,
        "zrangebyscore": 3,
        "zcard": 3,
        "hlen": 1,
    }
    assert repeat == {"get": 1, "hget": 1, "zrangebyscore": 3, "zcard": 3, "hlen": 1}
    assert by_minute(last_hour(scripts, ["default"], now_ms=T0 + 4_500)) == {M0: (50, 1)}
