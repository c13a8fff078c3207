"""shared.read.bulk: replay or purge dead jobs by id or by filter, page by page, idempotently."""

from __future__ import annotations

import threading

import pytest
import redis

from shared.engine import history
from shared.engine.engine_types import Code, WrongState
from shared.engine.scripts import Scripts
from shared.model.job_ids import tag_of
from shared.model.jobs import JobState
from shared.read.bulk import MAX_LIMIT, bulk_dead
from shared.read.listing import BadCursor
from tests.engine.conftest import T0, K, job_id, request


def dead(scripts: Scripts, jid: str, *, queue: str = "default", job_type: str = "t", at: int = T0):
    """Run a job in `queue` to dead at `at` (one execution, failed)."""
    scripts.register_queue(queue)
    # The fixed ids here all carry the tag 00000000, not their queue's (shared.model.job_ids): map
    # that tag to the queue too, as two queues whose tags collide are mapped.
    scripts.redis.sadd(K.queue_tag(tag_of(jid)), queue)
    req = request(job_type, queue=queue, max_retries=1)
    assert scripts.enqueue(req, jid, now_ms=at).created
    claimed = scripts.claim("w1", queue=queue, now_ms=at)
    assert claimed is not None and claimed.id == jid, claimed
    assert scripts.fail(jid, claimed.token, "boom", queue=queue, now_ms=at).code is Code.DEAD


def status(r: redis.Redis, jid: str, queue: str = "default") -> str | None:
    value = r.hget(K.for_queue(queue).job(jid), "status")
    return None if value is None else value.decode()


def replays(r: redis.Redis, jid: str, queue: str = "default") -> int:
    """Return how many times a job's history says it was replayed."""
    kept = history.read(r, K, jid, queue)
    assert kept is not None, jid
    return sum(1 for entry in kept.entries if entry.event == "replayed")


def test_replay_by_ids_replays_exactly_those(r: redis.Redis, scripts: Scripts) -> None:
    ids = [job_id(n) for n in range(1, 4)]
    for n, jid in enumerate(ids):
        dead(scripts, jid, at=T0 + n)

    result = bulk_dead(scripts, "replay", queues=["default"], ids=[ids[0], ids[2]])

    assert result.done == [ids[0], ids[2]]
    assert result.skipped == [] and result.next_cursor is None
    assert [status(r, jid) for jid in ids] == ["pending", "dead", "pending"]
    assert int(r.hget(K.job(ids[0]), "attempts")) == 0


def test_ids_not_dead_or_unknown_are_skipped_with_a_reason(
    r: redis.Redis, scripts: Scripts
) -> None:
    gone, waiting, unknown = job_id(1), job_id(2), job_id(3)
    dead(scripts, gone)
    assert scripts.enqueue(request(), waiting, now_ms=T0).created

    result = bulk_dead(scripts, "replay", queues=["default"], ids=[gone, waiting, unknown, gone])

    assert result.done == [gone]  # the repeated id acted on once
    assert sorted(result.skipped) == sorted(
        [(waiting, "not dead: pending"), (unknown, "not found")]
    )


def test_ids_are_found_in_whichever_listed_queue_holds_them(
    r: redis.Redis, scripts: Scripts
) -> None:
    a, b = job_id(1), job_id(2)
    dead(scripts, a, queue="alpha")
    dead(scripts, b, queue="beta")

    result = bulk_dead(scripts, "purge", queues=["alpha", "beta"], ids=[a, b])

    assert result.done == [a, b]
    assert not r.exists(K.for_queue("alpha").job(a), K.for_queue("beta").job(b))
    assert r.zcard(K.for_queue("alpha").dead) == r.zcard(K.for_queue("beta").dead) == 0


def test_repeating_a_call_by_ids_does_no_harm(r: redis.Redis, scripts: Scripts) -> None:
    ids = [job_id(n) for n in range(1, 4)]
    for jid in ids:
        dead(scripts, jid)
    assert bulk_dead(scripts, "replay", queues=["default"], ids=ids).done == ids

    again = bulk_dead(scripts, "replay", queues=["default"], ids=ids)

    assert again.done == []
    assert again.skipped == [(jid, "not dead: pending") for jid in ids]
    assert [replays(r, jid) for jid in ids] == [1, 1, 1]
    purged = bulk_dead(scripts, "purge", queues=["default"], ids=ids)
    assert purged.skipped == [(jid, "not dead: pending") for jid in ids]


