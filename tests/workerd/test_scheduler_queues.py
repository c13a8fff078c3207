"""The scheduler's cost does not grow with the names listed; what is due is still served.

A queue name stays listed once a job was enqueued under it, so names pile up (a mistyped
name, a Schemathesis run): a tick reads the due index (one ZRANGEBYSCORE) and asks only the
served queues EXISTS; the once-a-second duties walk the served queues and a sweep of a few
names. Real Redis, the real SchedulerProcess stepped by hand, the index's protocol driven in
both orders by hand.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.model.limit_rules import parse_limits
from tests.fakes import IdleSlot
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.redis_server import RedisServer
from workerd.scheduler import RECOVER_INTERVAL, SERVED_FOR_MS, SchedulerProcess
from workerd.sweep import SWEEP_BATCH

JOB = "00000000-0000-4000-8000-000000000001"
OTHER = "00000000-0000-4000-8000-000000000002"
T0 = 1_796_000_000_000
K = Keys()


def _commands(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    calls.pop("config|resetstat", None)
    return calls


def _scheduler(scripts: Scripts, served: tuple[str, ...] = ()) -> SchedulerProcess:
    return SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0, served=served)


def _list_names(r: redis.Redis, count: int) -> None:
    """List `count` names as enqueues would have (SADD), cheaply."""
    pipe = r.pipeline(transaction=False)
    for n in range(0, count, 1000):
        pipe.sadd(K.queues, *(f"idle-{i}" for i in range(n, min(count, n + 1000))))
    pipe.execute()


def _delayed(scripts: Scripts, queue: str, job_id: str, delay_ms: int, now_ms: int = T0) -> None:
    body = validate_enqueue({"type": "t", "queue": queue, "delay": f"{delay_ms}ms"})
    scripts.register_queue(queue)
    scripts.enqueue(body, job_id, now_ms=now_ms)


def _status(r: redis.Redis, job_id: str, queue: str) -> JobState:
    job = get_job(r, K, job_id, [queue])
    assert job is not None
    return job.status


@pytest.fixture
def scripts(r: redis.Redis) -> Scripts:
    engine = Scripts(r, K, Policy())
    engine.load()
    return engine


def test_an_idle_tick_costs_the_same_with_5000_listed_names_as_with_none(
    r: redis.Redis, scripts: Scripts
) -> None:
    costs = []
    for names in (0, 5000):
        r.flushall()
        scripts.load()
        _list_names(r, names)
        scheduler = _scheduler(scripts, served=("work",))
        scheduler.step(0.0, now_ms=T0)  # lists the served queues, recovers, trims, sweeps
        r.config_resetstat()
        scheduler.step(0.05, now_ms=T0)  # a promote tick
        costs.append(_commands(r))
    assert costs[0] == costs[1] == {"zrangebyscore": 1, "exists": 2}  # default and work


def test_the_once_a_second_pass_does_not_walk_the_list_of_queues(
    r: redis.Redis, scripts: Scripts
) -> None:
    _list_names(r, 5000)
    scheduler = _scheduler(scripts, served=("work",))
    scheduler.step(0.0, now_ms=T0)
    r.config_resetstat()

    scheduler.step(RECOVER_INTERVAL, now_ms=T0 + 1000)

    calls = _commands(r)
    assert "smembers" not in calls and "evalsha" not in calls, calls
    # The sweep's few names (SSCAN's COUNT is a hint), and a bounded rest: listing, gates'
    # limits, recovery's and trim's EXISTS for two served queues, the periodic pass's reads.
    assert calls["exists"] <= 2 * SWEEP_BATCH + 10, calls
    assert sum(calls.values()) <= 2 * SWEEP_BATCH + 25, calls


def test_a_delayed_enqueue_indexes_its_queue_by_the_job_s_due_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    _delayed(scripts, "later", JOB, 5_000)
    assert r.zscore(K.due, "later") == T0 + 5_000
    _delayed(scripts, "later", OTHER, 1_000)  # earlier: the entry comes forward
    assert r.zscore(K.due, "later") == T0 + 1_000
    _delayed(scripts, "later", "00000000-0000-4000-8000-000000000003", 9_000)  # never back
    assert r.zscore(K.due, "later") == T0 + 1_000
    now = validate_enqueue({"type": "t", "queue": "plain"})
    scripts.enqueue(now, "00000000-0000-4000-8000-000000000004", now_ms=T0)
    assert r.zscore(K.due, "plain") is None  # a plain job writes no global key


def test_a_batch_indexes_each_queue_by_its_earliest_delayed_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    bodies = [
        validate_enqueue({"type": "t", "queue": "a", "delay": "3s"}),
        validate_enqueue({"type": "t", "queue": "a", "delay": "2s"}),
        validate_enqueue({"type": "t", "queue": "b", "delay": "7s"}),
        validate_enqueue({"type": "t", "queue": "c"}),
    ]
    ids = [f"00000000-0000-4000-8000-00000000001{n}" for n in range(4)]
    scripts.enqueue_many(list(zip(bodies, ids, strict=True)), now_ms=T0)

    assert dict(r.zrange(K.due, 0, -1, withscores=True)) == {b"a": T0 + 2000, b"b": T0 + 7000}


def test_a_due_queue_among_thousands_is_promoted_and_its_entry_moves_to_the_next_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    _list_names(r, 3000)
    _delayed(scripts, "busy", JOB, 10)
    _delayed(scripts, "busy", OTHER, 60_000)
    scheduler = _scheduler(scripts)
    scheduler.step(0.0, now_ms=T0)
    r.config_resetstat()

    scheduler.step(0.05, now_ms=T0 + 20)

    assert _status(r, JOB, "busy") is JobState.PENDING
    assert _status(r, OTHER, "busy") is JobState.SCHEDULED
    assert r.zscore(K.due, "busy") == T0 + 60_000
    assert _commands(r).get("evalsha") == 1  # the busy queue's promote, nothing else

    scheduler.step(0.1, now_ms=T0 + 60_000)
    assert _status(r, OTHER, "busy") is JobState.PENDING
    assert r.zcard(K.due) == 0  # nothing scheduled left: no entry


def test_a_retry_in_a_served_queue_is_promoted_without_a_due_entry(
    r: redis.Redis, scripts: Scripts
) -> None:
    body = validate_enqueue({"type": "t", "queue": "work", "max_retries": 3})
    scripts.enqueue(body, JOB, now_ms=T0)
    job = scripts.claim("w1", queue="work", now_ms=T0)
    assert job is not None
    scripts.fail(JOB, job.token, "E: x", queue="work", now_ms=T0)
    assert _status(r, JOB, "work") is JobState.RETRYING
    assert r.zcard(K.due) == 0  # fail.lua's path writes no global key
    scheduler = _scheduler(scripts, served=("work",))

    scheduler.step(0.0, now_ms=T0 + scripts.policy.retry_max_ms)

    assert _status(r, JOB, "work") is JobState.PENDING


def test_the_promote_pass_opens_the_rate_gates_of_rate_limited_served_queues_only(
    r: redis.Redis, scripts: Scripts
) -> None:
    keys = K.for_queue("rated")
    rated = parse_limits({"types": {"t": {"rate": "1/1s"}}}).compact_json()
    scripts.set_limits("rated", rated)
    scripts.set_limits("capped", parse_limits({"concurrency": 1}).compact_json())
    scripts.set_limits("elsewhere", rated)  # limited, but no host serves it
    for n in (1, 2):
        body = validate_enqueue({"type": "t", "queue": "rated"})
        scripts.enqueue(body, f"00000000-0000-4000-8000-00000000000{n}", now_ms=T0)
    assert scripts.claim("w1", queue="rated", now_ms=T0) is not None
    assert scripts.claim("w2", queue="rated", now_ms=T0) is None  # held, the gate closed
    scheduler = _scheduler(scripts, served=("rated", "capped"))
    scheduler.step(0.0, now_ms=T0)
    assert scheduler.rated == ["rated"]
    assert r.zcard(keys.held) == 1
    r.config_resetstat()

    scheduler.step(0.05, now_ms=T0 + 1_000)  # the next token is due

    assert r.zcard(keys.held) == 0 and r.zcard(keys.pending) == 1
    # The tick's EXISTS of three served queues' retries, and one queue's gates.
    assert _commands(r).get("exists") == 3 + 1


# --- the due index's protocol: a producer's script then note, a scheduler's ZREM then read --


def _producer(r: redis.Redis) -> Scripts:
    """Return an engine whose enqueue stops after its script: the test makes the note."""
    engine = Scripts(r, K, Policy())
    engine.note_due = lambda scheduled: None  # type: ignore[method-assign]
    return engine


def _note(r: redis.Redis, queue: str, at: int) -> None:
    r.zadd(K.due, {queue: at}, lt=True)  # exactly what Scripts.note_due sends


class _Hooked(redis.Redis):
    """A client that runs a test's step just before one of its commands (or pipelines)."""

    before: dict[str, Callable[[], Any]]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        step = self.before.pop(str(args[0]).upper(), None)
        if step:
            step()
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute

        def hooked(raise_on_error: bool = True) -> Any:
            step = self.before.pop("PIPELINE", None)
            if step:
                step()
            return execute(raise_on_error)

        pipe.execute = hooked
        return pipe


