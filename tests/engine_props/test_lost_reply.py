"""Semantic 10: no transition applies twice when its reply is lost and redis-py retries.

Each test arranges state through a direct client, then calls one engine wrapper through a TCP
proxy that forwards the script's EVALSHA to Redis, swallows Redis's reply and hangs up: the
script ran, the client sees a connection error and redis-py sends the same EVALSHA again on
a new connection. The assertions read Redis directly (not through the proxy, not through the
engine's read helpers): the transition happened exactly once, and the wrapper returned the
first run's outcome. Where a caller logs or counts what a call did (promote, recover, trim,
cancel), a separate ``..._reports_...`` test checks that answer survives the lost reply.

The redis-py in use (8.x) retries ConnectionError and TimeoutError by default (10 retries,
jittered backoff from 10 ms); the proxied client below configures retries explicitly (3, no
backoff), and two tests show that a default client and the production client
(shared.connect.redis_conn.connect) retry a lost reply too. enqueue_many's MULTI/EXEC is retried whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from shared.connect.redis_conn import connect
from shared.engine import history
from shared.engine.engine_types import (
    AckResult,
    Code,
    EnqueueResult,
    FailResult,
    Policy,
    PromoteResult,
    RecoverResult,
    Released,
    TrimResult,
)
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import EnqueueRequest, JobState
from shared.settings.config import Settings
from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy

NOW = 1_700_000_000_000
KEYS = Keys()
POLICY = Policy(
    lease_ms=30_000,
    retry_base_ms=100,
    retry_max_ms=800,
    max_recoveries=1,
    finished_retention_ms=1_000,
)
TRACEBACK = 'Traceback (most recent call last):\n  File "t.py", line 1, in h\nValueError: boom\n'
WAIT = 5.0  # seconds: socket timeouts of the proxied client, so a proxy bug fails, not hangs


class LossyEngine:
    """The engine seen through a proxy that can lose one script reply."""

    def __init__(self, direct: redis.Redis, proxy: TcpProxy, client: redis.Redis) -> None:
        self.direct = direct
        self.proxy = proxy
        self.scripts = Scripts(client, KEYS, POLICY)

    @contextmanager
    def reply_lost(self, script: str, *, other_calls: int = 0) -> Iterator[None]:
        """Lose the reply of the next call of ``script``; check it ran twice on the server.

        `other_calls`: the calls of other scripts the block makes besides.
        """
        # Loaded beforehand, the scripts travel as EVALSHA <sha>: the bytes the proxy matches.
        for source in self.scripts.transport.sources.values():
            self.direct.script_load(source)
        with self._lost(self.scripts.transport.shas[script].encode(), "evalsha", 2 + other_calls):
            yield

    @contextmanager
    def exec_reply_lost(self) -> Iterator[None]:
        """Lose the reply of the next MULTI/EXEC transaction; check it ran twice."""
        with self._lost(b"$4\r\nEXEC\r\n", "exec", 2):
            yield

    @contextmanager
    def _lost(self, match: bytes, command: str, expected: int) -> Iterator[None]:
        self.direct.config_resetstat()
        lost = self.proxy.drop_next_reply(match)
        yield
        assert lost.is_set(), f"the proxy never saw {match!r}: nothing was lost"
        stats = self.direct.info("commandstats").get(f"cmdstat_{command}", {})
        calls = stats.get("calls")
        assert calls == expected, f"expected the lost {command.upper()} and its retry, saw {calls}"


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy(redis_server.host, redis_server.port) as running:
        yield running


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return the engine on a direct client, to arrange state."""
    return Scripts(r, KEYS, POLICY)


@pytest.fixture
def lossy(r: redis.Redis, proxy: TcpProxy) -> Iterator[LossyEngine]:
    client = redis.Redis(
        host=proxy.host,
        port=proxy.port,
        retry=Retry(NoBackoff(), 3),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        socket_timeout=WAIT,
        socket_connect_timeout=WAIT,
    )
    yield LossyEngine(r, proxy, client)
    client.close()


def request(
    *, priority: int = 0, max_retries: int = 3, scheduled_at_ms: int | None = None
) -> EnqueueRequest:
    return EnqueueRequest(
        type="report",
        payload_json='{"n":1}',
        priority=priority,
        max_retries=max_retries,
        scheduled_at_ms=scheduled_at_ms,
    )


def new_id() -> str:
    return str(uuid.uuid4())