def test_purge_repeated_finds_nothing(r: redis.Redis, scripts: Scripts) -> None:
    jid = job_id(1)
    dead(scripts, jid)
    assert bulk_dead(scripts, "purge", queues=["default"], ids=[jid]).done == [jid]

    again = bulk_dead(scripts, "purge", queues=["default"], ids=[jid])

    assert again.done == [] and again.skipped == [(jid, "not found")]


def test_a_filter_by_queue_and_type_acts_on_matching_dead_jobs_only(
    r: redis.Redis, scripts: Scripts
) -> None:
    seeded = {
        job_id(1): ("alpha", "x"),
        job_id(2): ("alpha", "y"),
        job_id(3): ("beta", "x"),
        job_id(4): ("alpha", "x"),
    }
    for n, (jid, (queue, job_type)) in enumerate(seeded.items()):
        dead(scripts, jid, queue=queue, job_type=job_type, at=T0 + n)

    result = bulk_dead(scripts, "replay", queues=["alpha"], job_type="x")

    assert result.done == [job_id(4), job_id(1)]  # newest death first, as the listing pages
    assert result.next_cursor is None
    assert {jid: status(r, jid, q) for jid, (q, _) in seeded.items()} == {
        job_id(1): "pending",
        job_id(2): "dead",
        job_id(3): "dead",
        job_id(4): "pending",
    }


def test_paging_a_filter_with_the_cursor_reaches_every_job_once(
    r: redis.Redis, scripts: Scripts
) -> None:
    ids = [job_id(n) for n in range(1, 12)]
    for n, jid in enumerate(ids):
        dead(scripts, jid, queue="alpha" if n % 2 else "beta", at=T0 + n)

    done: list[str] = []
    cursor, calls = None, 0
    while True:
        result = bulk_dead(scripts, "replay", queues=["alpha", "beta"], limit=3, cursor=cursor)
        assert result.skipped == []
        done += result.done
        calls += 1
        cursor = result.next_cursor
        if cursor is None:
            break
        assert calls < 10, "the walk must end"

    assert sorted(done) == sorted(ids) and len(done) == len(ids)
    assert done == list(reversed(ids))  # newest death first, across both queues
    assert calls == 4


def test_repeating_a_call_with_the_same_cursor_never_acts_twice(
    r: redis.Redis, scripts: Scripts
) -> None:
    ids = [job_id(n) for n in range(1, 8)]
    for n, jid in enumerate(ids):
        dead(scripts, jid, at=T0 + n)
    first = bulk_dead(scripts, "replay", queues=["default"], limit=2)
    second = bulk_dead(scripts, "replay", queues=["default"], limit=2, cursor=first.next_cursor)

    again = bulk_dead(scripts, "replay", queues=["default"], limit=2, cursor=first.next_cursor)

    # The same position: the next dead jobs after it, none of those already replayed.
    assert set(again.done).isdisjoint(first.done + second.done)
    assert again.done == [ids[2], ids[1]]
    assert all(replays(r, jid) == 1 for jid in first.done + second.done + again.done)


def test_a_bulk_walk_racing_single_replays_replays_each_job_exactly_once(
    r: redis.Redis, scripts: Scripts
) -> None:
    ids = [job_id(n) for n in range(1, 201)]
    for n, jid in enumerate(ids):
        dead(scripts, jid, at=T0 + n)
    single: list[str] = []

    def replay_one_by_one() -> None:
        # Its own client: redis-py's connection pool is shared, a Scripts is per thread here.
        other = Scripts(redis.Redis(connection_pool=r.connection_pool), K, scripts.policy)
        for jid in ids[::-1][::3] + ids[::7]:
            try:
                other.replay(jid)
            except WrongState:  # already replayed by the bulk walk
                continue
            single.append(jid)

    racer = threading.Thread(target=replay_one_by_one)
    racer.start()
    done: list[str] = []
    skipped: list[str] = []
    cursor = None
    for _ in range(100):
        result = bulk_dead(scripts, "replay", queues=["default"], limit=7, cursor=cursor)
        done += result.done
        skipped += [jid for jid, reason in result.skipped if reason == "not dead: pending"]
        cursor = result.next_cursor
        if cursor is None:
            break
    racer.join(timeout=30)
    assert not racer.is_alive()

    assert set(done).isdisjoint(single)
    assert set(done) | set(single) == set(ids)
    assert all(replays(r, jid) == 1 for jid in ids)
    assert r.zcard(K.dead) == 0
    assert set(skipped) <= set(single)


