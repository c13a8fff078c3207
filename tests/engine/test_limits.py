"""Concurrency and rate limits on a real Redis: claim, hold, release.

Seed through the scripts, act with an explicit now, assert the keys: `running` (the slots),
`held` (pending jobs a type's limit holds back), `pending`, and the job's own fields.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
import redis

from shared.engine import limits as lim
from shared.engine.engine_types import Code
from shared.engine.history import read as read_history
from shared.engine.scripts import Scripts
from shared.model import limit_rules
from shared.model.jobs import JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    J4,
    J5,
    J6,
    POLICY,
    T0,
    K,
    job,
    job_id,
    request,
)


def put(scripts: Scripts, doc: dict, queue: str = "default") -> tuple[int, int]:
    return scripts.set_limits(queue, limit_rules.parse_limits(doc).compact_json())


def add(scripts: Scripts, jid: str, job_type: str = "t", now: int = T0, **fields: object) -> str:
    assert scripts.enqueue(request(job_type, **fields), jid, now_ms=now).created
    return jid


def claimed_id(scripts: Scripts, *, worker: str = "w1", now: int = T0) -> str | None:
    got = scripts.claim(worker, now_ms=now)
    return None if got is None else got.id


def running(r: redis.Redis) -> set[str]:
    return {m.decode() for m in r.zrange(K.running, 0, -1)}


def held_ids(r: redis.Redis) -> list[str]:
    return [m.decode().rsplit(":", 1)[1] for m in r.zrange(K.held, 0, -1)]


def pending_ids(r: redis.Redis) -> list[str]:
    return [m.decode().split(":", 1)[1] for m in r.zrange(K.pending, 0, -1)]


# --- zero cost and the flag -------------------------------------------------------------------


def test_an_unlimited_queue_writes_no_limit_key(r: redis.Redis, scripts: Scripts) -> None:
    add(scripts, J1)
    token = scripts.claim("w1", now_ms=T0).token
    scripts.complete(J1, token, now_ms=T0)
    for key in (K.limits, K.running, K.held, K.buckets, K.gates):
        assert not r.exists(key), key
    assert r.hget(K.job(J1), "slot") is None


# --- concurrency per type ---------------------------------------------------------------------


def test_a_type_at_its_limit_is_held_and_other_types_flow_past(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    add(scripts, J3, "mail")

    assert claimed_id(scripts, worker="w1") == J1
    assert claimed_id(scripts, worker="w2") == J3  # J2 held on the way
    assert running(r) == {f"pdf|{J1}"}  # mail is not counted by any concurrency limit
    assert held_ids(r) == [J2]
    assert job(r, J2).status is JobState.PENDING
    assert r.zscore(K.pending_since, J2) is not None  # still counted as waiting since enqueue
    assert claimed_id(scripts, worker="w3") is None
    counts, _ = scripts.stats(now_ms=T0)
    assert counts.by_state[JobState.PENDING] == 1 and counts.by_state[JobState.PROCESSING] == 2


def test_a_dotted_type_is_limited_by_its_exact_name(r: redis.Redis, scripts: Scripts) -> None:
    # demo.sleep is a real type name (workerd.demo); "demoxsleep" would match it as a Lua
    # pattern, "demo" is its prefix: neither may be counted or held by its limit.
    put(scripts, {"types": {"demo.sleep": {"concurrency": 1}}})
    add(scripts, J1, "demo.sleep")
    add(scripts, J2, "demo.sleep")
    add(scripts, J3, "demoxsleep")
    add(scripts, J4, "demo")

    assert [claimed_id(scripts, worker=w) for w in ("w1", "w2", "w3")] == [J1, J3, J4]
    assert running(r) == {f"demo.sleep|{J1}"}
    assert held_ids(r) == [J2]
    [state] = lim.read_state(r, K, ["default"])
    assert state.type_use == {"demo.sleep": lim.ScopeUse(running=1, held=1)}


def test_the_history_says_held_once_per_wait(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    token = scripts.claim("w1", now_ms=T0).token
    assert claimed_id(scripts, worker="w2", now=T0 + 5) is None  # J2 held
    # The slot comes back: J2 returns to pending, then is held again by a claim that races it.
    add(scripts, J3, "pdf", priority=9)
    scripts.complete(J1, token, now_ms=T0 + 10)
    assert held_ids(r) == []
    assert claimed_id(scripts, worker="w3", now=T0 + 20) == J3
    assert claimed_id(scripts, worker="w2", now=T0 + 30) is None  # J2 re-parked
    events = [e.event for e in read_history(r, K, J2, "default").entries]
    assert events == ["enqueued", "held"]
    entry = read_history(r, K, J2, "default").entries[1].to_json()
    assert entry["reason"] == "concurrency" and "error" not in entry


def test_a_returned_slot_brings_back_the_best_held_job_in_priority_then_fifo_order(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf", priority=1)
    add(scripts, J3, "pdf", priority=5)
    add(scripts, J4, "pdf", priority=5)
    first = scripts.claim("w1", now_ms=T0)
    assert first.id == J3  # highest priority first
    assert claimed_id(scripts, worker="w2") is None
    assert held_ids(r) == [J4, J2, J1]  # the held zset keeps the claim order

    order = []
    token, jid = first.token, first.id
    for _ in range(3):
        next_job = scripts.complete(jid, token, claim_next_for="w1", now_ms=T0).next_job
        assert next_job is not None
        order.append(next_job.id)
        token, jid = next_job.token, next_job.id
    assert order == [J4, J2, J1]
    assert held_ids(r) == [] and running(r) == {f"pdf|{J1}"}


@pytest.mark.parametrize(
    "exit_how",
    [
        "complete",
        "retry",
        "dead",
        "release",
        "release_worker",
        "recover",
        "recover_cap",
        # A running job asked to stop leaves processing canceled, by each of its ways out.
        "cancel_running",
        "cancel_failed",
        "cancel_released",
        "cancel_recovered",
    ],
)
def test_every_exit_from_processing_gives_the_slot_back(
    r: redis.Redis, make_scripts: Callable[..., Scripts], exit_how: str
) -> None:
    scripts = make_scripts(max_recoveries=0 if exit_how == "recover_cap" else 2)
    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf", max_retries=1 if exit_how == "dead" else 3)
    add(scripts, J2, "pdf")
    first = scripts.claim("w1", now_ms=T0)
    assert claimed_id(scripts, worker="w2") is None
    assert held_ids(r) == [J2]

    if exit_how.startswith("cancel_"):
        assert scripts.cancel(J1, now_ms=T0).changed
        assert running(r) == {f"pdf|{J1}"}  # asked to stop, still running: the slot is held
    if exit_how == "cancel_running":
        assert scripts.cancel_running(J1, first.token, "sigterm", now_ms=T0).code is Code.DONE
    elif exit_how == "cancel_failed":
        assert scripts.fail(J1, first.token, "Boom: x", now_ms=T0).code is Code.CANCELED
    elif exit_how == "cancel_released":
        assert scripts.release(J1, first.token, canceling=True, now_ms=T0).code is Code.CANCELED
    elif exit_how == "cancel_recovered":
        assert scripts.recover(now_ms=T0 + POLICY.lease_ms + 1).canceled == [J1]
    elif exit_how == "complete":
        scripts.complete(J1, first.token, now_ms=T0)
    elif exit_how in ("retry", "dead"):
        code = scripts.fail(J1, first.token, "Boom: x", now_ms=T0).code
        assert code is (Code.RETRYING if exit_how == "retry" else Code.DEAD)
    elif exit_how == "release":
        assert scripts.release(J1, first.token, now_ms=T0).code is Code.DONE
    elif exit_how == "release_worker":
        assert scripts.release_worker("w1", running=J1, now_ms=T0)
    else:
        result = scripts.recover(now_ms=T0 + POLICY.lease_ms + 1)
        assert (result.dead if exit_how == "recover_cap" else result.requeued) == [J1]

    assert running(r) == set()
    assert held_ids(r) == []
    assert J2 in pending_ids(r)
    assert r.llen(K.wake) >= 1
    if exit_how.startswith("cancel_"):
        assert r.hget(K.job(J1), "status") == b"canceled"
    # A second exit of the same job (a repeat, a stale call) gives nothing back twice.
    if exit_how == "complete":
        scripts.complete(J1, first.token, now_ms=T0)
        assert running(r) == set()


def test_limits_never_exceeded_by_concurrent_claimers(
    r: redis.Redis, make_scripts: Callable[..., Scripts]
) -> None:
    scripts = make_scripts()
    put(scripts, {"concurrency": 5, "types": {"pdf": {"concurrency": 2}}})
    for n in range(40):
        add(scripts, job_id(100 + n), "pdf" if n % 2 else "mail")
    peaks = {"pdf": 0, "all": 0}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        engine = make_scripts()
        try:
            current = engine.claim(name)
            while current is not None:
                with lock:
                    members = running(r)
                    peaks["all"] = max(peaks["all"], len(members))
                    peaks["pdf"] = max(
                        peaks["pdf"], sum(1 for m in members if m.startswith("pdf|"))
                    )
                done = engine.complete(current.id, current.token, claim_next_for=name)
                current = done.next_job or engine.claim(name)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"w{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert not errors
    assert peaks["pdf"] <= 2 and peaks["all"] <= 5
    # Held jobs come back only when a slot is given back: finish them off, one worker.
    while (left := scripts.claim("w1")) is not None:
        scripts.complete(left.id, left.token)
    counts, _ = scripts.stats()
    assert counts.by_state[JobState.COMPLETED] == 40
    assert running(r) == set() and held_ids(r) == []


# --- the queue-wide limits --------------------------------------------------------------------


def test_a_queue_wide_limit_reached_claims_nothing_and_clears_the_hints(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"concurrency": 1})
    add(scripts, J1)
    add(scripts, J2)
    first = scripts.claim("w1", now_ms=T0)
    assert first.id == J1
    assert r.llen(K.wake) > 0
    assert claimed_id(scripts, worker="w2") is None
    assert pending_ids(r) == [J2] and held_ids(r) == []  # nothing popped
    assert r.llen(K.wake) == 0
    # The slot given back wakes a claim (the worker completing claims nothing more here).
    scripts.complete(J1, first.token, now_ms=T0)
    assert r.llen(K.wake) == 1
    assert claimed_id(scripts, worker="w2") == J2


# --- rate limits ------------------------------------------------------------------------------


def test_a_type_rate_holds_past_its_tokens_and_the_gate_lets_them_go_on_redis_time(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"pdf": {"rate": "2/1s"}}})
    for jid in (J1, J2, J3, J4):
        add(scripts, jid, "pdf")
    add(scripts, J5, "mail")
    got = [claimed_id(scripts, worker=f"w{n}", now=T0) for n in range(4)]
    assert got == [J1, J2, J5, None]
    assert held_ids(r) == [J3, J4]
    gate = r.zscore(K.gates, "t:pdf")
    assert gate == T0 + 500  # one token every 500 ms
    assert scripts.open_gates(now_ms=T0 + 499) == 0
    assert scripts.open_gates(now_ms=T0 + 500) == 1  # one token back: one job
    assert held_ids(r) == [J4] and pending_ids(r) == [J3]
    assert claimed_id(scripts, worker="w5", now=T0 + 500) == J3
    assert claimed_id(scripts, worker="w6", now=T0 + 500) is None
    # A full period later the bucket is full again (2): J4 goes, nothing more is held.
    assert scripts.open_gates(now_ms=T0 + 1_600) == 1
    assert claimed_id(scripts, worker="w7", now=T0 + 1_600) == J4


def test_a_queue_wide_rate_out_of_tokens_claims_nothing_until_the_gate_opens(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"rate": "1/1s"})
    add(scripts, J1)
    add(scripts, J2)
    assert claimed_id(scripts, now=T0) == J1
    assert claimed_id(scripts, worker="w2", now=T0 + 10) is None
    assert pending_ids(r) == [J2] and r.llen(K.wake) == 0
    assert r.zscore(K.gates, "q") == T0 + 1_000
    scripts.open_gates(now_ms=T0 + 1_000)
    assert r.llen(K.wake) == 1 and not r.exists(K.gates)
    assert claimed_id(scripts, worker="w2", now=T0 + 1_000) == J2


# --- declaring ----------------------------------------------------------------------------------


def test_limits_set_while_jobs_run_count_them_and_clearing_returns_held_jobs(
    r: redis.Redis, scripts: Scripts
) -> None:
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    first = scripts.claim("w1", now_ms=T0)
    assert put(scripts, {"types": {"pdf": {"concurrency": 1}}}) == (1, 0)
    assert r.smembers(K.limited) == {b"default"}  # where the scheduler looks for gates
    assert running(r) == {f"pdf|{J1}"}
    assert claimed_id(scripts, worker="w2") is None
    assert held_ids(r) == [J2]
    assert scripts.set_limits("default", "") == (0, 1)
    assert not r.exists(K.limited)
    assert pending_ids(r) == [J2]
    for key in (K.limits, K.running, K.held, K.gates, K.buckets):
        assert not r.exists(key), key
    # The job claimed while limited finishes without touching the cleared keys.
    assert scripts.complete(J1, first.token, now_ms=T0).code is Code.DONE
    assert not r.exists(K.running)


def test_cancel_takes_a_held_job_out_of_held(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf")
    add(scripts, J6, "pdf", priority=-3)
    scripts.claim("w1", now_ms=T0)
    assert claimed_id(scripts, worker="w2") is None
    assert scripts.cancel(J6, now_ms=T0).changed
    assert held_ids(r) == []
    assert job(r, J6).status is JobState.CANCELED


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"rate": "10"}, "N/PERIOD"),
        ({"rate": "0/1s"}, "N/PERIOD"),
        ({"rate": "1/2d"}, "N/PERIOD"),
        ({"rate": "1/0s"}, "N/PERIOD"),
        ({"rate": "1000001/1s"}, "N/PERIOD"),
        ({"types": {"a|b": {"concurrency": 1}}}, "job type"),
        ({"types": {"pdf": {"conc": 1}}}, "unknown field"),
        ({"burst": 1}, "unknown field"),
        ([], "object"),
    ],
)
def test_bad_limits_are_refused_with_the_field_named(doc: object, message: str) -> None:
    with pytest.raises(limit_rules.LimitError, match=message):
        limit_rules.parse_limits(doc)


def test_rates_read_as_written() -> None:
    assert limit_rules.parse_rate("100/1m") == limit_rules.Rate(100, 60_000)
    assert limit_rules.parse_rate("5/500ms") == limit_rules.Rate(5, 500)
    assert limit_rules.parse_rate("10/s") == limit_rules.Rate(10, 1_000)
    assert str(limit_rules.Rate(100, 60_000)) == "100/m"
    assert str(limit_rules.Rate(5, 500)) == "5/500ms"
    assert str(limit_rules.Rate(3, 7_200_000)) == "3/2h"


def test_the_state_shows_limits_running_and_held_per_scope(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"concurrency": 3, "types": {"pdf": {"concurrency": 1, "rate": "10/1s"}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    add(scripts, J3, "mail")
    scripts.claim("w1", now_ms=T0)
    scripts.claim("w2", now_ms=T0)
    (state,) = lim.read_state(r, K, ["default", "other"])
    assert state.to_json() == {
        "queue": "default",
        "concurrency": 3,
        "rate": None,
        "running": 2,
        "held": 1,
        "types": {"pdf": {"concurrency": 1, "rate": "10/s", "running": 1, "held": 1}},
    }


def test_held_jobs_are_listed_as_pending_in_claim_order(r: redis.Redis, scripts: Scripts) -> None:
    from shared.read.listing import list_jobs

    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf", priority=3)
    add(scripts, J3, "mail")
    add(scripts, J4, "pdf", priority=3)
    add(scripts, J5, "mail", priority=9)
    assert claimed_id(scripts) == J5
    assert claimed_id(scripts, worker="w2") == J2
    assert claimed_id(scripts, worker="w3") == J3  # J4 and J1 held on the way
    assert held_ids(r) == [J4, J1]
    add(scripts, J6, "mail", priority=1)
    page = list_jobs(scripts, JobState.PENDING, ["default"], limit=1)
    seen = [job.id for job in page.jobs]
    while page.next_cursor is not None:
        page = list_jobs(scripts, JobState.PENDING, ["default"], limit=1, cursor=page.next_cursor)
        seen += [job.id for job in page.jobs]
    assert seen == [J4, J6, J1]  # priority 3 (held), 1, then 0 (held)


def test_a_type_no_concurrency_limit_counts_takes_no_slot(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 1}, "mail": {"rate": "5/s"}}})
    add(scripts, J1, "mail")
    add(scripts, J2, "other")
    assert claimed_id(scripts) == J1
    assert claimed_id(scripts, worker="w2") == J2
    assert running(r) == set()  # neither is counted by a concurrency limit
    # A limit set while they run counts them from then on.
    assert put(scripts, {"concurrency": 5}) == (2, 0)
    assert running(r) == {f"mail|{J1}", f"other|{J2}"}
    assert put(scripts, {"concurrency": 4}) == (0, 0)  # already counted


def test_a_change_computed_from_stale_limits_is_refused_and_change_retries(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"a": {"concurrency": 1}}})
    before = r.get(K.limits).decode()
    put(scripts, {"types": {"a": {"concurrency": 1}, "b": {"concurrency": 2}}})  # another change
    stale = limit_rules.from_stored(before).with_scope("c", limit_rules.Limit(3)).compact_json()
    assert scripts.set_limits("default", stale, expected=before) is None  # nothing changed
    assert set(lim.read_limits(r, K, "default").types) == {"a", "b"}
    # shared.engine.limits.change reads again and applies its edit to what is there now.
    after = lim.change(scripts, "default", lambda c: c.with_scope("c", limit_rules.Limit(3)))
    assert set(after.types) == {"a", "b", "c"}
    assert set(lim.read_limits(r, K, "default").types) == {"a", "b", "c"}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"concurrency": "5"}, 'concurrency: expected an integer from 1 to 1,000,000, not "5"'),
        ({"concurrency": True}, "not true"),
        ({"types": {"pdf": {"foo": 1}}}, "types.pdf: unknown field 'foo'"),
    ],
)
def test_a_refused_limit_is_named_as_the_caller_wrote_it(doc: dict, message: str) -> None:
    with pytest.raises(limit_rules.LimitError, match=re.escape(message)):
        limit_rules.parse_limits(doc)
    if "types" not in doc:  # a type's own PUT body: the same words, named "body" when unknown
        with pytest.raises(limit_rules.LimitError, match="body: unknown field 'foo'"):
            limit_rules.parse_limit({"foo": 1}, "")


# --- each way a script makes its limit helpers (common.lua, limited) -----------------------------
# complete.lua makes lk for the slot a job gives back and reuses it for the claim of the
# worker's next job, or makes it for the claim alone; claim_batch makes one for the batch;
# open_gates makes one without limits. A key or a helper missing on one of these ways is a Lua
# error only there, so each is walked here.


def test_complete_claiming_next_under_a_type_rate_uses_the_slot_lk_for_the_claim(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 2, "rate": "1/1s"}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    first = scripts.claim("w1", now_ms=T0)
    assert first.id == J1 and running(r) == {f"pdf|{J1}"}

    # J1 gives its slot back (lk made), then the claim of the next job meets the type's rate
    # (the same lk, its buckets and gates): J2 is held and the gate closed until a token is due.
    ack = scripts.complete(J1, first.token, claim_next_for="w1", now_ms=T0 + 10)

    assert ack.code is Code.DONE and ack.next_job is None
    assert running(r) == set() and held_ids(r) == [J2]
    assert r.zscore(K.gates, "t:pdf") == T0 + 1_000


def test_complete_claiming_next_after_a_job_without_a_slot_still_meets_the_queue_rate(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"rate": "1/1s"})  # a rate alone takes no slot
    add(scripts, J1)
    add(scripts, J2)
    first = scripts.claim("w1", now_ms=T0)
    assert first.id == J1 and running(r) == set()

    # No slot given back: the claim makes the helpers itself and finds the queue out of tokens.
    ack = scripts.complete(J1, first.token, claim_next_for="w1", now_ms=T0 + 10)

    assert ack.code is Code.DONE and ack.next_job is None
    assert pending_ids(r) == [J2]
    assert r.zscore(K.gates, "q") == T0 + 1_000


def test_a_batch_claim_takes_no_more_jobs_than_the_queue_rate_has_tokens(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"rate": "2/1s"})
    for jid in (J1, J2, J3):
        add(scripts, jid)

    claimed = scripts.claim_batch("w1", 3, now_ms=T0)

    assert [j.id for j in claimed] == [J1, J2]
    assert pending_ids(r) == [J3]
    assert r.zscore(K.gates, "q") == T0 + 500


def test_a_gate_due_before_its_token_closes_again_and_lets_nothing_go(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"pdf": {"rate": "1/1s"}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    assert claimed_id(scripts, now=T0) == J1
    assert claimed_id(scripts, worker="w2", now=T0) is None
    assert held_ids(r) == [J2]
    # A gate due early (as one written under a faster rate would be): a tenth of a token by then.
    r.zadd(K.gates, {"t:pdf": T0 + 100})

    assert scripts.open_gates(now_ms=T0 + 100) == 0

    assert held_ids(r) == [J2]
    assert r.zscore(K.gates, "t:pdf") == T0 + 1_000


def test_complete_claiming_next_after_the_limits_were_removed_claims_unlimited(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, {"types": {"pdf": {"concurrency": 1}}})
    add(scripts, J1, "pdf")
    add(scripts, J2, "pdf")
    first = scripts.claim("w1", now_ms=T0)
    assert running(r) == {f"pdf|{J1}"}
    assert scripts.set_limits("default", "") == (0, 0)  # J1 still holds its slot mark

    # The slot's lk is made for J1's slot; with no limits left the claim must not use it.
    ack = scripts.complete(J1, first.token, claim_next_for="w1", now_ms=T0 + 10)

    assert ack.code is Code.DONE and ack.next_job is not None and ack.next_job.id == J2
    assert r.hget(K.job(J2), "slot") is None
    assert not r.exists(K.running) and not r.exists(K.held)
