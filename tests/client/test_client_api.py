"""Every ``taskforge.Client`` method against the real gateway under gunicorn on a real Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.engine.scripts import Scripts
from shared.model.schedules import parse_entry
from taskforge import (
    Client,
    Conflict,
    JobCanceled,
    JobFailed,
    JobSpec,
    NotFound,
    Schedule,
    WaitTimeout,
)
from tests.support.engine_jobs import (
    complete,
    fresh_queue,
    kill,
)
from tests.support.gunicorn import Gunicorn
from tests.support.tools import wait_until
from workerd.periodic import Periodic


def test_enqueue_sends_every_option_and_get_reads_the_same_job(tf: Client) -> None:
    queue = fresh_queue()
    at = datetime.now(UTC) + timedelta(hours=1)
    job = tf.enqueue(
        "send_email",
        {"to": "a@example.com"},
        queue=queue,
        priority=7,
        max_retries=5,
        at=at,
        timeout="90s",
        idempotency_key="key-1",
    )
    assert (job.type, job.queue, job.status) == ("send_email", queue, "scheduled")
    assert (job.priority, job.max_retries, job.timeout) == (7, 5, 90)
    assert job.payload == {"to": "a@example.com"}
    assert job.scheduled_at is not None and abs(job.scheduled_at - at) < timedelta(seconds=1)
    again = tf.get(job.id)
    assert again == job and again.raw == tf.get(job.id).raw


def test_enqueue_repeated_with_one_key_returns_the_first_job(tf: Client) -> None:
    first = tf.enqueue("t", {"n": 1}, idempotency_key="same")
    second = tf.enqueue("t", {"n": 1}, idempotency_key="same")
    assert second.id == first.id
    assert len(tf.list("pending").jobs) == 1


def test_enqueue_refuses_at_with_delay_before_sending(tf: Client) -> None:
    with pytest.raises(ValueError, match="not both"):
        tf.enqueue("t", at="2030-01-01T00:00:00Z", delay=5)


def test_enqueue_with_a_delay_is_scheduled_that_long_ahead(tf: Client, gw: Gunicorn) -> None:
    before = datetime.now(UTC)
    job = tf.enqueue("t", delay="5m")
    assert job.status == "scheduled" and job.scheduled_at is not None
    # Redis's clock is this machine's: the due time is five minutes from the call.
    assert timedelta(minutes=5) - timedelta(seconds=5) < job.scheduled_at - before
    assert job.scheduled_at - before < timedelta(minutes=5, seconds=5)
    assert tf.enqueue("t", delay=timedelta(0)).status == "pending"


def test_enqueue_many_chunks_by_a_thousand_and_keeps_the_order(tf: Client) -> None:
    queue = fresh_queue()
    specs = [JobSpec("bulk", {"i": i}, queue=queue) for i in range(2500)]
    specs[1200] = JobSpec("bulk", {"i": 1200}, queue=queue, priority=3)
    created = tf.enqueue_many(
        [
            *specs[:2000],
            *({"type": "bulk", "payload": {"i": i}, "queue": queue} for i in range(2000, 2500)),
        ]
    )
    assert [job.payload["i"] for job in created] == list(range(2500))
    assert len({job.id for job in created}) == 2500
    assert created[1200].priority == 3
    assert tf.stats().queues[queue]["jobs"]["pending"] == 2500


def test_enqueue_many_with_a_key_made_again_answers_the_same_jobs_chunk_by_chunk(
    tf: Client,
) -> None:
    queue = fresh_queue()
    specs = [JobSpec("bulk", {"i": i}, queue=queue) for i in range(1500)]

    first = tf.enqueue_many(specs, idempotency_key=f"import-{queue}")
    again = tf.enqueue_many(specs, idempotency_key=f"import-{queue}")

    assert [job.id for job in again] == [job.id for job in first]
    assert tf.stats().queues[queue]["jobs"]["pending"] == 1500
    # The second chunk's key ("<key>.1") names its own 500 jobs: another body there conflicts.
    with pytest.raises(Conflict, match="Idempotency-Key") as conflict:
        tf.enqueue_many(specs[:1000] + specs[1001:], idempotency_key=f"import-{queue}")
    assert conflict.value.status == 409
    assert tf.stats().queues[queue]["jobs"]["pending"] == 1500


def test_cancel_then_get_shows_it_canceled(tf: Client) -> None:
    job = tf.enqueue("t")
    assert tf.cancel(job.id).status == "canceled"
    assert tf.get(job.id).status == "canceled"
    assert tf.cancel(job.id).status == "canceled", "canceling twice is fine"


def test_cancel_of_a_running_job_returns_it_still_processing_with_the_request(
    tf: Client, engine: Scripts
) -> None:
    queue = fresh_queue()
    job = tf.enqueue("t", queue=queue)
    token = engine.claim("w", queue=queue).token
    asked = tf.cancel(job.id, by="nightly cleanup")
    assert asked.status == "processing"
    assert asked.cancel_requested_at is not None
    assert asked.cancel_requested_by == "nightly cleanup"
    assert tf.cancel(job.id).cancel_requested_by == "nightly cleanup"  # a repeat: unchanged
    engine.cancel_running(job.id, token, "sigterm", queue=queue)  # its worker stopped it
    with pytest.raises(JobCanceled):
        tf.wait(job.id, timeout=5)
    last = tf.history(job.id).entries[-2:]
    assert [(e.event, e.by, e.stopped) for e in last] == [
        ("cancel_requested", "nightly cleanup", None),
        ("canceled", None, "sigterm"),
    ]


def test_history_lists_transitions_oldest_first(tf: Client, engine: Scripts) -> None:
    queue = fresh_queue()
    job = tf.enqueue("t", queue=queue)
    complete(engine, queue, job.id)
    kept = tf.history(job.id)
    assert kept.id == job.id and kept.queue == queue and kept.dropped == 0
    assert [entry.event for entry in kept.entries] == ["enqueued", "claimed", "completed"]
    assert kept.entries[0].actor == "api" and kept.entries[1].attempt == 1


def test_list_pages_with_cursors_and_iter_jobs_walks_them_all(tf: Client) -> None:
    queue = fresh_queue()
    ids = [tf.enqueue("t", queue=queue).id for _ in range(7)]
    first = tf.list("pending", queue=queue, limit=3)
    assert [job.id for job in first.jobs] == ids[:3] and first.next_cursor is not None
    rest = tf.list("pending", queue=queue, limit=10, cursor=first.next_cursor)
    assert [job.id for job in rest.jobs] == ids[3:] and rest.next_cursor is None
    assert [job.id for job in tf.iter_jobs("pending", queue=queue, page_size=2)] == ids
    assert list(tf.iter_jobs("pending", queue=queue, type="other")) == []


def test_list_without_a_state_walks_every_state_in_lifecycle_order(
    tf: Client, engine: Scripts
) -> None:
    queue = fresh_queue()
    dead = tf.enqueue("t", queue=queue).id
    kill(engine, queue, dead)
    later = tf.enqueue("t", queue=queue, delay=3600).id
    waiting = tf.enqueue("t", queue=queue).id
    wanted = [(waiting, "pending"), (later, "scheduled"), (dead, "dead")]
    first = tf.list(queue=queue, limit=2)
    assert [(job.id, job.status) for job in first.jobs] == wanted[:2] and first.next_cursor
    walked = [(job.id, job.status) for job in tf.iter_jobs(queue=queue, page_size=1)]
    assert walked == wanted


def test_dlq_replay_and_purge_one_by_one(tf: Client, engine: Scripts) -> None:
    queue = fresh_queue()
    a, b = tf.enqueue("t", queue=queue).id, tf.enqueue("t", queue=queue).id
    kill(engine, queue, a, "E: first")
    kill(engine, queue, b, "E: second")
    page = tf.dlq(limit=1)
    assert len(page.jobs) == 1 and page.next_cursor is not None
    rest = tf.dlq(cursor=page.next_cursor)
    # Newest death first; two deaths in one millisecond are ordered by id.
    by_id = {job.id: job for job in [*page.jobs, *rest.jobs]}
    assert sorted(by_id) == sorted([a, b]) and rest.next_cursor is None
    assert by_id[b].last_error == "E: second" and by_id[b].status == "dead"
    replayed = tf.replay(a)
    assert (replayed.id, replayed.status, replayed.attempts) == (a, "pending", 0)
    tf.purge(b)
    with pytest.raises(NotFound):
        tf.get(b)
    assert tf.dlq().jobs == []


def test_replay_dead_and_purge_dead_by_ids_and_by_filter(tf: Client, engine: Scripts) -> None:
    queue, other = fresh_queue(), fresh_queue()
    mine = [tf.enqueue("t", queue=queue).id for _ in range(5)]
    theirs = tf.enqueue("t", queue=other).id
    for job_id in mine:
        kill(engine, queue, job_id)
    kill(engine, other, theirs)
    unknown = str(uuid.uuid4())
    by_ids = tf.replay_dead([mine[0], unknown])
    assert by_ids.done == [mine[0]] and by_ids.skipped == [{"id": unknown, "reason": "not found"}]
    purged: list[str] = []
    cursor = None
    while True:
        result = tf.purge_dead(queue=queue, limit=2, cursor=cursor)
        purged += result.done
        if result.next_cursor is None:
            break
        cursor = result.next_cursor
    assert sorted(purged) == sorted(mine[1:])
    assert tf.get(theirs).status == "dead", "the filter took only its queue"
    assert tf.replay_dead(all=True).done == [theirs]


def test_stats_throughput_and_health(tf: Client, engine: Scripts) -> None:
    queue = fresh_queue()
    done, waiting = tf.enqueue("t", queue=queue).id, tf.enqueue("t", queue=queue).id
    complete(engine, queue, done)
    stats = tf.stats()
    assert stats.queues[queue]["jobs"]["completed"] == 1
    assert stats.queues[queue]["jobs"]["pending"] == 1
    assert stats.total == sum(stats.jobs.values()) and stats.workers["hosts"] == 0
    assert tf.get(waiting).status == "pending"
    throughput = tf.throughput(queue=queue, minutes=5)
    assert throughput["completed"] == 1 and len(throughput["minutes"]) == 5
    assert tf.health()["status"] == "ready"


def test_queues_pause_and_resume(tf: Client) -> None:
    queue = fresh_queue()
    tf.enqueue("t", queue=queue)
    paused = tf.pause_queue(queue)
    assert paused.name == queue and paused.paused and paused.paused_since is not None
    listed = {q.name: q for q in tf.queues()}
    assert listed[queue].paused and listed[queue].jobs["pending"] == 1
    assert not tf.resume_queue(queue).paused


def test_schedules_list_pause_and_resume(tf: Client, engine: Scripts) -> None:
    nightly = parse_entry(
        "nightly", {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"type": "pdf"}}
    )
    Periodic(engine, [nightly]).publish()
    [listed] = tf.schedules()
    assert isinstance(listed, Schedule)
    assert (listed.name, listed.cron, listed.every, listed.timezone) == (
        "nightly",
        "0 3 * * *",
        None,
        "Europe/Berlin",
    )
    assert listed.job["type"] == "pdf" and listed.last_tick is None and not listed.paused
    assert len(listed.next_runs) == 5
    assert all(run.hour == 3 and run.tzinfo is not None for run in listed.next_runs)
    paused = tf.pause_schedule("nightly")
    assert paused.paused and paused.paused_since is not None
    assert tf.schedule("nightly").paused
    assert not tf.resume_schedule("nightly").paused
    with pytest.raises(NotFound, match="schedule not found"):
        tf.pause_schedule("other")


def test_workers_is_empty_without_workerd_and_quiet_names_a_missing_host(tf: Client) -> None:
    assert tf.workers() == []
    with pytest.raises(NotFound, match="workerd host not found"):
        tf.quiet_worker("nohost-1")


def test_a_real_workerd_runs_what_the_client_enqueues_and_obeys_quiet_and_resume(
    tf: Client, start_workerd: Callable[..., Any]
) -> None:
    start_workerd()
    # The registry's first heartbeat may come before the children have reported.
    listed = wait_until(lambda: [h for h in tf.workers() if h.processes], 15.0, "workerd's workers")
    host = listed[0]
    assert host.workers == len(host.processes) and not host.quiet_requested
    done = tf.wait(tf.enqueue("generate_pdf", {"order": 1}).id, timeout=15)
    assert done.status == "completed" and done.result == {"pages": 1, "bytes": 2048}
    assert [entry.event for entry in tf.history(done.id).entries] == [
        "enqueued",
        "claimed",
        "completed",
    ]
    assert tf.quiet_worker(host.name).quiet_requested is True
    wait_until(lambda: tf.workers()[0].quiet, 10.0, "the host to go quiet")
    assert tf.resume_worker(host.name).quiet_requested is False
    wait_until(lambda: not tf.workers()[0].quiet, 10.0, "the host to resume")


# --- wait: GET /jobs/<id>?wait= ----------------------------------------


def test_wait_returns_the_completed_job_with_its_result(tf: Client, engine: Scripts) -> None:
    queue = fresh_queue()
    job = tf.enqueue("t", queue=queue)
    complete(engine, queue, job.id, '{"ok": true}')
    done = tf.wait(job.id, timeout=5)
    assert done.status == "completed" and done.result == {"ok": True}


def test_wait_raises_job_failed_for_a_dead_job(tf: Client, engine: Scripts) -> None:
    queue = fresh_queue()
    job = tf.enqueue("t", queue=queue)
    kill(engine, queue, job.id, "E: broken")
    with pytest.raises(JobFailed, match="E: broken") as raised:
        tf.wait(job.id, timeout=5)
    assert raised.value.state == "dead" and raised.value.job.id == job.id


def test_wait_raises_job_canceled(tf: Client) -> None:
    job = tf.enqueue("t")
    tf.cancel(job.id)
    with pytest.raises(JobCanceled) as raised:
        tf.wait(job.id, timeout=5)
    assert raised.value.state == "canceled"


def test_wait_times_out_with_the_unfinished_job(tf: Client) -> None:
    job = tf.enqueue("t")
    started = time.monotonic()
    with pytest.raises(WaitTimeout) as raised:
        tf.wait(job.id, timeout=0.5)
    assert 0.4 <= time.monotonic() - started < 5
    assert raised.value.state == "pending"
