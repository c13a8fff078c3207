"""release_worker.lua: whatever job a dead worker still holds goes back at once, found by the
worker's id (its supervisor may never have learned which job that was). Only the job its slot
showed running gets the release's mode; a job it held but never started goes back as a drain
gives it: it cannot have killed its worker."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine import history
from shared.engine.engine_types import Code, Released
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    POLICY,
    T0,
    K,
    changed,
    claim,
    enqueue,
    job,
    pending_member,
    snapshot,
    start,
)


def entries(r: redis.Redis, jid: str) -> list[str]:
    """Return the events of a job's history, oldest first."""
    kept = history.read(r, K, jid, "default")
    assert kept is not None
    return [entry.event for entry in kept.entries]


def stream(r: redis.Redis) -> list[tuple[str, str]]:
    """Return the queue's events as (event, job id), oldest first."""
    return [(f[b"e"].decode(), f[b"j"].decode()) for _, f in r.xrange(K.events)]


def counts(r: redis.Redis, jid: str) -> tuple[JobState, int, int]:
    found = job(r, jid)
    return found.status, found.attempts, found.recoveries


def test_release_worker_requeues_uncounted_the_job_a_dead_worker_claimed_in_a_complete(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    # The worker completed J1 and, in the same call, claimed J2, then died before it could
    # say so: only Redis knows it holds J2, which never started (its slot still shows J1).
    # Another worker's job is left alone.
    token = start(scripts, J1, worker="w1").token
    start(scripts, J3, worker="w2")
    enqueue(scripts, J2, priority=1)
    assert scripts.complete(J1, token, claim_next_for="w1", now_ms=T0).next_job is not None
    now = T0 + 10  # long before the lease ends
    pin_request_id("fixed")
    r.delete(K.wake)  # idle workers took the hints: the release leaves one
    before = snapshot(r)

    released = scripts.release_worker("w1", running=J1, now_ms=now)

    after = snapshot(r)
    assert released == [Released(Code.DONE, J2, "t")]
    assert changed(before, after) == {
        K.job(J2),
        K.processing,
        K.pending,
        K.pending_since,
        K.wake,
        K.reply("fixed"),
    }
    assert after[K.processing] == [(J3, T0 + POLICY.lease_ms)]
    assert after[K.pending] == [(pending_member(3, J2), -1)]  # its place in line, kept
    assert after[K.wake] == [1]
    again = job(r, J2)
    assert (again.status, again.attempts, again.recoveries) == (JobState.PENDING, 0, 0)
    assert entries(r, J2)[-1] == "released"
    assert job(r, J3).status is JobState.PROCESSING


def test_release_worker_of_a_drained_worker_counts_no_recovery(
    r: redis.Redis, scripts: Scripts
) -> None:
    start(scripts, J1, worker="w1")

    released = scripts.release_worker("w1", running=J1, drained=True, now_ms=T0 + 1)

    assert released == [Released(Code.DONE, J1, "t")]
    assert (job(r, J1).status, job(r, J1).recoveries) == (JobState.PENDING, 0)


def test_release_worker_isolating_counts_no_recovery_and_marks_the_job_to_run_alone(
    r: redis.Redis, scripts: Scripts
) -> None:
    # A threaded worker died of a cause nobody knows, with several jobs running: none is
    # blamed; each goes back uncounted, and its next claim (and the ones after) says "alone".
    start(scripts, J1, worker="w1.t0")
    assert scripts.claim("w1.t0", now_ms=T0 + 1) is None  # nothing else: J1 alone is held

    released = scripts.release_worker("w1.t0", running=J1, isolate=True, now_ms=T0 + 1)

    assert released == [Released(Code.DONE, J1, "t")]
    assert (job(r, J1).status, job(r, J1).recoveries) == (JobState.PENDING, 0)
    again = scripts.claim("w2", now_ms=T0 + 2)
    assert again is not None and again.extra["alone"] == "1"
    # Its next death, alone, is its own: a crash counts as ever, and the mark stays.
    assert scripts.release_worker("w2", running=J1, now_ms=T0 + 3)[0].code is Code.DONE
    assert job(r, J1).recoveries == 1
    assert scripts.claim("w3", now_ms=T0 + 4).extra["alone"] == "1"


def test_a_job_never_isolated_claims_without_the_mark(r: redis.Redis, scripts: Scripts) -> None:
    assert "alone" not in start(scripts, J1).extra


def test_release_worker_past_the_recovery_cap_declares_the_job_dead(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    for n in range(POLICY.max_recoveries):
        assert scripts.claim("w1", now_ms=T0 + n) is not None
        assert scripts.release_worker("w1", running=J1, now_ms=T0 + n)[0].code is Code.DONE
    assert scripts.claim("w1", now_ms=T0 + 10) is not None

    released = scripts.release_worker("w1", running=J1, now_ms=T0 + 11)

    assert released == [Released(Code.DEAD, J1, "t")]
    assert r.zscore(K.dead, J1) == T0 + 11
    assert job(r, J1).status is JobState.DEAD


def test_release_worker_of_a_worker_that_holds_nothing_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, worker="w1").token
    assert scripts.complete(J1, token, now_ms=T0).code is Code.DONE  # finished: not held
    start(scripts, J2, worker="w2")
    before = snapshot(r)

    assert scripts.release_worker("w1", running=J1, now_ms=T0 + 1) == []

    assert changed(before, snapshot(r)) == set()


def test_a_repeated_release_worker_answers_as_the_first_did(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    start(scripts, J1, worker="w1")
    pin_request_id("req-1")
    first = scripts.release_worker("w1", running=J1, now_ms=T0 + 1)
    before = snapshot(r)

    again = scripts.release_worker("w1", running=J1, now_ms=T0 + 2)
    assert again == first == [Released(Code.DONE, J1, "t")]

    assert changed(before, snapshot(r)) == set()
    assert job(r, J1).recoveries == 1  # released once


# --- a worker holding a job it never started ---------------------------------------------------


def hold_two(scripts: Scripts) -> None:
    """w1 runs J1 (its slot shows it) and holds J2, claimed ahead and never started."""
    start(scripts, J1, worker="w1")
    start(scripts, J2, worker="w1", now=T0 + 1)


def test_a_crash_counts_a_recovery_for_the_running_job_only(
    r: redis.Redis, scripts: Scripts
) -> None:
    hold_two(scripts)
    r.delete(K.events)

    released = scripts.release_worker("w1", running=J1, now_ms=T0 + 2)

    assert released == [Released(Code.DONE, J1, "t"), Released(Code.DONE, J2, "t")]
    assert counts(r, J1) == (JobState.PENDING, 0, 1)
    assert counts(r, J2) == (JobState.PENDING, 0, 0)  # its attempt given back, uncounted
    assert (entries(r, J1)[-1], entries(r, J2)[-1]) == ("recovered", "released")
    assert stream(r) == [("recovered", J1), ("released", J2)]


def test_a_held_job_at_the_recovery_cap_is_not_killed_by_a_death_it_did_not_cause(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J2)
    for n in range(POLICY.max_recoveries):  # J2 has killed its worker as often as allowed
        assert scripts.claim("w2", now_ms=T0 + n) is not None
        assert scripts.release_worker("w2", running=J2, now_ms=T0 + n)[0].code is Code.DONE
    start(scripts, J1, worker="w1", now=T0 + 10, priority=1)  # ahead of J2 in line
    claim(scripts, J2, worker="w1", now=T0 + 11)  # claimed ahead

    released = scripts.release_worker("w1", running=J1, now_ms=T0 + 12)

    assert released == [Released(Code.DONE, J1, "t"), Released(Code.DONE, J2, "t")]
    assert counts(r, J1) == (JobState.PENDING, 0, 1)
    assert counts(r, J2) == (JobState.PENDING, 0, POLICY.max_recoveries)


def test_an_isolate_marks_the_running_job_only(r: redis.Redis, scripts: Scripts) -> None:
    hold_two(scripts)

    released = scripts.release_worker("w1", running=J1, isolate=True, now_ms=T0 + 2)

    assert [x.code for x in released] == [Code.DONE, Code.DONE]
    assert r.hget(K.job(J1), "alone") == b"1"
    assert r.hget(K.job(J2), "alone") is None
    assert counts(r, J1) == counts(r, J2) == (JobState.PENDING, 0, 0)
    assert (entries(r, J1)[-1], entries(r, J2)[-1]) == ("released", "released")


def test_a_cancel_ends_the_running_job_and_gives_the_held_one_back(
    r: redis.Redis, scripts: Scripts
) -> None:
    # The supervisor killed w1 for J1's cancel: J1 ends canceled; J2, claimed ahead, goes back.
    hold_two(scripts)
    assert scripts.cancel(J1, by="api", now_ms=T0 + 1).changed
    r.delete(K.events)

    released = scripts.release_worker("w1", running=J1, canceling=True, now_ms=T0 + 2)

    assert released == [Released(Code.CANCELED, J1, "t"), Released(Code.DONE, J2, "t")]
    assert job(r, J1).status is JobState.CANCELED
    kept = history.read(r, K, J1, "default")
    assert kept is not None and kept.entries[-1].stopped == "sigkill"
    assert counts(r, J2) == (JobState.PENDING, 0, 0)
    assert entries(r, J2)[-1] == "released"
    assert stream(r) == [("canceled", J1), ("released", J2)]


@pytest.mark.parametrize(
    ("running", "mode"),
    [("", {}), ("", {"canceling": True}), ("", {"isolate": True}), (J1, {"drained": True})],
    ids=["none shown", "none shown, cancel", "none shown, isolate", "drain"],
)
def test_nothing_counts_with_no_job_shown_running_nor_in_a_drain(
    r: redis.Redis, scripts: Scripts, running: str, mode: dict[str, bool]
) -> None:
    # None shown: its slot showed no job (it died inside a claim), or one no longer its own (a
    # lost lease). A drain gives every job back uncounted, as it always did.
    hold_two(scripts)

    released = scripts.release_worker("w1", running=running, now_ms=T0 + 2, **mode)

    assert released == [Released(Code.DONE, J1, "t"), Released(Code.DONE, J2, "t")]
    assert counts(r, J1) == counts(r, J2) == (JobState.PENDING, 0, 0)
    assert (entries(r, J1)[-1], entries(r, J2)[-1]) == ("released", "released")
    assert r.hget(K.job(J1), "alone") is None and r.hget(K.job(J2), "alone") is None


def test_a_repeated_release_of_two_held_jobs_answers_as_the_first_did(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    hold_two(scripts)
    pin_request_id("req-2")
    first = scripts.release_worker("w1", running=J1, now_ms=T0 + 2)
    before = snapshot(r)

    again = scripts.release_worker("w1", running=J1, now_ms=T0 + 3)

    assert again == first == [Released(Code.DONE, J1, "t"), Released(Code.DONE, J2, "t")]
    assert changed(before, snapshot(r)) == set()
    assert (job(r, J1).recoveries, job(r, J2).recoveries) == (1, 0)  # released once each