# Where the producer's script, then its note, run among settle_due's steps: before its ZREM,
# before its read of the queue (a pipeline), after it returned.
POINTS = ("ZREM", "PIPELINE", "after")


@pytest.mark.parametrize(
    ("script_at", "note_at"),
    [(s, n) for i, s in enumerate(POINTS) for n in POINTS[i:]],
)
def test_a_job_scheduled_while_a_scheduler_settles_keeps_its_due_entry(
    r: redis.Redis, redis_server: RedisServer, script_at: str, note_at: str
) -> None:
    producer = _producer(r)
    producer.load()
    _delayed(Scripts(r, K, Policy()), "q", OTHER, 10)  # the entry the scheduler found due
    producer.promote(queue="q", now_ms=T0 + 20)  # ... and promoted: the queue is empty now
    body = validate_enqueue({"type": "t", "queue": "q", "delay": "5s"})
    steps: list[tuple[str, Callable[[], Any]]] = [
        (script_at, lambda: producer.enqueue(body, JOB, now_ms=T0 + 30)),
        (note_at, lambda: _note(r, "q", T0 + 5_030)),
    ]
    hooked = _Hooked.from_url(redis_server.url)
    hooked.before = {}
    for point, step in steps:
        if point != "after":
            previous = hooked.before.get(point)
            hooked.before[point] = (lambda p, s: lambda: (p and p(), s()))(previous, step)
    try:
        Scripts(hooked, K, Policy()).settle_due(["q"])
    finally:
        hooked.close()
    for point, step in steps:
        if point == "after":
            step()

    assert not hooked.before  # every step ran where it was meant to
    assert r.zscore(K.due, "q") == T0 + 5_030


