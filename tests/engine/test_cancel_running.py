"""Cancelling a running job: the request (cancel.lua), its news to the supervisor (renew.lua),
and the one end, canceled, whichever way the execution stops (cancel_running.lua, fail.lua,
release.lua, release_worker.lua, recover.lua). Never retried, never requeued."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis

from shared.engine import history
from shared.engine.engine_types import Code
from shared.engine.history import Actor
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts, requester
from shared.model.jobs import JobState, format_ms
from tests.engine.conftest import (
    FINISHED_TTL_MS,
    J1,
    J2,
    POLICY,
    T0,
    K,
    assert_ttl,
    changed,
    job,
    snapshot,
    start,
)

ASKED = T0 + 100
NOW = T0 + 500


def ask(scripts: Scripts, jid: str = J1, by: str = "api 10.0.0.7") -> None:
    outcome = scripts.cancel(jid, by=by, now_ms=ASKED)
    assert outcome.changed and outcome.job.status is JobState.PROCESSING


def entries(r: redis.Redis, jid: str = J1) -> list[history.Entry]:
    raw = history.read(r, K, jid, "default")
    assert raw is not None
    return raw.entries


def events(r: redis.Redis, keys: Keys = K) -> list[dict[str, str]]:
    """Return the queue's events: in its own stream (as a cluster lays them out, under the slot
    guard) or in the one stream of every queue (plain Scripts on one Redis)."""
    queue = keys.queue.encode()
    found = r.xrange(keys.events) + [
        (i, f) for i, f in r.xrange(keys.fleet_events) if f.get(b"q") == queue
    ]
    found.sort(key=lambda entry: tuple(int(n) for n in entry[0].split(b"-")))
    return [{k.decode(): v.decode() for k, v in f.items() if k != b"q"} for _, f in found]


# --- the request --------------------------------------------------------------------------


def test_a_cancel_of_a_processing_job_records_the_request_and_nothing_else(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    before = snapshot(r)

    outcome = scripts.cancel(J1, by="ui alice", now_ms=ASKED)

    after = snapshot(r)
    assert outcome.changed
    assert changed(before, after) == {K.job(J1)}  # still processing, under its lease
    stored = after[K.job(J1)]
    assert stored["status"] == "processing" and stored["token"] == token
    assert (stored["cancel_requested_at"], stored["cancel_requested_by"]) == (ASKED, "ui alice")
    assert stored["updated_at"] == ASKED
    assert after[K.processing] == before[K.processing]
    assert r.pttl(K.job(J1)) == -1
    shown = outcome.job.to_json()
    assert shown["status"] == "processing"
    assert (shown["cancel_requested_at"], shown["cancel_requested_by"]) == (
        format_ms(ASKED),
        "ui alice",
    )
    last = entries(r)[-1]
    assert (last.event, last.actor, last.at_ms, last.by) == (
        "cancel_requested",
        "api",
        ASKED,
        "ui alice",
    )
    assert last.to_json()["by"] == "ui alice" and "error" not in last.to_json()
    assert events(r)[-1] == {"e": "cancel_requested", "j": J1, "t": "t", "w": "w1"}


def test_asking_again_changes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    start(scripts, J1)
    ask(scripts)
    before, stream = snapshot(r), r.xlen(K.events)

    again = scripts.cancel(J1, by="someone else", now_ms=NOW)

    assert not again.changed
    assert again.job.cancel_requested_by == "api 10.0.0.7"
    assert changed(before, snapshot(r)) == set()
    assert r.xlen(K.events) == stream


def test_a_request_without_a_name_keeps_none(r: redis.Redis, scripts: Scripts) -> None:
    start(scripts, J1)
    scripts.cancel(J1, now_ms=ASKED)
    assert job(r, J1).to_json().get("cancel_requested_by") is None
    assert entries(r)[-1].by is None


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("ui alice", "ui alice"),
        ("a|b\nc\x00d", "a b c d"),
        ("  x  ", "x"),
        ("é" * 40, "é" * 32),  # 64 bytes of UTF-8, no character cut in two
        ("", ""),
    ],
)
def test_requester_keeps_no_history_separator_and_at_most_64_bytes(given: str, kept: str) -> None:
    assert requester(given) == kept


def test_renew_tells_the_supervisor_of_a_request_and_still_extends_the_lease(
    r: redis.Redis, scripts: Scripts
) -> None:
    t1, t2 = start(scripts, J1).token, start(scripts, J2).token
    ask(scripts)

    codes = scripts.renew([(J1, t1), (J2, t2)], now_ms=NOW)

    assert codes == [Code.CANCEL_ASKED, Code.DONE]
    assert r.zscore(K.processing, J1) == NOW + POLICY.lease_ms


# --- the end: cancel_running ----------------------------------------------------------------


def test_cancel_running_ends_the_job_canceled(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    before = snapshot(r)

    result = scripts.cancel_running(J1, token, "sigterm", now_ms=NOW)

    assert (result.code, result.job_type) == (Code.DONE, "t")
    after = snapshot(r)
    assert changed(before, after) == {K.job(J1), K.processing, K.canceled}
    assert K.processing not in after
    assert after[K.canceled] == [(J1, NOW)]
    stored = after[K.job(J1)]
    assert (stored["status"], stored["finished_at"], stored["attempts"]) == ("canceled", NOW, 1)
    assert_ttl(r, K.job(J1), FINISHED_TTL_MS)
    *_, requested, ended = entries(r)
    assert requested.event == "cancel_requested"
    assert (ended.event, ended.actor, ended.at_ms, ended.stopped) == (
        "canceled",
        "worker",
        NOW,
        "sigterm",
    )
    # It ends an execution: the attempt and worker it stopped come from the claim.
    assert (ended.attempt, ended.worker) == (1, "w1")
    assert events(r)[-1] == {"e": "canceled", "j": J1, "t": "t", "a": "1", "w": "w1"}
    # Never again: nothing to claim, promote or recover.
    assert scripts.claim("w2", now_ms=NOW) is None
    assert scripts.recover(now_ms=NOW + 10 * POLICY.lease_ms).canceled == []


def test_a_repeat_of_cancel_running_answers_the_same_and_writes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    scripts.cancel_running(J1, token, "handler", now_ms=NOW)
    before, stream = snapshot(r), r.xlen(K.events)

    again = scripts.cancel_running(J1, token, "handler", now_ms=NOW + 5)

    assert (again.code, again.job_type) == (Code.DONE, "t")
    assert changed(before, snapshot(r)) == set()
    assert r.xlen(K.events) == stream


def test_cancel_running_is_refused_without_a_request(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    before = snapshot(r)

    result = scripts.cancel_running(J1, token, "handler", now_ms=NOW)

    assert (result.code, result.status) == (Code.WRONG_STATE, "processing")
    assert changed(before, snapshot(r)) == set()


def test_cancel_running_of_another_token_or_a_missing_job_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    before = snapshot(r)
    assert scripts.cancel_running(J1, token + 1, "handler").code is Code.STALE_TOKEN
    assert scripts.cancel_running(J2, 1, "handler").code is Code.NOT_FOUND
    assert changed(before, snapshot(r)) == set()


def test_completion_first_wins_and_the_cancel_is_then_stale(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    assert scripts.complete(J1, token, '"done"', now_ms=NOW).code is Code.DONE

    late = scripts.cancel_running(J1, token, "sigterm", now_ms=NOW + 1)

    assert (late.code, late.status) == (Code.STALE_TOKEN, "completed")
    done = job(r, J1)
    assert done.status is JobState.COMPLETED
    assert done.cancel_requested_at == ASKED  # asked, but it finished first: shown
    assert [e.event for e in entries(r)][-2:] == ["cancel_requested", "completed"]


def test_cancel_first_wins_and_the_completion_is_then_stale(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    scripts.cancel_running(J1, token, "handler", now_ms=NOW)

    late = scripts.complete(J1, token, '"done"', now_ms=NOW + 1)

    assert (late.code, late.status) == (Code.STALE_TOKEN, "canceled")
    assert job(r, J1).status is JobState.CANCELED
    assert r.zscore(K.completed, J1) is None


def test_a_cancel_after_the_end_is_refused_or_repeated(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    scripts.cancel_running(J1, token, "handler", now_ms=NOW)
    assert not scripts.cancel(J1, now_ms=NOW + 1).changed  # canceled: a repeat


# --- the other ends of an execution: a job asked to stop is never retried nor requeued -----


def test_a_failure_after_a_request_ends_canceled_not_retrying(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, max_retries=5).token
    ask(scripts)
    before = snapshot(r)

    result = scripts.fail(J1, token, "ValueError: stop", now_ms=NOW)

    assert (result.code, result.job_type, result.attempt) == (Code.CANCELED, "t", 1)
    assert changed(before, snapshot(r)) == {K.job(J1), K.processing, K.canceled}
    assert job(r, J1).status is JobState.CANCELED
    assert r.hlen(K.failures) == 0  # not a failure of the queue's: a stop
    assert entries(r)[-1].stopped == "failed"
    again = scripts.fail(J1, token, "ValueError: stop", now_ms=NOW + 1)
    assert again.code is Code.CANCELED  # a repeat answers the same


def test_a_timeout_after_a_request_ends_canceled(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    result = scripts.fail(J1, token, "Timeout: x", actor=Actor.SUPERVISOR, now_ms=NOW)
    assert result.code is Code.CANCELED
    last = entries(r)[-1]
    assert (last.actor, last.stopped) == ("supervisor", "timeout")


@pytest.mark.parametrize(
    ("canceling", "stopped"), [(True, "sigkill"), (False, "lost")], ids=["killed", "crashed"]
)
def test_a_released_job_asked_to_stop_ends_canceled(
    r: redis.Redis, scripts: Scripts, canceling: bool, stopped: str
) -> None:
    token = start(scripts, J1).token
    ask(scripts)

    result = scripts.release(J1, token, canceling=canceling, now_ms=NOW)

    assert (result.code, result.job_type) == (Code.CANCELED, "t")
    done = job(r, J1)
    assert (done.status, done.attempts, done.recoveries) == (JobState.CANCELED, 1, 0)
    assert r.zscore(K.canceled, J1) == NOW and r.zcard(K.pending) == 0
    last = entries(r)[-1]
    assert (last.event, last.actor, last.stopped, last.worker) == (
        "canceled",
        "supervisor",
        stopped,
        "w1",
    )
    assert_ttl(r, K.job(J1), FINISHED_TTL_MS)


def test_a_drained_job_asked_to_stop_ends_canceled_not_back_in_line(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1).token
    ask(scripts)
    assert scripts.release(J1, token, drained=True, now_ms=NOW).code is Code.CANCELED
    assert scripts.claim("w2", now_ms=NOW) is None


def test_release_worker_cancels_the_job_of_a_worker_killed_for_its_cancel(
    r: redis.Redis, scripts: Scripts
) -> None:
    start(scripts, J1, worker="w1")
    start(scripts, J2, worker="w2")
    ask(scripts, J1)

    released = scripts.release_worker("w1", running=J1, canceling=True, now_ms=NOW)

    assert [(x.code, x.job_id, x.job_type) for x in released] == [(Code.CANCELED, J1, "t")]
    assert job(r, J1).status is JobState.CANCELED
    assert job(r, J2).status is JobState.PROCESSING
    assert entries(r)[-1].stopped == "sigkill"


def test_recovery_cancels_a_job_asked_to_stop_whose_host_died(
    r: redis.Redis, scripts: Scripts
) -> None:
    start(scripts, J1)
    start(scripts, J2)
    ask(scripts, J1)
    later = T0 + POLICY.lease_ms + 1

    result = scripts.recover(now_ms=later)

    assert (result.canceled, result.canceled_types) == ([J1], ["t"])
    assert (result.requeued, result.dead) == ([J2], [])
    assert job(r, J1).status is JobState.CANCELED
    last = entries(r)[-1]
    assert (last.actor, last.stopped, last.attempt) == ("scheduler", "lost", 1)
    # The lost worker, were it only paused, can no longer end it otherwise.
    assert scripts.complete(J1, 1, now_ms=later).code is Code.STALE_TOKEN


# --- the race ---------------------------------------------------------------------------------


def race(calls: list[Callable[[], object]]) -> list[object]:
    """Run the calls at once, one thread each, released together by a barrier."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait(timeout=10)
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
        assert not t.is_alive()
    return results


