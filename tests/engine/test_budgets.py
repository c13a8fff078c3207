"""Redis commands per transition, counted by the server itself (INFO commandstats).

The hot path's cost is its Redis commands: each one is Redis CPU, which two worker processes
already saturate on two cores. Every budget is checked on the production path: no `now_ms`
override, so Redis TIME is counted where it runs in production. A test that fails prints the
per-command breakdown, so the command that crept in is named.

Live events: every test runs twice, with events on and off. The constants below are the
budgets with events off; with events on each budget grows by exactly the events
the call writes (one XADD each: `budget()`), and the XADDs are counted apart, so an event that
costs more than its XADD fails here. The job's own transitions (enqueue, claim, complete, fail)
take their time from their first event's entry id (common.lua, `stamped`): with events on they
read no TIME, so their event costs them nothing but its XADD in the TIME's place
(`stamped=True`). The one exception is an enqueue with an absolute scheduled_at: whether it is
`scheduled` or `enqueued` is a comparison with now, made before the event is named, so it
reads TIME first (its event then costs its XADD).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Code, NotRunnable, QueuePaused
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_client_id
from tests.engine.conftest import J1, J2, J3, J4, job_id, request
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.tools import commands_caused

# The hot path: a claim, an enqueue. ENQUEUE with events off: HMGET, TIME, INCR, ZADD ×2, LPUSH,
# HSET; with events on the XADD takes the TIME's place (its entry id is the time), so 7 too.
CLAIM = 8
ENQUEUE = 7
# Complete-and-claim-next includes the pause check. A claim must not take a job from a paused queue, not
# even the claim a complete makes for the worker's next job, and only a read inside the script
# is exact. claim.lua reads the flag in the MGET that already read its repeat pointer (free);
# complete.lua reads no key of the queue's that could carry it, so it spends one EXISTS,
# and only when it claims (an MGET, which reads the queue's limits with the flag).
COMPLETE_AND_CLAIM = 12
# An Idempotency-Key costs a second script call. The key spans queues and lives in the global slot,
# so reserve.lua (HMGET, HSET, PEXPIRE) runs apart from the enqueue in the queue's slot, which
# now reads the job's own hash (HMGET) where it used to read the key's.
ENQUEUE_IDEMPOTENT = 10
# Fail includes one HINCRBY (the retry path 7, the dead path 8): the queue's
# count of failures per second, for "failed in the last minute" (GET /queues). No key fail.lua
# already writes can count failures, and a count derived afterwards (the dead index by time)
# would miss every retried failure.
FAIL = 8
# Routing: a claim that leaves the best job to a worker that runs its type puts it
# back (ZADD) and gives its wake-up hint back (LPUSH): MGET, ZPOPMIN, HMGET, ZADD, LPUSH. The
# claims that do take a job carry the worker's types at no extra command. A complete whose
# next job is refused pays the pause check too (EXISTS, as COMPLETE_AND_CLAIM).
CLAIM_REFUSED = 5
COMPLETE_AND_REFUSE = 11
# Cancelling a running job: the request is HMGET, TIME, HSET and the reply's HGETALL;
# the end is HMGET, TIME, ZREM, HSET, HDEL, ZADD, PEXPIRE. Renewals learn of a request in the
# HMGET they already make, and fail reads the flag there too: neither costs a command more.
CANCEL_REQUEST = 4
CANCEL_RUNNING = 7
RENEW_TWO = 5  # TIME, then HMGET and ZADD per job
RUNNABLE = frozenset({"t", "pdf"})
EVENTS_CAP = 1_000


def commands_of(r: redis.Redis, call: Callable[[], Any]) -> Counter[str]:
    """Run `call` and return the Redis commands it caused, by name (EVALSHA itself excluded)."""
    counts = commands_caused(r, call)
    counts.pop("evalsha", None)  # the script call itself
    return counts


def assert_within(counts: Counter[str], budget: int) -> None:
    total = sum(counts.values())
    breakdown = ", ".join(f"{name} {n}" for name, n in sorted(counts.items()))
    assert total <= budget, f"{total} Redis commands, budget {budget}: {breakdown}"


@pytest.fixture(params=["events-on", "events-off"])
def engine(request: pytest.FixtureRequest, make_scripts: Callable[..., Scripts]) -> Scripts:
    """The engine with every script already in Redis's cache (no SCRIPT LOAD counted), with
    events on (the default) or off (TASKFORGE_EVENTS=off: a cap of 0)."""
    return make_scripts(events_cap=EVENTS_CAP if request.param == "events-on" else 0)


def budget(
    engine: Scripts, counts: Counter[str], events_off: int, events: int, *, stamped: bool = False
) -> int:
    """Return the budget of a call that writes `events` events: `events_off` plus one XADD per
    event when events are on. Asserts the XADDs themselves: exactly that many, or none.

    `stamped`: the call's time is its first event's entry id when events are on, so it reads no
    TIME (asserted) and its budget is one command less than events_off + events.
    """
    on = engine.policy.events_cap > 0
    assert counts["xadd"] == (events if on else 0), counts
    if not on:
        return events_off
    if stamped and events:
        assert counts["time"] == 0, counts
        return events_off + events - 1
    return events_off + events


def claimed(engine: Scripts, jid: str) -> int:
    engine.enqueue(request(), jid)
    job = engine.claim("w1")
    assert job is not None and job.id == jid
    return job.token


def test_enqueue_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    counts = commands_of(r, lambda: engine.enqueue(request(), J1))
    assert_within(counts, budget(engine, counts, ENQUEUE, 1, stamped=True))
    # Redis's clock, not the caller's: TIME with events off, else the event's entry id.
    assert counts["time"] == (0 if engine.policy.events_cap else 1)


def test_enqueue_with_an_idempotency_key_is_within_its_budget(
    r: redis.Redis, engine: Scripts
) -> None:
    counts = commands_of(r, lambda: engine.enqueue(request(), J1, idempotency_key="k1"))
    assert_within(counts, budget(engine, counts, ENQUEUE_IDEMPOTENT, 1, stamped=True))


def test_enqueue_with_a_client_id_costs_what_a_plain_one_does_in_one_call(
    r: redis.Redis, engine: Scripts
) -> None:
    # The repeat check reads the digest in the HMGET that already reads the job (a repeat of
    # the id); no key of its own, nothing in the global slot.
    own = new_client_id("default")
    counts = commands_of(r, lambda: engine.enqueue(request(id=own), own))
    assert_within(counts, budget(engine, counts, ENQUEUE, 1, stamped=True))
    assert r.info("commandstats")["cmdstat_evalsha"]["calls"] == 1
    again = commands_of(r, lambda: engine.enqueue(request(id=own), own))
    assert sum(again.values()) == 1  # a repeat: the HMGET alone


def test_a_batch_with_an_idempotency_key_costs_one_reserve_call_more(
    r: redis.Redis, engine: Scripts
) -> None:
    # A batch takes a key: reserve_batch.lua ties it to the batch's ids in the global
    # slot (HMGET, HSET, PEXPIRE), one EVALSHA more beside the MULTI/EXEC, which is unchanged.
    # Each batch in a fresh queue: the same state before each (the wake list's trim included).
    plain = commands_of(r, lambda: engine.enqueue_many([(request(), J1), (request(), J2)]))
    calls: list[int] = []

    def keyed() -> None:
        batch = [(request(queue="q2"), J3), (request(queue="q2"), J4)]
        engine.enqueue_many(batch, idempotency_key="kb")
        calls.append(r.info("commandstats")["cmdstat_evalsha"]["calls"])

    counts = commands_of(r, keyed)
    assert counts - plain == Counter({"hmget": 1, "hset": 1, "pexpire": 1})
    assert plain - counts == Counter()
    assert calls == [3]  # two enqueues and the reserve


def test_enqueue_with_every_optional_field_still_writes_the_hash_once(
    r: redis.Redis, engine: Scripts
) -> None:
    job = request(timeout=5)
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    counts = commands_of(r, lambda: engine.enqueue(job, J1, traceparent=trace))
    assert_within(counts, budget(engine, counts, ENQUEUE, 1, stamped=True))
    assert counts["hset"] == 1


def test_enqueue_with_a_delay_is_within_its_budget_and_reads_redis_clock_once(
    r: redis.Redis, engine: Scripts
) -> None:
    counts = commands_of(r, lambda: engine.enqueue(request(delay="5m"), J1))
    assert_within(counts, budget(engine, counts, ENQUEUE, 1, stamped=True))
    # The due time comes from the clock the script already reads (TIME, or with events on its
    # `scheduled` event's entry id: a delay above 0 is scheduled whatever the time): no command
    # of its own.
    assert counts["time"] == (0 if engine.policy.events_cap else 1) and counts["hset"] == 1


def test_enqueue_at_an_absolute_time_reads_redis_time_before_naming_its_event(
    r: redis.Redis, engine: Scripts
) -> None:
    # Scheduled or pending is the client's scheduled_at against now, and the event is named
    # after it: this path reads TIME, events on or off (HMGET, TIME, SET NX, ZADD, HSET, then
    # the due index's ZADD LT in a second call: shared/engine/scripts/due_index.py).
    later = request(scheduled_at="2999-01-01T00:00:00Z")
    counts = commands_of(r, lambda: engine.enqueue(later, J1))
    assert_within(counts, budget(engine, counts, 6, 1))
    assert counts["time"] == 1


def test_claim_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    engine.enqueue(request(), J1)
    counts = commands_of(r, lambda: engine.claim("w1"))
    assert_within(counts, budget(engine, counts, CLAIM, 1, stamped=True))
    assert counts["hmget"] == 1 and counts["hset"] == 1  # the job is read once, written once


def test_an_empty_claim_costs_three_commands(r: redis.Redis, engine: Scripts) -> None:
    counts = commands_of(r, lambda: engine.claim("w1"))
    assert_within(counts, budget(engine, counts, 3, 0))


def test_complete_and_claim_next_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    token = claimed(engine, J1)
    engine.enqueue(request(), J2)
    result: list[Any] = []
    counts = commands_of(r, lambda: result.append(engine.complete(J1, token, claim_next_for="w1")))
    assert result[0].next_job.id == J2  # it did claim: the budget covers the whole fused path
    assert_within(counts, budget(engine, counts, COMPLETE_AND_CLAIM, 2, stamped=True))
    assert counts["time"] == (0 if engine.policy.events_cap else 1)


@pytest.mark.parametrize("attempts_left", [True, False], ids=["retrying", "dead"])
def test_fail_is_within_its_budget(r: redis.Redis, engine: Scripts, attempts_left: bool) -> None:
    engine.enqueue(request(max_retries=3 if attempts_left else 1), J3)
    job = engine.claim("w1")
    assert job is not None
    expected = Code.RETRYING if attempts_left else Code.DEAD
    results: list[Any] = []
    counts = commands_of(
        r, lambda: results.append(engine.fail(J3, job.token, "E: boom", traceback="tb"))
    )
    assert results[0].code is expected
    assert_within(counts, budget(engine, counts, FAIL, 1, stamped=True))


def test_a_claim_with_runnable_types_costs_nothing_more(r: redis.Redis, engine: Scripts) -> None:
    engine.enqueue(request(), J1)
    result: list[Any] = []
    counts = commands_of(r, lambda: result.append(engine.claim("w1", runnable=RUNNABLE)))
    assert result[0].id == J1
    assert_within(counts, budget(engine, counts, CLAIM, 1, stamped=True))


def test_complete_and_claim_next_with_runnable_types_costs_nothing_more(
    r: redis.Redis, engine: Scripts
) -> None:
    token = claimed(engine, J1)
    engine.enqueue(request(), J2)
    result: list[Any] = []
    counts = commands_of(
        r,
        lambda: result.append(engine.complete(J1, token, claim_next_for="w1", runnable=RUNNABLE)),
    )
    assert result[0].next_job.id == J2
    assert_within(counts, budget(engine, counts, COMPLETE_AND_CLAIM, 2, stamped=True))


def test_a_claim_that_leaves_the_job_to_another_worker_is_within_its_budget(
    r: redis.Redis, engine: Scripts
) -> None:
    engine.enqueue(request("email"), J1)
    result: list[Any] = []
    counts = commands_of(r, lambda: result.append(engine.claim("w1", runnable=RUNNABLE)))
    assert result[0] == NotRunnable("default", "email")
    assert_within(counts, budget(engine, counts, CLAIM_REFUSED, 0))
    assert counts["time"] == 0  # nothing starts: Redis's clock is not read


def test_complete_whose_next_job_is_left_to_another_worker_is_within_its_budget(
    r: redis.Redis, engine: Scripts
) -> None:
    token = claimed(engine, J1)
    engine.enqueue(request("email"), J2)
    result: list[Any] = []
    counts = commands_of(
        r,
        lambda: result.append(engine.complete(J1, token, claim_next_for="w1", runnable=RUNNABLE)),
    )
    assert result[0].next_job == NotRunnable("default", "email")
    assert_within(counts, budget(engine, counts, COMPLETE_AND_REFUSE, 1, stamped=True))


def test_a_claim_checks_the_pause_at_no_cost(r: redis.Redis, engine: Scripts) -> None:
    engine.enqueue(request(), J1)
    counts = commands_of(r, lambda: engine.claim("w1"))
    assert "get" not in counts and "exists" not in counts and counts["mget"] == 1


def test_a_claim_from_a_paused_queue_costs_one_command(r: redis.Redis, engine: Scripts) -> None:
    engine.enqueue(request(), J1)
    engine.pause_queue("default")

    def claim() -> None:
        with pytest.raises(QueuePaused):
            engine.claim("w1")

    counts = commands_of(r, claim)
    assert_within(counts, budget(engine, counts, 1, 0))


def test_complete_without_a_claim_pays_nothing_for_the_pause(
    r: redis.Redis, engine: Scripts
) -> None:
    token = claimed(engine, J1)
    counts = commands_of(r, lambda: engine.complete(J1, token))
    assert_within(counts, budget(engine, counts, 6, 1, stamped=True))
    assert "exists" not in counts


# A batched claim (claim_batch.lua, a batched worker's first claim: WORKER_BATCH): MGET, then per job ZPOPMIN, HMGET,
# ZREM, HSET, ZADD, TIME once for the batch (events on: an XADD per job, its time the first's),
# and the repeat pointer's SET: for 3 jobs 1 + 3 x 5 + 1 + 1 = 18, against 3 x 8 = 24 for 3 claims.
CLAIM_BATCH_OF_3 = 18


def test_a_batched_claim_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    for jid in (J1, J2, J3, J4):
        engine.enqueue(request(), jid)
    result: list[Any] = []
    counts = commands_of(r, lambda: result.append(engine.claim_batch("w1", 3)))
    assert [j.id for j in result[0]] == [J1, J2, J3]
    assert_within(counts, budget(engine, counts, CLAIM_BATCH_OF_3, 3, stamped=True))
    assert counts["set"] == 1 and counts["mget"] == 1


# A batched worker's round trip (complete_batch.lua, WORKER_BATCH): 3 completions and 3 claims.
# Per completion HMGET, HSET, HDEL, ZREM, ZADD; per claim ZPOPMIN, HMGET, ZREM, HSET, ZADD; the
# claim part's MGET and its repeat pointer's SET; one clock for the call: TIME once with events
# off, else each job's event (6 XADDs) and no TIME. 33 commands (38 with events), against 3 x 12
# (3 x 13) in three complete-and-claim calls, and one round trip instead of three.
COMPLETE_BATCH_3_AND_3 = Counter(
    {"hmget": 6, "hset": 6, "hdel": 3, "zrem": 6, "zadd": 6, "zpopmin": 3, "mget": 1, "set": 1}
)


def test_a_batched_completion_and_claim_costs_exactly_its_commands(
    r: redis.Redis, engine: Scripts
) -> None:
    for jid in (J1, J2, J3):
        engine.enqueue(request(), jid)
    batch = engine.claim_batch("w1", 3)
    assert isinstance(batch, list)
    jobs = [(j.id, j.token, "null") for j in batch]
    for n in range(4, 8):
        engine.enqueue(request(), job_id(n))
    result: list[Any] = []

    counts = commands_of(r, lambda: result.append(engine.complete_batch("w1", jobs, count=3)))

    assert [a.code for a in result[0].acks] == [Code.DONE] * 3 and len(result[0].claimed) == 3
    on = engine.policy.events_cap > 0
    assert counts == COMPLETE_BATCH_3_AND_3 + Counter({"xadd": 6} if on else {"time": 1})


# The registry heartbeat. The hosts it forgets are read before they are removed, to
# name them in worker_left events: with events on, the read (ZRANGEBYSCORE) takes the removal's
# place, which runs only when there is a host to forget, so a usual beat costs what it did.
HEARTBEAT = 9
HOST_TTL = 15_000


def test_a_heartbeat_of_a_known_host_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    engine.heartbeat("h1", {"pid": 1}, HOST_TTL)
    counts = commands_of(r, lambda: engine.heartbeat("h1", {"pid": 1}, HOST_TTL))
    assert_within(counts, budget(engine, counts, HEARTBEAT, 0))
    assert counts["zremrangebyscore" if engine.policy.events_cap == 0 else "zrangebyscore"] == 1


def test_a_joining_host_pays_one_event(r: redis.Redis, engine: Scripts) -> None:
    counts = commands_of(r, lambda: engine.heartbeat("h1", {"pid": 1}, HOST_TTL))
    assert_within(counts, budget(engine, counts, HEARTBEAT, 1))


def test_forgetting_silent_hosts_costs_a_read_and_an_event_each(
    r: redis.Redis, engine: Scripts
) -> None:
    engine.heartbeat("h1", {"pid": 1}, HOST_TTL)
    # Two hosts heard from long ago (their own beats keep h1, whose beat is later).
    engine.heartbeat("old1", {}, HOST_TTL, now_ms=1_000)
    engine.heartbeat("old2", {}, HOST_TTL, now_ms=1_000)
    counts = commands_of(r, lambda: engine.heartbeat("h1", {"pid": 1}, HOST_TTL))
    # With events on: the read, then the removal and one worker_left per host.
    extra_read = 1 if engine.policy.events_cap else 0
    assert_within(counts, budget(engine, counts, HEARTBEAT + extra_read, 2))
    assert counts["zremrangebyscore"] == 1


def test_a_cancel_request_for_a_running_job_is_within_its_budget(
    r: redis.Redis, engine: Scripts
) -> None:
    claimed(engine, J1)
    counts = commands_of(r, lambda: engine.cancel(J1, by="api"))
    assert_within(counts, budget(engine, counts, CANCEL_REQUEST, 1))


def test_cancel_running_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    token = claimed(engine, J1)
    engine.cancel(J1)
    results: list[Any] = []
    counts = commands_of(r, lambda: results.append(engine.cancel_running(J1, token, "sigterm")))
    assert results[0].code is Code.DONE
    assert_within(counts, budget(engine, counts, CANCEL_RUNNING, 1))


def test_renewing_a_job_asked_to_stop_costs_nothing_more(r: redis.Redis, engine: Scripts) -> None:
    t1, t2 = claimed(engine, J1), claimed(engine, J2)
    engine.cancel(J1)
    results: list[Any] = []
    counts = commands_of(r, lambda: results.append(engine.renew([(J1, t1), (J2, t2)])))
    assert results[0] == [Code.CANCEL_ASKED, Code.DONE]
    assert_within(counts, budget(engine, counts, RENEW_TWO, 0))


def test_a_failure_of_a_job_asked_to_stop_costs_no_more_than_a_failure(
    r: redis.Redis, engine: Scripts
) -> None:
    token = claimed(engine, J1)
    engine.cancel(J1)
    results: list[Any] = []
    counts = commands_of(r, lambda: results.append(engine.fail(J1, token, "E: boom")))
    assert results[0].code is Code.CANCELED
    assert_within(counts, budget(engine, counts, FAIL, 1))


# Concurrency and rate limits. An unlimited queue pays nothing (every budget above
# is unchanged: the limits string is read in the MGETs claim.lua and complete.lua already make).
# A limited queue pays, per claim: TIME once up front (was: once a job starts; same count),
# ZLEXCOUNT for its type's concurrency limit, ZADD to `running`: 8 + 2 = 10. A queue-wide
# concurrency limit adds ZCARD, each rate bucket HGET + HSET (both kinds: 10 + 1 + 4). A job
# held costs ZADD to `held` and `held_order` and HGET of its mark (+ HSET of mark and history,
# and its event, the first time): with the claim's MGET, TIME, ZPOPMIN, HMGET, ZLEXCOUNT and
# the empty ZPOPMIN and DEL after it, 11.
# Giving a slot back costs ZREM + ZRANGEBYLEX (+ ZREM x2, ZADD, LPUSH when a held job returns),
# and LPUSH of a hint from an exit whose worker does not claim next (fail, release, recover).
CLAIM_LIMITED = 10
CLAIM_LIMITED_QUEUE_AND_RATE = 15
CLAIM_HOLDS_ONE_THEN_EMPTY = 11
COMPLETE_AND_CLAIM_LIMITED = 16
FAIL_LIMITED = 11
PDF_LIMIT = '{"t":{"t":{"c":1}}}'


def test_a_claim_in_a_limited_queue_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    engine.set_limits("default", PDF_LIMIT)
    engine.enqueue(request(), J1)
    result: list[Any] = []
    counts = commands_of(r, lambda: result.append(engine.claim("w1")))
    assert result[0].id == J1
    assert_within(counts, budget(engine, counts, CLAIM_LIMITED, 1))
    assert counts["time"] == 1 and counts["zlexcount"] == 1


def test_a_claim_under_every_kind_of_limit_is_within_its_budget(
    r: redis.Redis, engine: Scripts
) -> None:
    engine.set_limits("default", '{"c":5,"r":[10,1000],"t":{"t":{"c":1,"r":[5,1000]}}}')
    engine.enqueue(request(), J1)
    counts = commands_of(r, lambda: engine.claim("w1"))
    assert_within(counts, budget(engine, counts, CLAIM_LIMITED_QUEUE_AND_RATE, 1))


def test_a_claim_that_holds_a_job_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    engine.set_limits("default", PDF_LIMIT)
    claimed(engine, J1)
    engine.enqueue(request(), J2)
    counts = commands_of(r, lambda: engine.claim("w2"))
    assert_within(counts, budget(engine, counts, CLAIM_HOLDS_ONE_THEN_EMPTY, 1))  # held event
    # Re-parked: no history, no event, no HSET.
    engine.set_limits("default", PDF_LIMIT)  # every held job back to pending
    counts = commands_of(r, lambda: engine.claim("w2"))
    assert_within(counts, budget(engine, counts, CLAIM_HOLDS_ONE_THEN_EMPTY - 1, 0))
    assert "hset" not in counts


def test_complete_and_claim_in_a_limited_queue_is_within_its_budget(
    r: redis.Redis, engine: Scripts
) -> None:
    engine.set_limits("default", PDF_LIMIT)
    token = claimed(engine, J1)
    engine.enqueue(request(), J2)
    result: list[Any] = []
    counts = commands_of(r, lambda: result.append(engine.complete(J1, token, claim_next_for="w1")))
    assert result[0].next_job.id == J2
    assert_within(counts, budget(engine, counts, COMPLETE_AND_CLAIM_LIMITED, 2, stamped=True))


def test_fail_in_a_limited_queue_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    engine.set_limits("default", PDF_LIMIT)
    token = claimed(engine, J1)
    counts = commands_of(r, lambda: engine.fail(J1, token, "E: boom"))
    assert_within(counts, budget(engine, counts, FAIL_LIMITED, 1, stamped=True))


# Periodic schedules: a tick's job costs an enqueue (above) and this advance: HGET,
# HSET, HINCRBY of the jobs; a pass that lost the race, or a clock behind, only the HGET.
ADVANCE_SCHEDULE = 3
ADVANCE_SCHEDULE_LOST = 1


def test_advancing_a_schedule_is_within_its_budget(r: redis.Redis, engine: Scripts) -> None:
    engine.advance_schedule("s", 1_000, None)
    counts = commands_of(r, lambda: engine.advance_schedule("s", 2_000, J1, jobs=1))
    assert_within(counts, budget(engine, counts, ADVANCE_SCHEDULE, 0))
    counts = commands_of(r, lambda: engine.advance_schedule("s", 2_000, J1, jobs=1))
    assert_within(counts, budget(engine, counts, ADVANCE_SCHEDULE_LOST, 0))


# The per-job budget (bench/PER_JOB_COST.md, "Per-job budget"): what one job costs Redis while a
# worker drains, its enqueue (the script the gateway calls) and the complete that ends it and
# claims the next job (a job's own claim is in its predecessor's complete), by command, exactly,
# events on and off. Events on: enqueue HMGET, XADD (its time), INCR, ZADD x2 (pending,
# pending_since), LPUSH (wake hint), HSET; complete HMGET, XADD (its time), HSET, HDEL, ZREM
# (processing), ZADD (completed), then the claim: MGET (paused, limits), ZPOPMIN, HMGET, ZREM
# (pending_since), XADD, HSET, ZADD (lease). Events off: a TIME in the enqueue's XADD's place
# and in the complete's first XADD's, no second XADD. Wire bytes are the same either way: a
# command a script makes never crosses the wire. Redis's CPU is not asserted (no timed tests here: bench.job_budget
# prints it); what stands in for it without noise is the commands and the bytes Redis reads and
# writes on the wire per job (its requests' arguments and its replies: reading and answering
# requests is about a third of Redis's CPU per job, bench/PER_JOB_COST.md).
PER_JOB_ENQUEUE = Counter(hmget=1, xadd=1, incr=1, zadd=2, lpush=1, hset=1)
PER_JOB_COMPLETE = Counter(hmget=2, xadd=2, hset=2, hdel=1, zrem=2, zadd=2, mget=1, zpopmin=1)
# +3 bytes each since a job may carry its own id: enqueue.lua's last argument, the request's
# digest, is sent empty for a job without one (merge of rediscost and clientids: 1508/1416 →
# 1511/1419, measured).
PER_JOB_WIRE_BYTES = {"events-on": 1511, "events-off": 1419}


def per_job(engine: Scripts) -> Counter[str]:
    """Return the exact per-job budget of `engine`'s events mode."""
    if engine.policy.events_cap:
        return PER_JOB_ENQUEUE + PER_JOB_COMPLETE
    return PER_JOB_ENQUEUE + PER_JOB_COMPLETE - Counter(xadd=3) + Counter(time=2)


def wire_bytes(r: redis.Redis, call: Callable[[], Any]) -> int:
    """Run `call`; return the bytes Redis read and wrote on the wire meanwhile (with a constant
    few of this function's own: the INFO request and the RESETSTAT reply)."""
    r.config_resetstat()
    call()
    stats = r.info("stats")
    return int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"])


def test_a_job_costs_redis_exactly_its_budget(r: redis.Redis, engine: Scripts) -> None:
    held = {"id": J1, "token": claimed(engine, J1)}

    def one_job(next_id: str) -> None:
        engine.enqueue(request(), next_id)
        ack = engine.complete(held["id"], held["token"], '{"sent":true}', claim_next_for="w1")
        assert ack.next_job is not None and ack.next_job.id == next_id
        held.update(id=next_id, token=ack.next_job.token)

    counts = commands_of(r, lambda: one_job(J2))
    assert counts == per_job(engine), counts
    mode = "events-on" if engine.policy.events_cap else "events-off"
    sent = wire_bytes(r, lambda: one_job(J3))
    assert sent <= PER_JOB_WIRE_BYTES[mode], f"{sent} bytes on the wire per job"