def test_bounds_and_a_foreign_cursor_are_refused(scripts: Scripts) -> None:
    with pytest.raises(ValueError, match="at most 1000 ids"):
        bulk_dead(scripts, "replay", queues=["default"], ids=[job_id(1)] * (MAX_LIMIT + 1))
    with pytest.raises(ValueError, match="limit must be"):
        bulk_dead(scripts, "purge", queues=["default"], limit=MAX_LIMIT + 1)
    with pytest.raises(ValueError, match="action"):
        bulk_dead(scripts, "delete", queues=["default"])  # type: ignore[arg-type]
    with pytest.raises(BadCursor):
        bulk_dead(scripts, "replay", queues=["default"], cursor="nope")


def test_a_bulk_replay_leaves_the_job_as_a_single_replay_would(
    r: redis.Redis, scripts: Scripts
) -> None:
    a, b = job_id(1), job_id(2)
    dead(scripts, a)
    dead(scripts, b)
    scripts.replay(a, now_ms=T0 + 5)
    bulk_dead(scripts, "replay", queues=["default"], ids=[b])

    fields = ("status", "attempts", "recoveries", "last_error", "priority")
    assert r.hmget(K.job(a), *fields) == r.hmget(K.job(b), *fields)
    assert status(r, b) == str(JobState.PENDING)


def test_a_bulk_call_after_redis_lost_its_scripts_loads_them_and_acts_once(
    r: redis.Redis, scripts: Scripts
) -> None:
    ids = [job_id(n) for n in range(1, 4)]
    for jid in ids:
        dead(scripts, jid)
    r.script_flush()  # a restart or failover empties the cache: every EVALSHA answers NOSCRIPT

    result = bulk_dead(scripts, "replay", queues=["default"], ids=ids)

    assert result.done == ids and result.skipped == []
    assert [replays(r, jid) for jid in ids] == [1, 1, 1]


def test_a_pipeline_run_again_with_the_same_request_ids_answers_as_the_first_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    # What _each does when NOSCRIPT cut a pipeline short after some calls ran: run it again.
    replayed, purged = job_id(1), job_id(2)
    dead(scripts, replayed)
    dead(scripts, purged)
    replay = [{**scripts._replay_names(replayed, "default", None), "request_id": "req-1"}]
    purge = [{**scripts._purge_names(purged, "default"), "request_id": "req-2"}]

    first = scripts._each("replay", replay), scripts._each("purge", purge)
    again = scripts._each("replay", replay), scripts._each("purge", purge)

    assert [reply[0] for reply in first[0] + first[1]] == [Code.DONE, Code.DONE]
    assert [reply[0] for reply in again[0] + again[1]] == [Code.DONE, Code.DONE]
    assert replays(r, replayed) == 1


def test_bulk_actions_write_one_event_per_job(r: redis.Redis, scripts: Scripts) -> None:
    ids = [job_id(n) for n in range(1, 5)]
    for n, jid in enumerate(ids):
        dead(scripts, jid, at=T0 + n)
    before = r.xlen(K.events)

    bulk_dead(scripts, "replay", queues=["default"], ids=ids[:2])
    bulk_dead(scripts, "purge", queues=["default"], ids=ids[2:])

    entries = r.xrange(K.events)[before:]
    written = [(fields[b"e"].decode(), fields[b"j"].decode()) for _, fields in entries]
    assert written == [("replayed", ids[0]), ("replayed", ids[1])] + [
        ("purged", jid) for jid in ids[2:]
    ]
