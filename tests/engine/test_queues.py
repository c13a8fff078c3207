"""Named queues on a real Redis: each queue's jobs and indexes are its own.

A claim, a complete that claims the next job, cancel, replay, purge, promote and stats act on
one queue and touch only its keys; priority orders jobs inside a queue; an idempotency key
names one job whatever its queue; a batch spanning queues is created all or none.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine.engine_types import Code, IdempotencyConflict, JobNotFound
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import JobState, format_ms
from shared.read.directory import QueueDirectory
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    J6,
    T0,
    K,
    Snapshot,
    changed,
    job_id,
    pending_member,
    request,
    snapshot,
)
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader

A, B = "a", "b"
KA, KB = K.for_queue(A), K.for_queue(B)
QUEUES = ("default", A, B)


def everything(r: redis.Redis) -> Snapshot:
    """Return the state of every key of the three queues (and the global slot)."""
    state = Snapshot()
    expiring: set[str] = set()
    for queue in QUEUES:
        part = snapshot(r, K.for_queue(queue))
        state.update(part)
        expiring |= part.expiring
    state.expiring = frozenset(expiring)
    # snapshot() leaves the events streams out: they count here only at their layout names.
    streams = sum(r.exists(K.for_queue(queue).events) for queue in QUEUES)
    assert len(state) + streams == r.dbsize(), "a key outside the layout"
    return state


def keys_of(names: set[str], keys: Keys) -> set[str]:
    """Return the names that lie in one queue's slot."""
    return {name for name in names if name.startswith(keys.prefix)}


def put(scripts: Scripts, jid: str, queue: str, *, now: int = T0, **fields: object) -> str:
    """Enqueue a job of type `t` into `queue`."""
    result = scripts.enqueue(request(queue=queue, **fields), jid, now_ms=now)
    assert result.created, result
    return jid


def dead_in(scripts: Scripts, jid: str, queue: str, *, now: int = T0) -> None:
    """Run a job in `queue` to dead (one execution allowed, and it failed)."""
    put(scripts, jid, queue, now=now, max_retries=1, priority=1_000)
    claimed = scripts.claim("w1", queue=queue, now_ms=now)
    assert claimed is not None and claimed.id == jid
    assert scripts.fail(jid, claimed.token, "E: boom", queue=queue, now_ms=now).code is Code.DEAD


# --- isolation ---------------------------------------------------------------------------------


def test_enqueue_writes_only_its_own_queues_keys(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, J1, A)
    before = everything(r)

    put(scripts, J2, B, priority=3)

    after = everything(r)
    assert changed(before, after) == {KB.job(J2), KB.pending, KB.pending_since, KB.seq, KB.wake}
    # Each queue counts its own sequence: the first job of b is number 1 there.
    assert after[KB.pending] == [(pending_member(1, J2), -3)]
    assert after[KA.pending] == [(pending_member(1, J1), 0)]


def test_a_claim_never_returns_another_queues_job(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, J1, A, priority=100)  # the best job anywhere, but in a
    put(scripts, J2, B)
    before = everything(r)

    claimed = scripts.claim("w1", queue=B, now_ms=T0)

    after = everything(r)
    assert claimed is not None and (claimed.id, claimed.queue) == (J2, B)
    touched = changed(before, after)
    assert touched == keys_of(touched, KB), "the claim touched another queue's keys"
    assert scripts.claim("w1", queue=B, now_ms=T0) is None  # a still holds J1
    assert scripts.claim("w1", queue="default", now_ms=T0) is None
    assert after[KA.pending] == before[KA.pending]
    again = scripts.claim("w1", queue=A, now_ms=T0)
    assert again is not None and (again.id, again.queue) == (J1, A)


def test_complete_claims_the_next_job_from_its_own_queue_only(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, A)
    put(scripts, J2, A)
    put(scripts, J3, B, priority=100)
    first = scripts.claim("w1", queue=A, now_ms=T0)
    assert first is not None and first.id == J1

    ack = scripts.complete(J1, first.token, claim_next_for="w1", queue=A, now_ms=T0 + 1)

    assert ack.code is Code.DONE
    assert ack.next_job is not None and (ack.next_job.id, ack.next_job.queue) == (J2, A)
    # a is empty now: the fused claim finds nothing, though b has a job.
    last = scripts.complete(J2, ack.next_job.token, claim_next_for="w1", queue=A, now_ms=T0 + 2)
    assert last.code is Code.DONE and last.next_job is None
    assert r.zrange(KB.pending, 0, -1) == [pending_member(1, J3).encode()]
    assert [m for m, _ in everything(r)[KA.completed]] == [J1, J2]


def test_priority_orders_jobs_inside_a_queue_whatever_other_queues_hold(
    r: redis.Redis, scripts: Scripts
) -> None:
    for jid, priority in ((J1, 1), (J2, 10), (J3, 5), (J4, 10)):
        put(scripts, jid, A, priority=priority)
    put(scripts, J5, B, priority=1_000)
    put(scripts, J6, B, priority=-1_000)

    order_a = [scripts.claim("w1", queue=A, now_ms=T0) for _ in range(4)]
    order_b = [scripts.claim("w1", queue=B, now_ms=T0) for _ in range(2)]

    # Highest priority first, first in first out among equals (J2 before J4).
    assert [j.id for j in order_a if j] == [J2, J4, J3, J1]
    assert [j.id for j in order_b if j] == [J5, J6]
    assert scripts.claim("w1", queue=A, now_ms=T0) is None