def enqueue_pending(engine: Scripts, count: int = 1, *, max_retries: int = 3) -> list[str]:
    ids = [new_id() for _ in range(count)]
    for job_id in ids:
        engine.enqueue(request(max_retries=max_retries), job_id, now_ms=NOW)
    return ids


def claimed(engine: Scripts, *, max_retries: int = 3, worker: str = "w1") -> tuple[str, int]:
    """Enqueue one job and claim it; return its id and token."""
    [job_id] = enqueue_pending(engine, max_retries=max_retries)
    job = engine.claim(worker, now_ms=NOW)
    assert job is not None and job.id == job_id
    return job_id, job.token


def on_second_attempt(engine: Scripts) -> tuple[str, int]:
    """Return a job (id, token) running its second execution: one failure, then claimed again."""
    job_id, token = claimed(engine)
    retry_at = engine.fail(job_id, token, "first", now_ms=NOW).next_retry_at
    assert retry_at is not None
    assert engine.promote(now_ms=retry_at).retrying == [job_id]
    job = engine.claim("w1", now_ms=NOW)
    assert job is not None and job.attempts == 2
    return job_id, job.token


def dead(engine: Scripts) -> str:
    job_id, token = claimed(engine, max_retries=1)
    assert engine.fail(job_id, token, "boom", now_ms=NOW).code is Code.DEAD
    return job_id


def fields(r: redis.Redis, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in r.hgetall(KEYS.job(job_id)).items()}


def index(r: redis.Redis, key: str) -> list[str]:
    return [m.decode() for m in r.zrange(key, 0, -1)]


def pending_ids(r: redis.Redis) -> list[str]:
    return [m.split(":", 1)[1] for m in index(r, KEYS.pending)]


def job_ids(r: redis.Redis) -> set[str]:
    prefix = KEYS.job_prefix.encode()
    return {k[len(prefix) :].decode() for k in r.scan_iter(match=prefix + b"*", count=1000)}


def seq(r: redis.Redis) -> int:
    return int(r.get(KEYS.seq) or 0)


def events(r: redis.Redis, job_id: str) -> list[str]:
    """Return the job's history, event names only: a repeat must not write a second entry."""
    found = history.read(r, KEYS, job_id, KEYS.queue)
    assert found is not None, job_id
    return [entry.event for entry in found.entries]


# -- enqueue ------------------------------------------------------------------------------


def test_enqueue_creates_one_job(r: redis.Redis, lossy: LossyEngine) -> None:
    job_id = new_id()
    with lossy.reply_lost("enqueue"):
        result = lossy.scripts.enqueue(request(), job_id, now_ms=NOW)
    assert result == EnqueueResult(job_id, JobState.PENDING, created=True, created_at_ms=NOW)
    assert job_ids(r) == {job_id}
    assert pending_ids(r) == [job_id]
    assert index(r, KEYS.pending_since) == [job_id]
    assert seq(r) == 1, "one place in line, not two"
    assert r.llen(KEYS.wake) == 1, "one wake-up hint, not two"
    assert events(r, job_id) == ["enqueued"]