def test_the_sweep_gives_back_a_due_entry_a_crash_lost_and_the_job_is_promoted(
    r: redis.Redis, scripts: Scripts
) -> None:
    _delayed(scripts, "crashed", JOB, 10)
    r.zrem(K.due, "crashed")  # the producer died between its script and its note
    scheduler = _scheduler(scripts)
    scheduler.step(0.0, now_ms=T0 + 20)
    assert r.zscore(K.due, "crashed") == T0 + 10  # the sweep's first pass read the one name
    scheduler.step(0.05, now_ms=T0 + 20)
    assert _status(r, JOB, "crashed") is JobState.PENDING


class _GlobalMasterDown(redis.Redis):
    """A client whose writes to the due index fail, as with the global slot's master down."""

    def zadd(self, name: Any, *args: Any, **kwargs: Any) -> Any:
        if name == K.due:
            raise redis.ConnectionError("the global slot's master is down")
        return super().zadd(name, *args, **kwargs)


def test_a_failed_note_leaves_the_delayed_job_created_and_the_sweep_indexes_it(
    r: redis.Redis, redis_server: RedisServer, scripts: Scripts
) -> None:
    down = _GlobalMasterDown.from_url(redis_server.url)
    try:
        body = validate_enqueue({"type": "t", "queue": "q", "delay": "10ms"})
        result = Scripts(down, K, Policy()).enqueue(body, JOB, now_ms=T0)  # no error raised
    finally:
        down.close()
    assert result.created and result.status is JobState.SCHEDULED
    assert r.zscore(K.due, "q") is None
    scripts.register_queue("q")

    _scheduler(scripts).step(0.0, now_ms=T0 + 20)

    assert r.zscore(K.due, "q") == T0 + 10


def test_the_sweep_walks_every_listed_name_in_passes_of_a_few(
    r: redis.Redis, scripts: Scripts
) -> None:
    _list_names(r, 300)
    _delayed(scripts, "idle-150", JOB, 10)
    r.zrem(K.due, "idle-150")
    scheduler = _scheduler(scripts)
    passes = 0
    while passes == 0 or scheduler.sweep.cursor != 0:  # one whole walk of the list
        scheduler.step(passes * RECOVER_INTERVAL, now_ms=T0 + 20)
        passes += 1
        assert passes <= 4 * 301 // SWEEP_BATCH, "the walk never ended"
    scheduler.step(passes * RECOVER_INTERVAL + 0.05, now_ms=T0 + 20)  # a tick after the walk
    assert _status(r, JOB, "idle-150") is JobState.PENDING  # repaired within the walk
    assert passes >= 301 // (2 * SWEEP_BATCH)  # a few names a pass, not the whole list


