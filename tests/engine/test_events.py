"""Events (docs/EVENTS.md): each transition script appends its own event to the
queue's stream (heartbeat to the hosts' stream), with the fields of the contract and nothing
else; none with events off; the stream stays within its cap. The engine fixtures lay events out
as a Redis Cluster does (one stream per queue: tests.support.slots); the last tests run the
one-Redis layout, one stream for every queue, each entry naming its queue.

Each test empties the stream just before the call it checks, so the stream then holds exactly
that call's events.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Code, Policy, QueuePaused
from shared.engine.history import Actor
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    POLICY,
    T0,
    K,
    claim,
    enqueue,
    fail_to_retrying,
    kill,
    request,
    start,
)

TTL = 15_000
# Every field an event may carry (docs/EVENTS.md): never a payload, result or traceback.
CONTRACT_FIELDS = {"q", "e", "j", "t", "a", "w", "h", "r"}


def events(r: redis.Redis, key: str = K.events) -> list[dict[str, str]]:
    """Return a stream's entries, oldest first, as {field: value} (ids left out), each checked
    to name the queue of its stream (none in the hosts' stream) and then without that name."""
    queue = re.match(r"\{[^:}]+:([^}]+)\}", key)
    entries = []
    for _, fields in r.xrange(key, "-", "+"):
        entry = {f.decode(): v.decode() for f, v in fields.items()}
        assert entry.pop("q", None) == (queue[1] if queue else None), entry
        entries.append(entry)
    return entries


def emptied(r: redis.Redis, *keys: str) -> None:
    """Empty the streams, so they then hold only the next call's events."""
    r.delete(*(keys or (K.events,)))


def job_event(event: str, jid: str, job_type: str = "t", **more: str) -> dict[str, str]:
    return {"e": event, "j": jid, "t": job_type, **more}


# --- keys ------------------------------------------------------------------------------------


def test_the_queue_stream_is_in_the_queue_slot_and_the_hosts_stream_in_the_global_one() -> None:
    keys = Keys("ns", "mail")
    assert keys.events == "{ns:mail}:v2:events"
    assert keys.fleet_events == "{ns}:v2:events"


@pytest.mark.parametrize(("on", "cap"), [(True, 500), (False, 0)])
def test_policy_takes_the_cap_from_the_settings(on: bool, cap: int) -> None:
    settings = SimpleNamespace(
        visibility_timeout=30,
        retry_base_delay=2,
        retry_max_delay=60,
        retry_jitter=0,
        max_recoveries=5,
        finished_retention=60,
        dlq_max_age=60,
        dlq_max_jobs=10,
        finished_max_jobs=10,
        idempotency_ttl=60,
        events=on,
        events_max=500,
        wait_replicas=0,
        wait_timeout=0.5,
    )
    assert Policy.from_settings(settings).events_cap == cap


# --- job events ------------------------------------------------------------------------------


def test_enqueue_writes_enqueued(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    assert events(r) == [job_event("enqueued", J1)]


def test_enqueue_for_later_writes_scheduled(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1, scheduled_at="2026-01-01T00:01:00Z")
    assert events(r) == [job_event("scheduled", J1)]


def test_a_repeated_enqueue_writes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    emptied(r)
    scripts.enqueue(request(), J1, now_ms=T0)
    assert events(r) == []


def test_a_batch_writes_one_event_per_job_in_order_each_in_its_queue(
    r: redis.Redis, scripts: Scripts
) -> None:
    batch = [(request(), J1), (request("pdf", queue="a"), J2), (request("b"), J3)]
    scripts.enqueue_many(batch, now_ms=T0)
    assert events(r) == [job_event("enqueued", J1), job_event("enqueued", J3, "b")]
    assert events(r, K.for_queue("a").events) == [job_event("enqueued", J2, "pdf")]


def test_claim_writes_claimed_with_attempt_and_worker(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    emptied(r)
    claim(scripts, J1, worker="w7")
    assert events(r) == [job_event("claimed", J1, a="1", w="w7")]


def test_a_repeated_claim_writes_nothing(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    enqueue(scripts, J1)
    pin_request_id("req-1")
    claim(scripts, J1)
    emptied(r)
    claim(scripts, J1)  # the same request id: the job it already claimed
    assert events(r) == []


def test_a_claim_that_takes_nothing_writes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    assert scripts.claim("w1", now_ms=T0) is None  # empty
    enqueue(scripts, J1, job_type="pdf")
    scripts.pause_queue("default", now_ms=T0)
    emptied(r)
    with pytest.raises(QueuePaused):
        scripts.claim("w1", now_ms=T0)
    scripts.resume_queue("default")
    emptied(r)
    scripts.claim("w1", runnable=frozenset({"email"}), now_ms=T0)  # not runnable
    assert events(r) == []


def test_complete_writes_completed_with_the_worker(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1, worker="w2").token
    emptied(r)
    assert scripts.complete(J1, token, now_ms=T0).code is Code.DONE
    assert events(r) == [job_event("completed", J1, w="w2")]


def test_complete_that_claims_writes_completed_then_claimed(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    enqueue(scripts, J2, job_type="b")
    emptied(r)
    result = scripts.complete(J1, token, claim_next_for="w1", now_ms=T0)
    assert result.next_job is not None
    assert events(r) == [
        job_event("completed", J1, w="w1"),
        job_event("claimed", J2, "b", a="1", w="w1"),
    ]


def test_a_repeated_complete_writes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    scripts.complete(J1, token, now_ms=T0)
    emptied(r)
    assert scripts.complete(J1, token, now_ms=T0).code is Code.DONE
    assert events(r) == []


def test_fail_writes_retrying_then_dead_with_attempt_and_worker(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, worker="w3", max_retries=2).token
    emptied(r)
    due = scripts.fail(J1, token, "E: first", traceback="tb", now_ms=T0).next_retry_at
    assert events(r) == [job_event("retrying", J1, a="1", w="w3")]
    assert due is not None
    scripts.promote(now_ms=due)
    token = claim(scripts, J1, worker="w4", now=due).token
    emptied(r)
    assert scripts.fail(J1, token, "E: again", now_ms=due).code is Code.DEAD
    assert events(r) == [job_event("dead", J1, a="2", w="w4")]
    emptied(r)
    scripts.fail(J1, token, "E: again", now_ms=due)  # a repeat
    assert events(r) == []


def test_promote_writes_promoted_for_each_due_job(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1, scheduled_at="2026-01-01T00:00:01Z")
    due = fail_to_retrying(scripts, J2, job_type="b").next_retry_at
    assert due == T0 + 1_000  # both due at once: promoted in job id order
    emptied(r)
    scripts.promote(now_ms=due)
    assert events(r) == [job_event("promoted", J1), job_event("promoted", J2, "b")]


def test_recover_writes_recovered_and_dead_past_the_cap(r: redis.Redis, scripts: Scripts) -> None:
    now = T0
    start(scripts, J1, worker="w5")
    for _ in range(POLICY.max_recoveries):
        now += POLICY.lease_ms + 1
        emptied(r)
        scripts.recover(now_ms=now)
        assert events(r) == [job_event("recovered", J1)]
        claim(scripts, J1, worker="w5", now=now)
    emptied(r)
    scripts.recover(now_ms=now + POLICY.lease_ms + 1)
    # The lost execution's attempt (each loss gave its attempt back: always the first).
    assert events(r) == [job_event("dead", J1, a="1", w="w5")]


@pytest.mark.parametrize(("drained", "event"), [(False, "recovered"), (True, "released")])
def test_release_writes_recovered_for_a_crash_and_released_for_a_drain(
    r: redis.Redis, scripts: Scripts, drained: bool, event: str
) -> None:
    token = start(scripts, J1).token
    emptied(r)
    scripts.release(J1, token, drained=drained, actor=Actor.WORKER, now_ms=T0)
    assert events(r) == [job_event(event, J1)]


def test_release_worker_writes_an_event_per_job_it_releases(
    r: redis.Redis, scripts: Scripts
) -> None:
    start(scripts, J1, worker="gone")
    emptied(r)
    released = scripts.release_worker("gone", running=J1, now_ms=T0)
    assert [item.job_id for item in released] == [J1]
    assert events(r) == [job_event("recovered", J1)]
    emptied(r)
    assert scripts.release_worker("gone", running=J1, now_ms=T0) == []
    assert events(r) == []


def test_replay_cancel_and_purge_write_their_events_once(r: redis.Redis, scripts: Scripts) -> None:
    kill(scripts, J1)
    emptied(r)
    scripts.replay(J1, now_ms=T0)
    assert events(r) == [job_event("replayed", J1)]

    emptied(r)
    scripts.cancel(J1, now_ms=T0)
    scripts.cancel(J1, now_ms=T0)  # already canceled: changes nothing
    assert events(r) == [job_event("canceled", J1)]

    kill(scripts, J2, job_type="b")
    emptied(r)
    assert scripts.purge(J2) == "b"
    assert events(r) == [job_event("purged", J2, "b")]


def test_pause_and_resume_write_queue_events_when_they_change_it(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.pause_queue("default", now_ms=T0)
    scripts.pause_queue("default", now_ms=T0 + 1)
    scripts.resume_queue("default")
    scripts.resume_queue("default")
    assert events(r) == [{"e": "queue_paused"}, {"e": "queue_resumed"}]


def test_no_event_carries_a_payload_result_error_or_traceback(
    r: redis.Redis, scripts: Scripts
) -> None:
    secret = "s3cret-value"
    token = start(scripts, J1, payload={"key": secret}, max_retries=1).token
    scripts.fail(J1, token, f"E: {secret}", traceback=secret, now_ms=T0)
    scripts.replay(J1, now_ms=T0)
    token = claim(scripts, J1).token
    scripts.complete(J1, token, f'"{secret}"', now_ms=T0)
    written = events(r)
    assert [e["e"] for e in written] == [
        "enqueued",
        "claimed",
        "dead",
        "replayed",
        "claimed",
        "completed",
    ]
    for entry in written:
        assert set(entry) <= CONTRACT_FIELDS
        assert secret not in "".join(entry.values())


# --- host events -----------------------------------------------------------------------------


def host_events(r: redis.Redis) -> list[dict[str, str]]:
    return events(r, K.fleet_events)


def test_heartbeat_writes_joined_once_then_left(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("h1", {"pid": 1}, TTL, now_ms=T0)
    scripts.heartbeat("h1", {"pid": 1}, TTL, now_ms=T0 + 1_000)
    scripts.heartbeat("h1", {}, TTL, leaving=True, now_ms=T0 + 2_000)
    scripts.heartbeat("h1", {}, TTL, leaving=True, now_ms=T0 + 2_001)  # a repeat
    assert host_events(r) == [
        {"e": "worker_joined", "h": "h1"},
        {"e": "worker_left", "h": "h1"},
    ]


def test_heartbeat_names_each_host_the_registry_forgets(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("old1", {}, TTL, now_ms=T0)
    scripts.heartbeat("old2", {}, TTL, now_ms=T0 + 1)
    scripts.heartbeat("edge", {}, TTL, now_ms=T0 + 2)
    emptied(r, K.fleet_events)
    scripts.heartbeat("edge", {}, TTL, now_ms=T0 + 2 + TTL)  # old1, old2 silent past the TTL
    assert host_events(r) == [
        {"e": "worker_left", "h": "old1"},
        {"e": "worker_left", "h": "old2"},
    ]
    assert [m.decode() for m in r.zrange(K.workers, 0, -1)] == ["edge"]


def test_heartbeat_writes_quiet_and_resumed_when_the_state_changes(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.heartbeat("h1", {}, TTL, now_ms=T0)
    emptied(r, K.fleet_events)
    scripts.heartbeat("h1", {}, TTL, quiet=True, quiet_by_signal=True, now_ms=T0 + 1)
    scripts.heartbeat("h1", {}, TTL, quiet=True, now_ms=T0 + 2)
    assert scripts.quiet_host("h1", False) is True  # applied at the next heartbeat
    assert host_events(r) == [{"e": "worker_quiet", "h": "h1"}]
    assert scripts.heartbeat("h1", {}, TTL, quiet=True, now_ms=T0 + 3).quiet is False
    assert host_events(r) == [
        {"e": "worker_quiet", "h": "h1"},
        {"e": "worker_resumed", "h": "h1"},
    ]


def test_a_host_that_joins_quiet_says_so(r: redis.Redis, scripts: Scripts) -> None:
    scripts.heartbeat("h1", {}, TTL, quiet=True, now_ms=T0)
    assert host_events(r) == [
        {"e": "worker_joined", "h": "h1"},
        {"e": "worker_quiet", "h": "h1"},
    ]


# --- off, and the cap ------------------------------------------------------------------------


def test_with_events_off_no_script_writes_an_event(
    r: redis.Redis, make_scripts: Callable[..., Scripts]
) -> None:
    """Every script that writes events, each down the path that writes one when they are on."""
    off = make_scripts(events_cap=0)
    off.heartbeat("h1", {}, TTL, now_ms=T0)  # joined
    off.heartbeat("h2", {}, TTL, quiet=True, now_ms=T0)  # joined quiet
    off.heartbeat("h1", {}, TTL, quiet=True, quiet_by_signal=True, now_ms=T0 + TTL + 1)  # h2 gone
    token = start(off, J1, max_retries=2).token
    due = off.fail(J1, token, "E: x", now_ms=T0).next_retry_at  # retrying
    enqueue(off, J3, scheduled_at="2026-01-01T00:00:01Z")  # scheduled
    assert due == T0 + 1_000
    off.promote(now_ms=due)  # promoted, both
    claim(off, J1, now=due)
    off.recover(now_ms=due + POLICY.lease_ms + 1)  # recovered
    token = claim(off, J1, now=due).token
    off.release(J1, token, now_ms=due)  # recovered
    claim(off, J1, worker="w2", now=due)
    # released (a third loss would kill it)
    off.release_worker("w2", running=J1, drained=True, now_ms=due)
    token = claim(off, J1, now=due).token
    after = off.complete(J1, token, claim_next_for="w1", now_ms=due)  # completed, claimed
    assert after.next_job is not None and after.next_job.id == J3
    kill(off, J2)  # dead
    off.replay(J2, now_ms=T0)
    off.cancel(J2, now_ms=T0)
    kill(off, J4)
    off.purge(J4)
    off.enqueue_many([(request(), J5)], now_ms=T0)
    off.pause_queue("default", now_ms=T0)
    off.resume_queue("default")
    off.heartbeat("h1", {}, TTL, leaving=True, now_ms=T0 + TTL + 2)  # left
    assert [k for k in r.scan_iter() if r.type(k) == b"stream"] == []


def test_the_stream_stays_within_its_cap(
    r: redis.Redis, make_scripts: Callable[..., Scripts]
) -> None:
    cap = 150
    capped = make_scripts(events_cap=cap)
    ids = [f"00000000-0000-4000-8000-{n:012d}" for n in range(1, 1_001)]
    for start_at in range(0, len(ids), 100):
        capped.enqueue_many([(request(), jid) for jid in ids[start_at : start_at + 100]])
    # MAXLEN ~ trims whole macro nodes (stream-node-max-entries, 100 by default): the stream
    # keeps at least the cap and at most one node more.
    assert cap <= r.xlen(K.events) <= cap + 100
    assert events(r)[-1] == job_event("enqueued", ids[-1])


def test_an_older_caller_that_passes_no_events_key_writes_none(
    r: redis.Redis, scripts: Scripts
) -> None:
    """A script called with the keys and arguments it took before events existed still works, and
    writes no event (the cap argument is absent)."""
    raw: Any = r.register_script(scripts.transport.sources["pause_queue"])
    assert raw(keys=[K.paused], args=[T0])[2] == 1
    assert not r.exists(K.events)


# --- one Redis: one stream for every queue ---------------------------------------------------


def test_on_one_redis_every_queue_writes_the_one_stream_naming_its_queue(r: redis.Redis) -> None:
    one = Scripts(r, K, POLICY)  # no slot guard: one Redis enforces none
    one.enqueue(request(), J1, now_ms=T0)
    one.enqueue(request("pdf", queue="a"), J2, now_ms=T0)
    one.pause_queue("a", now_ms=T0)
    one.heartbeat("h1", {}, TTL, now_ms=T0)
    assert [k.decode() for k in r.scan_iter() if r.type(k) == b"stream"] == [K.fleet_events]
    entries = [
        {f.decode(): v.decode() for f, v in fields.items()}
        for _, fields in r.xrange(K.fleet_events)
    ]
    assert entries == [
        {"q": "default", **job_event("enqueued", J1)},
        {"q": "a", **job_event("enqueued", J2, "pdf")},
        {"q": "a", "e": "queue_paused"},
        {"e": "worker_joined", "h": "h1"},
    ]


def test_on_one_redis_the_cap_bounds_every_queues_events_together(r: redis.Redis) -> None:
    cap = 150
    one = Scripts(r, K, dataclasses.replace(POLICY, events_cap=cap))
    for n in range(1, 1_001):  # 1,000 queues, a job each
        one.enqueue(request(queue=f"q{n}"), f"00000000-0000-4000-8000-{n:012d}", now_ms=T0)
    assert cap <= r.xlen(K.fleet_events) <= cap + 100
    assert not any(r.exists(K.for_queue(f"q{n}").events) for n in range(1, 1_001))