def test_enqueue_with_idempotency_key_creates_one_job(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id = new_id()
    with lossy.reply_lost("enqueue", other_calls=1):  # reserve.lua first
        result = lossy.scripts.enqueue(request(), job_id, idempotency_key="order-7", now_ms=NOW)
    assert result == EnqueueResult(job_id, JobState.PENDING, created=True, created_at_ms=NOW)
    assert job_ids(r) == {job_id}
    assert seq(r) == 1
    assert r.hget(KEYS.idempotency("order-7"), "job_id") == job_id.encode()
    again = engine.enqueue(request(), new_id(), idempotency_key="order-7", now_ms=NOW + 1)
    assert again == EnqueueResult(job_id, JobState.PENDING, created=False, created_at_ms=NOW)


def test_reserving_an_idempotency_key_whose_reply_was_lost_creates_one_job(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id = new_id()
    with lossy.reply_lost("reserve", other_calls=1):  # enqueue.lua after
        result = lossy.scripts.enqueue(request(), job_id, idempotency_key="order-8", now_ms=NOW)
    assert result == EnqueueResult(job_id, JobState.PENDING, created=True, created_at_ms=NOW)
    assert job_ids(r) == {job_id}
    again = engine.enqueue(request(), new_id(), idempotency_key="order-8", now_ms=NOW + 1)
    assert again == EnqueueResult(job_id, JobState.PENDING, created=False, created_at_ms=NOW)


def test_enqueue_many_creates_each_job_once(r: redis.Redis, lossy: LossyEngine) -> None:
    ids = [new_id() for _ in range(3)]
    with lossy.exec_reply_lost():
        results = lossy.scripts.enqueue_many([(request(), job_id) for job_id in ids], now_ms=NOW)
    assert results == [EnqueueResult(job_id, JobState.PENDING, True, NOW) for job_id in ids]
    assert job_ids(r) == set(ids)
    assert pending_ids(r) == ids
    assert seq(r) == 3, "three places in line, not six"
    assert r.llen(KEYS.wake) == 3


def test_enqueue_scheduled_creates_one_job(r: redis.Redis, lossy: LossyEngine) -> None:
    job_id = new_id()
    with lossy.reply_lost("enqueue"):
        result = lossy.scripts.enqueue(request(scheduled_at_ms=NOW + 5_000), job_id, now_ms=NOW)
    assert result == EnqueueResult(job_id, JobState.SCHEDULED, created=True, created_at_ms=NOW)
    assert job_ids(r) == {job_id}
    assert r.zrange(KEYS.scheduled, 0, -1, withscores=True) == [(job_id.encode(), NOW + 5_000)]
    assert r.zcard(KEYS.pending) == 0
    assert seq(r) == 0


# -- claim, renew, complete, fail (the worker's writes) ---------------------------------------


def test_claim_pops_one_job(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    first, second = enqueue_pending(engine, 2)
    with lossy.reply_lost("claim"):
        job = lossy.scripts.claim("w1", now_ms=NOW + 1)
    assert job is not None
    assert (job.id, job.status, job.attempts, job.token, job.worker_id) == (
        first,
        JobState.PROCESSING,
        1,
        1,
        "w1",
    )
    assert r.zrange(KEYS.processing, 0, -1, withscores=True) == [
        (first.encode(), NOW + 1 + POLICY.lease_ms)
    ]
    assert pending_ids(r) == [second], "the retry did not claim a second job"
    assert (fields(r, first)["attempts"], fields(r, first)["token"]) == ("1", "1")
    assert events(r, first) == ["enqueued", "claimed"]
    assert events(r, second) == ["enqueued"]
    assert (fields(r, second)["status"], fields(r, second)["attempts"]) == ("pending", "0")


def test_renew_extends_the_lease_once(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    job_id, token = claimed(engine)
    with lossy.reply_lost("renew"):
        renewed = lossy.scripts.renew([(job_id, token)], now_ms=NOW + 500)
    assert renewed == [Code.DONE]
    assert r.zscore(KEYS.processing, job_id) == NOW + 500 + POLICY.lease_ms
    assert fields(r, job_id)["token"] == str(token)


def test_complete_records_success_once(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    job_id, token = claimed(engine)
    with lossy.reply_lost("complete"):
        ack = lossy.scripts.complete(job_id, token, '{"ok":true}', now_ms=NOW + 10)
    assert ack == AckResult(Code.DONE)
    job = fields(r, job_id)
    assert (job["status"], job["result"], job["finished_at"]) == (
        "completed",
        '{"ok":true}',
        str(NOW + 10),
    )
    assert r.zrange(KEYS.completed, 0, -1, withscores=True) == [(job_id.encode(), NOW + 10)]
    assert r.zcard(KEYS.processing) == 0
    assert events(r, job_id) == ["enqueued", "claimed", "completed"]


def test_complete_and_claim_next_claims_one_job(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    first, second, third = enqueue_pending(engine, 3)
    job = engine.claim("w1", now_ms=NOW)
    assert job is not None and job.id == first
    with lossy.reply_lost("complete"):
        ack = lossy.scripts.complete(first, job.token, claim_next_for="w1", now_ms=NOW + 10)
    assert ack.code is Code.DONE
    assert ack.next_job is not None
    assert (ack.next_job.id, ack.next_job.attempts, ack.next_job.token) == (second, 1, 1)
    assert fields(r, first)["status"] == "completed"
    assert index(r, KEYS.processing) == [second]
    assert pending_ids(r) == [third], "the retry did not claim a third job"
    assert (fields(r, second)["attempts"], fields(r, second)["token"]) == ("1", "1")
    assert events(r, first) == ["enqueued", "claimed", "completed"]
    assert events(r, second) == ["enqueued", "claimed"]


def test_fail_schedules_one_retry(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    job_id, token = claimed(engine)
    with lossy.reply_lost("fail"):
        result = lossy.scripts.fail(job_id, token, "boom", traceback=TRACEBACK, now_ms=NOW + 10)
    due = NOW + 10 + POLICY.retry_base_ms  # attempt 1: base × 2^0
    assert result == FailResult(Code.RETRYING, next_retry_at=due)
    assert (result.job_type, result.attempt) == ("report", 1)  # the repeat answers it too
    job = fields(r, job_id)
    assert (job["status"], job["attempts"], job["next_retry_at"]) == ("retrying", "1", str(due))
    assert job["traceback"] == TRACEBACK  # stored once, unchanged by the repeat
    assert r.zrange(KEYS.retrying, 0, -1, withscores=True) == [(job_id.encode(), due)]
    assert r.zcard(KEYS.processing) == 0
    assert events(r, job_id) == ["enqueued", "claimed", "retrying"]


@pytest.mark.parametrize("permanent", [False, True], ids=["attempts-spent", "permanent"])
def test_fail_enters_the_dlq_once(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine, permanent: bool
) -> None:
    job_id, token = claimed(engine, max_retries=1 if not permanent else 3)
    with lossy.reply_lost("fail"):
        result = lossy.scripts.fail(
            job_id, token, "boom", permanent=permanent, traceback=TRACEBACK, now_ms=NOW + 10
        )
    assert result == FailResult(Code.DEAD)
    assert (result.job_type, result.attempt) == ("report", 1)
    assert r.zrange(KEYS.dead, 0, -1, withscores=True) == [(job_id.encode(), NOW + 10)]
    job = fields(r, job_id)
    assert (job["status"], job["attempts"], job["last_error"]) == ("dead", "1", "boom")
    assert job["traceback"] == TRACEBACK
    assert r.zcard(KEYS.retrying) == 0
    assert events(r, job_id) == ["enqueued", "claimed", "dead"]


# -- the scheduler's transitions ----------------------------------------------------------------


def test_promote_moves_a_due_job_once(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    job_id = new_id()
    engine.enqueue(request(scheduled_at_ms=NOW + 100), job_id, now_ms=NOW)
    with lossy.reply_lost("promote"):
        lossy.scripts.promote(now_ms=NOW + 150)
    assert pending_ids(r) == [job_id]
    assert r.zcard(KEYS.scheduled) == 0
    assert fields(r, job_id)["status"] == "pending"
    assert seq(r) == 1, "one place in line, not two"
    assert r.llen(KEYS.wake) == 1
    assert events(r, job_id) == ["scheduled", "promoted"]


def test_promote_reports_the_job_it_moved(engine: Scripts, lossy: LossyEngine) -> None:
    job_id = new_id()
    engine.enqueue(request(scheduled_at_ms=NOW + 100), job_id, now_ms=NOW)
    with lossy.reply_lost("promote"):
        result = lossy.scripts.promote(now_ms=NOW + 150)
    assert result == PromoteResult([job_id], [], [50], [])
    assert result.scheduled_types == ["report"]


def test_recover_counts_one_recovery(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    job_id, token = on_second_attempt(engine)
    places, hints = seq(r), r.llen(KEYS.wake)
    with lossy.reply_lost("recover"):
        lossy.scripts.recover(now_ms=NOW + POLICY.lease_ms + 1)
    job = fields(r, job_id)
    # The lost execution is given back once (2 → 1, not 0); one recovery; one new token.
    assert (job["status"], job["recoveries"], job["attempts"], job["token"]) == (
        "pending",
        "1",
        "1",
        str(token + 1),
    )
    assert pending_ids(r) == [job_id]
    assert r.zcard(KEYS.processing) == 0
    assert seq(r) == places, "a recovered job keeps its place in line"
    assert r.llen(KEYS.wake) == hints + 1
    assert events(r, job_id)[-2:] == ["claimed", "recovered"]
    assert events(r, job_id).count("recovered") == 1


def test_recover_past_the_cap_enters_the_dlq_once(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id, _ = claimed(engine)
    expired = NOW + POLICY.lease_ms + 1
    assert engine.recover(now_ms=expired).requeued == [job_id]  # the one loss the cap allows
    assert engine.claim("w2", now_ms=expired) is not None
    with lossy.reply_lost("recover"):
        lossy.scripts.recover(now_ms=expired + POLICY.lease_ms + 1)
    job = fields(r, job_id)
    assert (job["status"], job["recoveries"], job["token"]) == ("dead", "2", "4")
    assert "recovery cap" in job["last_error"]
    assert index(r, KEYS.dead) == [job_id]
    assert r.zcard(KEYS.pending) == 0
    assert events(r, job_id) == ["enqueued", "claimed", "recovered", "claimed", "dead"]


def test_recover_reports_the_job_it_requeued(engine: Scripts, lossy: LossyEngine) -> None:
    job_id, _ = claimed(engine)
    with lossy.reply_lost("recover"):
        result = lossy.scripts.recover(now_ms=NOW + POLICY.lease_ms + 1)
    assert result == RecoverResult(requeued=[job_id], dead=[])
    assert result.requeued_types == ["report"]


@pytest.mark.parametrize(
    ("drained", "recoveries"), [(False, "1"), (True, "0")], ids=["crash", "drain"]
)
def test_release_requeues_once(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine, drained: bool, recoveries: str
) -> None:
    job_id, token = on_second_attempt(engine)
    hints = r.llen(KEYS.wake)
    with lossy.reply_lost("release"):
        ack = lossy.scripts.release(job_id, token, drained=drained, now_ms=NOW + 10)
    assert ack == AckResult(Code.DONE)
    assert ack.job_type == "report"
    job = fields(r, job_id)
    assert (job["status"], job["recoveries"], job["attempts"], job["token"]) == (
        "pending",
        recoveries,
        "1",
        str(token + 1),
    )
    assert pending_ids(r) == [job_id]
    assert r.zcard(KEYS.processing) == 0
    assert r.llen(KEYS.wake) == hints + 1
    assert events(r, job_id)[-2:] == ["claimed", "released" if drained else "recovered"]
    assert len(events(r, job_id)) == 6  # enqueued, claimed, retrying, promoted, claimed, + 1


def test_release_worker_requeues_once_and_reports_it(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id, token = on_second_attempt(engine)
    with lossy.reply_lost("release_worker"):
        released = lossy.scripts.release_worker("w1", running=job_id, now_ms=NOW + 10)
    assert released == [Released(Code.DONE, job_id, "report")]
    job = fields(r, job_id)
    assert (job["status"], job["recoveries"], job["token"]) == ("pending", "1", str(token + 1))
    assert pending_ids(r) == [job_id]
    assert r.zcard(KEYS.processing) == 0
    assert len(events(r, job_id)) == 6 and events(r, job_id)[-1] == "recovered"


def test_release_past_the_cap_enters_the_dlq_once(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id, token = claimed(engine)
    assert engine.release(job_id, token, now_ms=NOW).code is Code.DONE  # the allowed loss
    job = engine.claim("w2", now_ms=NOW + 1)
    assert job is not None
    with lossy.reply_lost("release"):
        ack = lossy.scripts.release(job_id, job.token, now_ms=NOW + 10)
    assert ack == AckResult(Code.DEAD)
    assert ack.job_type == "report"
    stored = fields(r, job_id)
    assert (stored["status"], stored["recoveries"], stored["token"]) == ("dead", "2", "4")
    assert r.zrange(KEYS.dead, 0, -1, withscores=True) == [(job_id.encode(), NOW + 10)]
    assert events(r, job_id) == ["enqueued", "claimed", "recovered", "claimed", "dead"]


# -- the operator's transitions ------------------------------------------------------------------


def test_replay_requeues_a_dead_job_once(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id = dead(engine)
    with lossy.reply_lost("replay"):
        job = lossy.scripts.replay(job_id, now_ms=NOW + 10)
    assert (job.id, job.status, job.attempts, job.last_error) == (
        job_id,
        JobState.PENDING,
        0,
        None,
    )
    assert r.zcard(KEYS.dead) == 0
    assert pending_ids(r) == [job_id]
    assert seq(r) == 2, "one new place in line, not two"
    assert r.llen(KEYS.wake) == 2  # enqueue + replay
    assert r.pttl(KEYS.job(job_id)) == -1, "a replayed job no longer expires"
    assert events(r, job_id) == ["enqueued", "claimed", "dead", "replayed"]


def test_cancel_cancels_once(r: redis.Redis, engine: Scripts, lossy: LossyEngine) -> None:
    [job_id] = enqueue_pending(engine)
    with lossy.reply_lost("cancel"):
        result = lossy.scripts.cancel(job_id, now_ms=NOW + 10)
    job = result.job
    assert (job.id, job.status, job.finished_at) == (job_id, JobState.CANCELED, NOW + 10)
    assert r.zrange(KEYS.canceled, 0, -1, withscores=True) == [(job_id.encode(), NOW + 10)]
    assert r.zcard(KEYS.pending) == 0
    assert r.zcard(KEYS.pending_since) == 0
    assert events(r, job_id) == ["enqueued", "canceled"]


def test_cancel_reports_that_it_canceled(engine: Scripts, lossy: LossyEngine) -> None:
    """The gateway logs job_canceled and counts it only when `changed`: a lost reply must not
    turn this call's cancel into "it already was"."""
    [job_id] = enqueue_pending(engine)
    with lossy.reply_lost("cancel"):
        result = lossy.scripts.cancel(job_id, now_ms=NOW + 10)
    assert result.changed, "the retry answered 'already canceled' for the cancel this call did"


def test_purge_answers_success_not_not_found(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id = dead(engine)
    with lossy.reply_lost("purge"):
        # JobNotFound would mean a 404 for a 204; the type is the first call's answer.
        assert lossy.scripts.purge(job_id) == "report"
    assert job_ids(r) == set()
    assert r.zcard(KEYS.dead) == 0


def test_trim_forgets_an_expired_job_once(
    r: redis.Redis, engine: Scripts, lossy: LossyEngine
) -> None:
    job_id, token = claimed(engine)
    kept_id, kept_token = claimed(engine, worker="w2")
    engine.complete(job_id, token, now_ms=NOW)
    engine.complete(kept_id, kept_token, now_ms=NOW + 500)
    with lossy.reply_lost("trim"):
        lossy.scripts.trim(now_ms=NOW + POLICY.finished_retention_ms + 1)
    assert job_ids(r) == {kept_id}
    assert index(r, KEYS.completed) == [kept_id]


def test_trim_reports_the_job_it_forgot(engine: Scripts, lossy: LossyEngine) -> None:
    job_id, token = claimed(engine)
    engine.complete(job_id, token, now_ms=NOW)
    with lossy.reply_lost("trim"):
        result = lossy.scripts.trim(now_ms=NOW + POLICY.finished_retention_ms + 1)
    assert result == TrimResult(completed=1, canceled=0, dead=0)


def test_heartbeat_registers_the_worker_once(r: redis.Redis, lossy: LossyEngine) -> None:
    with lossy.reply_lost("heartbeat"):
        beat = lossy.scripts.heartbeat("w1", {"host": "h1", "pid": 42}, 10_000, now_ms=NOW)
    assert beat.live == 1
    assert r.zrange(KEYS.workers, 0, -1, withscores=True) == [(b"w1", NOW)]
    assert r.hgetall(KEYS.worker("w1")) == {
        b"host": b"h1",
        b"pid": b"42",
        b"last_seen": b"1700000000000",
        b"quiet": b"0",
    }


def test_a_heartbeat_whose_reply_was_lost_still_applies_the_quiet_request(
    lossy: LossyEngine,
) -> None:
    lossy.scripts.heartbeat("w1", {"host": "h1"}, 10_000, now_ms=NOW)
    lossy.scripts.quiet_host("w1", True)
    with lossy.reply_lost("heartbeat"):
        beat = lossy.scripts.heartbeat("w1", {"host": "h1"}, 10_000, now_ms=NOW + 1)
    assert beat.quiet is True


# -- the clients as configured elsewhere ----------------------------------------------------------


def test_default_redis_py_client_retries_a_lost_reply(
    r: redis.Redis, proxy: TcpProxy, lossy: LossyEngine
) -> None:
    """redis-py retries by default: the reason every script must be safe to run twice."""
    client = redis.Redis(host=proxy.host, port=proxy.port, socket_timeout=WAIT)
    lossy.scripts = Scripts(client, KEYS, POLICY)
    job_id = new_id()
    try:
        with lossy.reply_lost("enqueue"):
            result = lossy.scripts.enqueue(request(), job_id, now_ms=NOW)
    finally:
        client.close()
    assert result.created and job_ids(r) == {job_id} and seq(r) == 1


def test_production_client_retries_a_lost_reply(
    r: redis.Redis, proxy: TcpProxy, lossy: LossyEngine
) -> None:
    settings = Settings.from_env({"REDIS_URL": f"redis://{proxy.host}:{proxy.port}/0"})
    client = connect(settings, role="test")
    lossy.scripts = Scripts(client, KEYS, POLICY)
    first, second = new_id(), new_id()
    lossy.scripts.enqueue(request(), first, now_ms=NOW)
    lossy.scripts.enqueue(request(), second, now_ms=NOW)
    try:
        with lossy.reply_lost("claim"):
            job = lossy.scripts.claim("w1", now_ms=NOW)
    finally:
        client.close()
    assert job is not None and job.id == first
    assert pending_ids(r) == [second]