# --- leases and finished jobs: served queues, a dead host's included -------------------


def test_a_dead_host_s_queue_is_still_recovered_and_trimmed_by_another_host(
    r: redis.Redis, scripts: Scripts
) -> None:
    policy = scripts.policy
    gone = _scheduler(scripts, served=("gone",))
    gone.step(0.0, now_ms=T0)  # the dead host's scheduler listed its queue, once
    for job_id in (JOB, OTHER):
        scripts.enqueue(validate_enqueue({"type": "t", "queue": "gone"}), job_id, now_ms=T0)
    finished = scripts.claim("w1", queue="gone", now_ms=T0)
    assert finished is not None
    scripts.complete(finished.id, finished.token, queue="gone", now_ms=T0)
    assert scripts.claim("w1", queue="gone", now_ms=T0) is not None  # then the host died
    survivor = _scheduler(scripts, served=("other",))
    later = T0 + max(SERVED_FOR_MS, policy.lease_ms) + policy.finished_retention_ms + 1000

    survivor.step(0.0, now_ms=later)

    running = OTHER if finished.id == JOB else JOB
    assert _status(r, running, "gone") is JobState.PENDING  # recovered
    assert get_job(r, K, finished.id, ["gone"]) is None  # trimmed past retention
    assert r.zscore(K.served, "gone") == T0  # kept: it held a lease and a finished job
    survivor.step(RECOVER_INTERVAL, now_ms=later + 1000)
    assert r.zscore(K.served, "gone") is None  # nothing left for the per-queue duties


def test_the_sweep_adopts_a_queue_with_leases_no_served_entry_names(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.register_queue("lost")
    scripts.enqueue(validate_enqueue({"type": "t", "queue": "lost"}), JOB, now_ms=T0)
    assert scripts.claim("w1", queue="lost", now_ms=T0) is not None  # its host's entry was lost
    scheduler = _scheduler(scripts, served=("other",))
    later = T0 + scripts.policy.lease_ms + 1000

    scheduler.step(0.0, now_ms=later)  # the sweep finds the lease: the queue joins the set
    assert r.zscore(K.served, "lost") == 0
    scheduler.step(RECOVER_INTERVAL, now_ms=later)

    assert _status(r, JOB, "lost") is JobState.PENDING


def test_a_job_canceled_in_a_queue_no_host_serves_is_trimmed_by_the_sweep(
    r: redis.Redis, scripts: Scripts
) -> None:
    _delayed(scripts, "nobody", JOB, 60_000)
    scripts.cancel(JOB, queue="nobody", now_ms=T0)
    scheduler = _scheduler(scripts)

    scheduler.step(0.0, now_ms=T0 + scripts.policy.finished_retention_ms + 1)

    assert get_job(r, K, JOB, ["nobody"]) is None
    assert r.zscore(K.served, "nobody") is None  # trimmed, not adopted


def test_the_finished_caps_are_totals_shared_by_the_queues_holding_finished_jobs(
    r: redis.Redis,
) -> None:
    scripts = Scripts(r, K, Policy(finished_max_jobs=4))
    scripts.load()
    for queue in ("a", "b"):
        for n in range(4):
            job_id = f"00000000-0000-4000-8000-0000000{queue}{n:04d}"
            scripts.enqueue(validate_enqueue({"type": "t", "queue": queue}), job_id, now_ms=T0)
            job = scripts.claim("w", queue=queue, now_ms=T0)
            assert job is not None
            scripts.complete(job.id, job.token, queue=queue, now_ms=T0 + n)
    scheduler = _scheduler(scripts, served=("a", "b"))

    scheduler.step(0.0, now_ms=T0 + 10)

    kept = [r.zcard(K.for_queue(q).completed) for q in ("a", "b")]
    assert kept == [2, 2]  # 4 in total, not 4 each


def test_without_a_clock_override_the_tick_reads_the_index_on_redis_s_clock(
    r: redis.Redis, scripts: Scripts
) -> None:
    _delayed(scripts, "soon", JOB, 1, now_ms=T0)  # due at T0 + 1: the past, on Redis's clock
    scheduler = _scheduler(scripts)

    scheduler.step(0.0)

    assert _status(r, JOB, "soon") is JobState.PENDING
    assert r.zcard(K.due) == 0
