"""reserve_batch.lua and Scripts.enqueue_many with an idempotency key: a batch sent again with
its key is answered with the jobs it made, never made twice, in whichever queues they are."""

from __future__ import annotations

import pytest
import redis

from shared.engine.engine_types import Code, EnqueueResult, IdempotencyConflict
from shared.engine.scripts import Scripts, batch_digest
from shared.model.jobs import EnqueueRequest, JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    POLICY,
    T0,
    K,
    Snapshot,
    assert_ttl,
    changed,
    claim,
    raw_script,
    request,
    snapshot,
)

A = "a"
KA = K.for_queue(A)
KEY = "batch-7"


def both_queues(r: redis.Redis) -> Snapshot:
    """Return the state of every key of the default queue, queue `a` and the global slot."""
    state = snapshot(r)
    part = snapshot(r, KA)
    state.update(part)
    state.expiring = state.expiring | part.expiring
    return state


def batch(first: str = J1, second: str = J2) -> list[tuple[EnqueueRequest, str]]:
    """Return a batch of two jobs in two queues, under the given ids."""
    return [(request(priority=1), first), (request("pdf", queue=A, payload={"n": 1}), second)]


def created(*ids: str, status: JobState = JobState.PENDING) -> list[tuple[str, JobState, bool]]:
    """Return what enqueue_many answers for `ids`, comparable with `summary()`."""
    return [(job_id, status, False) for job_id in ids]


def summary(results: list[EnqueueResult]) -> list[tuple[str, JobState, bool]]:
    return [(result.job_id, result.status, result.created) for result in results]


def test_a_batch_with_a_key_reserves_its_jobs_and_queues_for_the_key_ttl(
    r: redis.Redis, scripts: Scripts
) -> None:
    before = both_queues(r)

    results = scripts.enqueue_many(batch(), idempotency_key=KEY, now_ms=T0)

    after = both_queues(r)
    idem = K.idempotency(KEY)
    assert [(res.job_id, res.created) for res in results] == [(J1, True), (J2, True)]
    assert changed(before, after) == {
        K.job(J1),
        K.pending,
        K.pending_since,
        K.seq,
        K.wake,
        KA.job(J2),
        KA.pending,
        KA.pending_since,
        KA.seq,
        KA.wake,
        idem,
    }
    assert after[idem] == {
        "digest": batch_digest([req for req, _ in batch()]),
        "job_id": J1,
        "jobs": f"{J1} default,{J2} {A}",
    }
    assert_ttl(r, idem, POLICY.idempotency_ttl_ms)


def test_the_same_batch_again_is_answered_with_the_first_ids_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue_many(batch(), idempotency_key=KEY, now_ms=T0)
    claim(scripts, J1, now=T0 + 1)
    before = both_queues(r)

    # New ids, as the gateway draws for every request; the same jobs in the same order.
    again = scripts.enqueue_many(batch(J3, J4), idempotency_key=KEY, now_ms=T0 + 2)

    assert again == [
        EnqueueResult(J1, JobState.PROCESSING, created=False, created_at_ms=T0),
        EnqueueResult(J2, JobState.PENDING, created=False, created_at_ms=T0),
    ]
    assert changed(before, both_queues(r)) == set()


@pytest.mark.parametrize(
    "other",
    [
        # the same jobs in another order
        [(request("pdf", queue=A, payload={"n": 1}), J3), (request(priority=1), J4)],
        # one job fewer
        [(request(priority=1), J3)],
        # one field of one job
        [(request(priority=1), J3), (request("pdf", queue=A, payload={"n": 2}), J4)],
        # one job's queue
        [(request(priority=1), J3), (request("pdf", payload={"n": 1}), J4)],
    ],
    ids=["reordered", "shorter", "payload", "queue"],
)
def test_a_different_batch_with_the_key_conflicts_naming_the_first_job(
    r: redis.Redis, scripts: Scripts, other: list[tuple[EnqueueRequest, str]]
) -> None:
    scripts.enqueue_many(batch(), idempotency_key=KEY, now_ms=T0)
    before = both_queues(r)

    with pytest.raises(IdempotencyConflict) as raised:
        scripts.enqueue_many(other, idempotency_key=KEY, now_ms=T0 + 1)

    assert raised.value.job_id == J1
    assert changed(before, both_queues(r)) == set()