def test_a_cancel_racing_the_completion_ends_in_exactly_one_of_the_two(r: redis.Redis) -> None:
    """200 rounds on a real Redis, three clients at once: the worker's complete, the worker's
    cancel_running (its handler stopped) and the supervisor's release of a worker it killed for
    the cancel (release_worker). One wins; the others are told it is no longer theirs."""
    kwargs = r.connection_pool.connection_kwargs
    pool = redis.ConnectionPool(host=kwargs["host"], port=kwargs["port"])
    scripts, completer, canceler, supervisor = (
        Scripts(redis.Redis(connection_pool=pool), K, POLICY) for _ in range(4)
    )
    wins = {"completed": 0, "canceled": 0}
    for n in range(200):
        jid = f"00000000-0000-4000-8000-{n + 100:012d}"
        token = start(scripts, jid).token
        scripts.cancel(jid, by="race")
        done, canceled, released = race(
            [
                lambda jid=jid, token=token: completer.complete(jid, token, "1"),
                lambda jid=jid, token=token: canceler.cancel_running(jid, token, "sigterm"),
                lambda jid=jid: supervisor.release_worker("w1", running=jid, canceling=True),
            ]
        )
        status = str(job(r, jid).status)
        won = [done.code is Code.DONE, canceled.code is Code.DONE, bool(released)]
        assert sum(won) == 1, (n, done, canceled, released)
        assert status == ("completed" if won[0] else "canceled"), (n, status, won)
        ends = [e.event for e in entries(r, jid) if e.event in ("completed", "canceled")]
        assert len(ends) == 1, ends
        assert (r.zscore(K.completed, jid) is None) != (r.zscore(K.canceled, jid) is None)
        assert r.zscore(K.processing, jid) is None and r.zscore(K.retrying, jid) is None
        assert r.zcard(K.pending) == 0
        wins[status] += 1
    stream = events(r)
    for n in range(200):
        jid = f"00000000-0000-4000-8000-{n + 100:012d}"
        names = [e["e"] for e in stream if e.get("j") == jid]
        assert names in (
            ["enqueued", "claimed", "cancel_requested", "completed"],
            ["enqueued", "claimed", "cancel_requested", "canceled"],
        ), names
    print(f"race: {wins}")