def test_stats_count_each_queue_apart_and_sum_them(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, J1, A, now=T0 - 5_000)  # pending in a for 5 s
    put(scripts, J2, A, scheduled_at=format_ms(T0 + 60_000))
    put(scripts, J3, B, now=T0 - 1_000)
    put(scripts, J4, B, now=T0 - 1_000)
    running = scripts.claim("w1", queue=B, now_ms=T0)
    assert running is not None and running.id == J3
    dead_in(scripts, J5, "default")
    for queue in (A, B):
        scripts.register_queue(queue)

    total, _ = scripts.stats()

    assert set(total.by_queue) == set(QUEUES)
    a, b, d = (total.by_queue[q] for q in (A, B, "default"))
    assert (a.by_state[JobState.PENDING], a.by_state[JobState.SCHEDULED]) == (1, 1)
    assert (b.by_state[JobState.PENDING], b.by_state[JobState.PROCESSING]) == (1, 1)
    assert d.by_state[JobState.DEAD] == 1 and d.total == 1
    assert (a.total, b.total) == (2, 2)
    assert total.by_state[JobState.PENDING] == 2 and total.total == 5
    # Ages are read on Redis's clock (now), so only their order and rough size are fixed.
    assert a.oldest_pending_age_ms is not None and b.oldest_pending_age_ms is not None
    assert a.oldest_pending_age_ms >= b.oldest_pending_age_ms + 3_000
    assert d.oldest_pending_age_ms is None
    assert total.oldest_pending_age_ms == a.oldest_pending_age_ms


def test_stats_of_named_queues_read_only_those(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, J1, A)
    put(scripts, J2, B)

    total, _ = scripts.stats([B])

    assert list(total.by_queue) == [B]
    assert total.total == 1 and total.by_state[JobState.PENDING] == 1


def test_promote_makes_only_its_own_queues_due_jobs_claimable(
    r: redis.Redis, scripts: Scripts
) -> None:
    due = format_ms(T0 + 1_000)
    put(scripts, J1, A, scheduled_at=due)
    put(scripts, J2, B, scheduled_at=due)
    before = everything(r)

    result = scripts.promote(queue=A, now_ms=T0 + 2_000)

    after = everything(r)
    assert result.scheduled == [J1]
    touched = changed(before, after)
    assert touched == keys_of(touched, KA)
    assert after[KB.scheduled] == [(J2, T0 + 1_000)]


# --- finding a job by id --------------------------------------------------------------------


def test_a_lookup_by_id_finds_the_job_in_its_queue(r: redis.Redis, scripts: Scripts) -> None:
    directory = QueueDirectory(scripts)
    for queue in (A, B):
        directory.ensure(queue)
    in_a, in_b = new_job_id(A), new_job_id(B)  # ids that name their queue, as the gateway's
    put(scripts, in_a, A)
    put(scripts, in_b, B)

    found = directory.locator.find_job(in_b)

    assert found is not None and (found.id, found.queue, found.status) == (
        in_b,
        B,
        JobState.PENDING,
    )
    assert directory.locator.locate(in_a) == A
    assert get_job(r, K, in_b) is None  # the default queue alone does not hold it
    assert directory.locator.find_job(J3) is None and directory.locator.locate(J3) is None


def test_a_lookup_finds_a_job_of_a_queue_listed_after_the_list_was_read(
    r: redis.Redis, scripts: Scripts
) -> None:
    reader = QueueDirectory(scripts)
    assert reader.names() == ["default"]  # read once, and remembered
    writer = QueueDirectory(Scripts(r, K))  # another process
    writer.ensure("late")
    job_id = new_job_id("late")
    put(scripts, job_id, "late")

    found = reader.locator.find_job(job_id)

    assert found is not None and found.queue == "late"
    assert reader.locator.locate(job_id) == "late"
    assert reader.names() == ["default"]  # a lookup reads the id's tag, not the list


# --- cancel, replay and purge act on the job's own queue ---------------------------------------


def test_cancel_acts_in_the_queue_named_and_finds_nothing_in_another(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, B)
    before = everything(r)

    with pytest.raises(JobNotFound):
        scripts.cancel(J1, queue=A, now_ms=T0)
    assert changed(before, everything(r)) == set()

    outcome = scripts.cancel(J1, queue=B, now_ms=T0 + 1)

    after = everything(r)
    assert outcome.changed and outcome.job.queue == B
    assert changed(before, after) == {KB.job(J1), KB.pending, KB.pending_since, KB.canceled}
    assert after[KB.canceled] == [(J1, T0 + 1)]