def test_a_batch_reserved_by_a_producer_that_died_is_created_once_under_the_reserved_ids(
    r: redis.Redis, scripts: Scripts
) -> None:
    # The producer reserved the key, then died before its MULTI/EXEC: no job exists yet.
    scripts._reserve_batch(batch(), KEY)
    assert r.exists(K.job(J1), KA.job(J2)) == 0

    first = scripts.enqueue_many(batch(J3, J4), idempotency_key=KEY, now_ms=T0)
    repeat = scripts.enqueue_many(batch(J5, J5), idempotency_key=KEY, now_ms=T0 + 1)

    # Created by the first repeat under the reserved ids; only the request that reserved the
    # key would have answered "created".
    assert summary(first) == created(J1, J2)
    assert summary(repeat) == created(J1, J2)
    assert [res.created_at_ms for res in repeat] == [T0, T0]
    assert (r.zcard(K.pending), r.zcard(KA.pending)) == (1, 1)
    assert r.exists(K.job(J3), KA.job(J4), K.job(J5), KA.job(J5)) == 0


def test_a_batch_whose_job_was_deleted_creates_it_again_under_its_id(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue_many(batch(), idempotency_key=KEY, now_ms=T0)
    r.delete(K.job(J1))  # as retention or a purge would (its index entries aside)

    again = scripts.enqueue_many(batch(J3, J4), idempotency_key=KEY, now_ms=T0 + 5)

    assert [(res.job_id, res.created_at_ms) for res in again] == [(J1, T0 + 5), (J2, T0)]
    assert r.exists(K.job(J1)) == 1 and r.exists(K.job(J3)) == 0


def test_a_key_used_for_a_single_enqueue_conflicts_with_a_batch_of_that_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    body = request(priority=1)
    scripts.enqueue(body, J1, idempotency_key=KEY, now_ms=T0)
    before = both_queues(r)

    # The very same job as a batch of one: a different request, never a false match.
    with pytest.raises(IdempotencyConflict) as raised:
        scripts.enqueue_many([(body, J2)], idempotency_key=KEY, now_ms=T0 + 1)

    assert raised.value.job_id == J1
    assert changed(before, both_queues(r)) == set()


def test_a_key_used_for_a_batch_conflicts_with_a_single_enqueue_naming_its_first_job(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue_many([(request(priority=1), J1)], idempotency_key=KEY, now_ms=T0)
    before = both_queues(r)

    with pytest.raises(IdempotencyConflict) as raised:
        scripts.enqueue(request(priority=1), J2, idempotency_key=KEY, now_ms=T0 + 1)

    assert raised.value.job_id == J1
    assert changed(before, both_queues(r)) == set()


def test_reserve_batch_repeated_with_the_same_ids_answers_done_again(r: redis.Redis) -> None:
    # redis-py resends a call whose reply was lost: the same ids are this request's own.
    reserve = raw_script(r, "reserve_batch")
    jobs = f"{J1} default,{J2} {A}"
    args = ["d" * 64, jobs, POLICY.idempotency_ttl_ms]

    first = reserve(keys=[K.idempotency(KEY)], args=args)
    again = reserve(keys=[K.idempotency(KEY)], args=args)
    other_ids = reserve(keys=[K.idempotency(KEY)], args=["d" * 64, f"{J3} default,{J4} {A}", 1])

    assert first == again == [Code.DONE, jobs.encode()]
    assert other_ids == [Code.DUPLICATE, jobs.encode()]
    assert r.pttl(K.idempotency(KEY)) > 1  # a duplicate does not shorten the key's life


def test_the_batch_digest_is_the_same_for_the_same_meaning_and_not_a_single_ones() -> None:
    spelled = [request(payload={"a": 1, "b": 2}), request("x", queue=A)]
    respelled = [request(payload={"b": 2, "a": 1}), request("x", queue=A)]

    assert batch_digest(spelled) == batch_digest(respelled)
    assert batch_digest(spelled) != batch_digest(spelled[::-1])
    assert batch_digest(spelled[:1]) != batch_digest(spelled)
