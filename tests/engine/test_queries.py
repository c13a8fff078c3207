"""shared.engine.queries and stats.lua: one job, counts per state without scans, and DLQ pages."""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from shared.engine.queries import BadCursor, WorkerCounts, dead_page, get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    J6,
    T0,
    K,
    claim,
    enqueue,
    fail_to_retrying,
    finish,
    job_id,
    kill,
    snapshot,
    start,
)
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader


def redis_now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def test_get_job_returns_the_job_or_none(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1, payload={"x": 1}, priority=3)

    found = get_job(r, K, J1)

    assert found is not None
    assert (found.id, found.status, found.priority, found.payload) == (
        J1,
        JobState.PENDING,
        3,
        {"x": 1},
    )
    assert get_job(r, K, J2) is None


def test_stats_reads_all_seven_states_after_a_mixed_sequence(
    r: redis.Redis, scripts: Scripts
) -> None:
    start(scripts, J1)  # processing
    fail_to_retrying(scripts, J2)  # retrying
    finish(scripts, J3)  # completed
    kill(scripts, J4)  # dead
    token = start(scripts, J5).token
    scripts.release(J5, token, now_ms=T0)  # back to pending
    enqueue(scripts, J6, scheduled_at=format_ms(T0 + 60_000))  # scheduled
    enqueue(scripts, job_id(7))
    scripts.cancel(job_id(7), now_ms=T0)  # canceled
    enqueue(scripts, job_id(8))  # pending

    counts, _ = scripts.stats()

    assert counts.by_state == {
        JobState.PENDING: 2,
        JobState.SCHEDULED: 1,
        JobState.PROCESSING: 1,
        JobState.RETRYING: 1,
        JobState.COMPLETED: 1,
        JobState.DEAD: 1,
        JobState.CANCELED: 1,
    }
    assert counts.by_state == {s: r.zcard(K.state_index(s)) for s in JobState}
    statuses = Counter(
        fields["status"] for key, fields in snapshot(r).items() if key.startswith(K.job_prefix)
    )
    assert counts.by_state == {s: statuses[str(s)] for s in JobState}
    assert counts.total == 8


def test_stats_issues_no_scans(r: redis.Redis, scripts: Scripts) -> None:
    for n in range(1, 30):
        enqueue(scripts, job_id(n))
    r.config_resetstat()

    scripts.stats()

    used = {name.removeprefix("cmdstat_") for name in r.info("commandstats")}
    # zcard per state, the oldest pending, the pause flag, the completions and failures of
    # the last minute (zcount, hmget), the registry (zrange, hmget).
    allowed = {"evalsha", "zcard", "zrange", "time", "hmget", "get", "zcount", "config|resetstat"}
    # The list of queues (a set of names, not of jobs), and the pipeline's script check.
    assert used <= allowed | {"smembers", "script|exists"}, used


def test_stats_reports_the_age_of_the_oldest_claimable_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    assert scripts.stats()[0].oldest_pending_age_ms is None
    now = redis_now_ms(r)
    enqueue(scripts, J1, now=now - 5_000)
    enqueue(scripts, J2, now=now - 1_000)

    age = scripts.stats()[0].oldest_pending_age_ms

    assert age is not None and 5_000 <= age < 7_000


def ids(page: object) -> list[str]:
    return [j.id for j in page.jobs]  # type: ignore[attr-defined]


def test_dead_page_lists_newest_first_and_pages_to_the_end(
    r: redis.Redis, scripts: Scripts
) -> None:
    for n, jid in enumerate((J1, J2, J3, J4, J5)):
        kill(scripts, jid, now=T0 + n * 1_000)

    first = dead_page(r, K, 2)
    second = dead_page(r, K, 2, first.next_cursor)
    third = dead_page(r, K, 2, second.next_cursor)

    assert (ids(first), ids(second), ids(third)) == ([J5, J4], [J3, J2], [J1])
    assert third.next_cursor is None
    assert first.jobs[0].status is JobState.DEAD