def test_replay_returns_a_dead_job_to_pending_in_its_own_queue(
    r: redis.Redis, scripts: Scripts
) -> None:
    dead_in(scripts, J1, B)
    before = everything(r)

    with pytest.raises(JobNotFound):
        scripts.replay(J1, queue=A, now_ms=T0)
    assert changed(before, everything(r)) == set()

    replayed = scripts.replay(J1, queue=B, now_ms=T0 + 1)

    after = everything(r)
    assert (replayed.queue, replayed.status, replayed.attempts) == (B, JobState.PENDING, 0)
    touched = changed(before, after)
    assert touched == keys_of(touched, KB)
    assert KB.dead not in after and [m for m, _ in after[KB.pending_since]] == [J1]
    claimed = scripts.claim("w1", queue=B, now_ms=T0 + 2)
    assert claimed is not None and claimed.id == J1


def test_purge_deletes_in_its_own_queue_and_a_repeat_finds_the_tombstone_there(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    directory = QueueDirectory(scripts)
    directory.ensure(B)
    j1 = new_job_id(B)
    dead_in(scripts, j1, B)
    dead_in(scripts, J2, A)
    before = everything(r)

    with pytest.raises(JobNotFound):
        scripts.purge(j1, queue=A)
    assert changed(before, everything(r)) == set()

    pin_request_id("purge-1")
    assert scripts.purge(j1, queue=B) == "t"

    after = everything(r)
    assert changed(before, after) == {KB.job(j1), KB.dead, KB.tombstone(j1)}
    assert after[KA.dead] == before[KA.dead]  # a's DLQ untouched
    # The job is gone, but its tombstone says where a repeat of the call must run, and there
    # the repeat (its reply lost, the same request id) is answered as the first call was.
    assert directory.locator.locate(j1) == B
    assert directory.locator.find_job(j1) is None
    assert scripts.purge(j1, queue=B) == "t"
    with pytest.raises(JobNotFound):
        scripts.purge(j1, queue=A)


# --- idempotency keys span queues ----------------------------------------------------------


def test_an_idempotency_key_reused_for_another_queue_conflicts(
    r: redis.Redis, scripts: Scripts
) -> None:
    first = scripts.enqueue(request(queue=A), J1, idempotency_key="k", now_ms=T0)
    assert first.created
    before = everything(r)

    with pytest.raises(IdempotencyConflict) as raised:
        scripts.enqueue(request(queue=B), J2, idempotency_key="k", now_ms=T0)

    assert raised.value.job_id == J1
    assert changed(before, everything(r)) == set()  # nothing in b, the key unchanged
    again = scripts.enqueue(request(queue=A), J3, idempotency_key="k", now_ms=T0)
    assert (again.job_id, again.created) == (J1, False)
    assert r.hgetall(K.idempotency("k"))[b"queue"] == A.encode()


def test_a_repeat_of_a_keyed_request_is_answered_from_its_queue(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(queue=B), J1, idempotency_key="k", now_ms=T0)
    claimed = scripts.claim("w1", queue=B, now_ms=T0)
    assert claimed is not None

    again = scripts.enqueue(request(queue=B), J2, idempotency_key="k", now_ms=T0 + 1)

    assert (again.job_id, again.status, again.created) == (J1, JobState.PROCESSING, False)
    assert not r.exists(KB.job(J2), K.job(J2), KA.job(J2))


# --- a batch spanning queues: all or none ----------------------------------------------------


def test_a_batch_across_queues_creates_each_job_in_its_queue_in_order(
    r: redis.Redis, scripts: Scripts
) -> None:
    batch = [
        (request(queue=A, priority=1), J1),
        (request(queue=B), J2),
        (request(), J3),
        (request(queue=A, priority=2), J4),
    ]
    scripts.load()
    r.config_resetstat()

    results = scripts.enqueue_many(batch, now_ms=T0)

    # One MULTI/EXEC: Redis runs the four scripts with no other client in between, and a
    # refusal of any one as it is queued (OOM, say) aborts the whole (the next test).
    calls = {name: v["calls"] for name, v in r.info("commandstats").items()}
    assert (calls["cmdstat_multi"], calls["cmdstat_exec"], calls["cmdstat_evalsha"]) == (1, 1, 4)

    assert [(res.job_id, res.created) for res in results] == [
        (J1, True),
        (J2, True),
        (J3, True),
        (J4, True),
    ]
    state = everything(r)
    assert state[KA.pending] == [(pending_member(2, J4), -2), (pending_member(1, J1), -1)]
    assert state[KB.pending] == [(pending_member(1, J2), 0)]
    assert state[K.pending] == [(pending_member(1, J3), 0)]


def test_a_batch_across_queues_refused_by_redis_writes_nothing_in_any_queue(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, A)
    before = everything(r)
    batch = [(request(queue=q), job_id(10 + n)) for n, q in enumerate((A, B, "default", "c"))]
    r.config_set("maxmemory", 1)  # every byte is over: Redis refuses enqueue.lua (no allow-oom)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            scripts.enqueue_many(batch, now_ms=T0)
    finally:
        r.config_set("maxmemory", 0)

    after = everything(r)
    assert changed(before, after) == set()
    assert not r.keys(f"{{{K.namespace}:c}}*")
    # The same batch, once Redis has room, is created whole.
    assert all(res.created for res in scripts.enqueue_many(batch, now_ms=T0))