def test_dead_page_walks_ties_in_the_same_millisecond_without_loss_or_repeat(
    r: redis.Redis, scripts: Scripts
) -> None:
    tied = [job_id(n) for n in range(1, 8)]
    for jid in tied:
        kill(scripts, jid, now=T0 + 5)
    kill(scripts, job_id(50), now=T0 + 9)
    kill(scripts, job_id(0), now=T0)

    seen, cursor = [], None
    for _ in range(10):
        page = dead_page(r, K, 3, cursor)
        seen += ids(page)
        cursor = page.next_cursor
        if cursor is None:
            break

    assert seen == [job_id(50), *reversed(tied), job_id(0)]


def test_dead_page_cursor_survives_its_job_leaving_the_dlq(
    r: redis.Redis, scripts: Scripts
) -> None:
    for n, jid in enumerate((J1, J2, J3, J4)):
        kill(scripts, jid, now=T0 + n)
    first = dead_page(r, K, 2)
    assert ids(first) == [J4, J3]

    scripts.replay(J3, now_ms=T0 + 10)  # the job the cursor points at

    assert ids(dead_page(r, K, 2, first.next_cursor)) == [J2, J1]


def test_dead_page_of_exactly_limit_jobs_has_no_next_cursor(
    r: redis.Redis, scripts: Scripts
) -> None:
    kill(scripts, J1, now=T0)
    kill(scripts, J2, now=T0 + 1)

    page = dead_page(r, K, 2)

    assert ids(page) == [J2, J1]
    assert page.next_cursor is None


def test_dead_page_of_an_empty_dlq_is_empty(r: redis.Redis) -> None:
    page = dead_page(r, K, 10)

    assert (page.jobs, page.next_cursor) == ([], None)


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "abc",
        "1767225600000",
        f"1767225600000-{J1}-x",
        "1767225600000-not-a-job-id",
        f"-1-{J1}",
        f"1.5-{J1}",
        f"{'9' * 17}-{J1}",
        f"1767225600000_{J1}",
        f" 1767225600000-{J1}",
    ],
)
def test_dead_page_refuses_a_cursor_it_did_not_produce(r: redis.Redis, cursor: str) -> None:
    with pytest.raises(BadCursor):
        dead_page(r, K, 10, cursor)


def test_claimed_job_counts_move_between_states(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    before = scripts.stats()[0].by_state

    claim(scripts, J1)

    after = scripts.stats()[0].by_state
    assert (before[JobState.PENDING], before[JobState.PROCESSING]) == (1, 0)
    assert (after[JobState.PENDING], after[JobState.PROCESSING]) == (0, 1)


def test_stats_sums_the_live_supervisors_records(r: redis.Redis, scripts: Scripts) -> None:
    assert scripts.stats()[1] == WorkerCounts(hosts=0, live=0, busy=0)
    scripts.heartbeat("host-a", {"workers": 3, "busy": 1}, ttl_ms=60_000, now_ms=T0)
    scripts.heartbeat("host-b", {"workers": 2, "busy": 2}, ttl_ms=60_000, now_ms=T0)
    r.delete(K.worker("host-c"))  # an id whose record expired is not counted
    r.zadd(K.workers, {"host-c": T0})

    assert scripts.stats()[1] == WorkerCounts(hosts=2, live=5, busy=3)


def test_stats_reads_states_oldest_age_and_workers_in_one_pipeline(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, job_id(1), now=T0)
    enqueue(scripts, job_id(2), now=T0 + 5, scheduled_at=format_ms(T0 + 60_000))
    scripts.heartbeat("host-a", {"workers": 3, "busy": 1}, ttl_ms=60_000)
    r.config_resetstat()

    counts, workers = scripts.stats()

    assert counts.by_state == {s: r.zcard(K.state_index(s)) for s in JobState}
    assert counts.by_state[JobState.PENDING] == 1
    assert counts.by_state[JobState.SCHEDULED] == 1
    assert counts.oldest_pending_age_ms is not None and counts.oldest_pending_age_ms > 0
    assert workers == WorkerCounts(hosts=1, live=3, busy=1)
    calls = {name: stat["calls"] for name, stat in r.info("commandstats").items()}
    # One pipelined round trip after the list of queues: a read per queue, one of the fleet.
    assert calls.get("cmdstat_smembers") == 1
    assert calls.get("cmdstat_evalsha") == 2
