"""Routing in the claim scripts: a worker takes only the job types it runs (docs/QUEUES.md).

A claim (claim.lua, and complete.lua's claim part) carries the worker's runnable types. When
the queue's best job is of another type, nothing is claimed, the job stays exactly where it was
(same pending score and member, same pending_since score) and the answer names its type; the
wake-up hint goes back, for a worker that runs it.
"""

from __future__ import annotations

import redis

from shared.engine.engine_types import Code, NotRunnable
from shared.engine.scripts import Scripts, runnable_arg
from shared.model.jobs import JobState
from tests.engine.conftest import (
    J1,
    J2,
    J3,
    POLICY,
    T0,
    K,
    changed,
    job,
    pending_member,
    request,
    snapshot,
    start,
)

PDF = frozenset({"pdf"})


def put(scripts: Scripts, jid: str, job_type: str, *, now: int = T0, **fields: object) -> None:
    """Enqueue a job of `job_type`."""
    assert scripts.enqueue(request(job_type, **fields), jid, now_ms=now).created


def test_a_claim_takes_a_job_of_a_type_it_runs_exactly_as_an_unfiltered_claim_does(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, "pdf", priority=2)
    put(scripts, J2, "email")
    before = snapshot(r)

    claimed = scripts.claim("w1", runnable=frozenset({"email", "pdf"}), now_ms=T0 + 5)

    assert claimed is not None and not isinstance(claimed, NotRunnable)
    assert (claimed.id, claimed.attempts, claimed.token) == (J1, 1, 1)
    assert changed(before, snapshot(r)) == {
        K.job(J1),
        K.pending,
        K.pending_since,
        K.processing,
        K.last_claim("w1"),
    }


def test_a_job_of_another_type_stays_exactly_in_place_and_the_claim_names_its_type(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, "email", priority=5)
    put(scripts, J2, "pdf", now=T0 + 1)
    put(scripts, J3, "pdf", priority=-3, now=T0 + 2)
    r.delete(K.wake)
    before = snapshot(r)

    answer = scripts.claim("w1", runnable=PDF, now_ms=T0 + 10)

    after = snapshot(r)
    assert answer == NotRunnable("default", "email")
    # Order, members and scores of both indexes as they were; the job untouched; no lease,
    # no claim pointer. Only a wake-up hint, given back for a worker that runs email.
    assert changed(before, after) == {K.wake}
    assert after[K.pending] == [
        (pending_member(1, J1), -5),
        (pending_member(2, J2), 0),
        (pending_member(3, J3), 3),
    ]
    assert after[K.pending_since] == [(J1, T0), (J2, T0 + 1), (J3, T0 + 2)]
    assert after[K.wake] == [1]
    assert job(r, J1).status is JobState.PENDING and job(r, J1).attempts == 0


def test_a_refused_claim_takes_nothing_behind_the_job_it_left(
    r: redis.Redis, scripts: Scripts
) -> None:
    # Head of line: the queue's first job decides; the pdf job behind it waits for it to go.
    put(scripts, J1, "email")
    put(scripts, J2, "pdf")

    assert scripts.claim("w1", runnable=PDF, now_ms=T0) == NotRunnable("default", "email")
    assert job(r, J2).status is JobState.PENDING

    email = scripts.claim("w2", runnable=frozenset({"email"}), now_ms=T0 + 1)
    pdf = scripts.claim("w1", runnable=PDF, now_ms=T0 + 2)
    assert email is not None and not isinstance(email, NotRunnable) and email.id == J1
    assert pdf is not None and not isinstance(pdf, NotRunnable) and pdf.id == J2


def test_the_job_a_worker_left_is_claimed_later_as_if_never_refused(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, "email")
    for n in range(3):
        assert scripts.claim("w1", runnable=PDF, now_ms=T0 + n) is not None

    claimed = scripts.claim("w2", runnable=frozenset({"email"}), now_ms=T0 + 50)

    assert claimed is not None and not isinstance(claimed, NotRunnable)
    assert (claimed.id, claimed.attempts, claimed.token) == (J1, 1, 1)
    # Its queue wait counts from when it became claimable, refusals or not.
    assert claimed.extra["eligible_at"] == str(T0)
    assert r.exists(K.pending, K.pending_since) == 0


def test_types_match_whole_names_only(r: redis.Redis, scripts: Scripts) -> None:
    for n, job_type in enumerate(["pd", "pdf2", "x.pdf", "pdf:v2"]):
        put(scripts, J1, job_type)
        assert scripts.claim("w1", runnable=PDF, now_ms=T0 + n) == NotRunnable("default", job_type)
        r.flushdb()


def test_no_runnable_set_takes_any_type_and_an_empty_one_takes_none(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, "email")

    assert scripts.claim("w1", runnable=frozenset(), now_ms=T0) == NotRunnable("default", "email")
    claimed = scripts.claim("w1", now_ms=T0)
    assert claimed is not None and not isinstance(claimed, NotRunnable) and claimed.id == J1


def test_an_entry_whose_hash_is_gone_is_still_dropped_before_a_refusal(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, J1, "pdf")
    put(scripts, J2, "email")
    r.delete(K.job(J1))

    assert scripts.claim("w1", runnable=PDF, now_ms=T0) == NotRunnable("default", "email")

    assert [m for m, _ in snapshot(r)[K.pending]] == [pending_member(2, J2)]
    assert [m for m, _ in snapshot(r)[K.pending_since]] == [J2]


def test_refusals_give_back_hints_up_to_the_cap(r: redis.Redis, scripts: Scripts) -> None:
    put(scripts, J1, "email")
    r.delete(K.wake)

    for n in range(POLICY.wake_cap + 1):
        assert scripts.claim("w1", runnable=PDF, now_ms=T0 + n) is not None

    # One over the cap trims to half of it, as an enqueue's hint does (includes/common.lua).
    assert 1 <= r.llen(K.wake) <= POLICY.wake_cap


def test_complete_then_refuse_the_next_job_completes_and_leaves_the_next_in_place(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, job_type="pdf").token
    put(scripts, J2, "email")
    r.delete(K.wake)
    before = snapshot(r)

    ack = scripts.complete(J1, token, claim_next_for="w1", runnable=PDF, now_ms=T0 + 10)

    after = snapshot(r)
    assert ack.code is Code.DONE and ack.next_job == NotRunnable("default", "email")
    assert job(r, J1).status is JobState.COMPLETED
    assert changed(before, after) == {K.job(J1), K.processing, K.completed, K.wake}
    assert after[K.pending] == before[K.pending]
    assert after[K.pending_since] == before[K.pending_since]


def test_complete_claims_a_next_job_of_a_type_it_runs(r: redis.Redis, scripts: Scripts) -> None:
    token = start(scripts, J1, job_type="pdf").token
    put(scripts, J2, "pdf")

    ack = scripts.complete(J1, token, claim_next_for="w1", runnable=PDF, now_ms=T0 + 10)

    assert ack.code is Code.DONE
    assert ack.next_job is not None and not isinstance(ack.next_job, NotRunnable)
    assert (ack.next_job.id, ack.next_job.worker_id) == (J2, "w1")


def test_a_repeated_complete_after_a_refusal_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    token = start(scripts, J1, job_type="pdf").token
    put(scripts, J2, "email")
    scripts.complete(J1, token, claim_next_for="w1", runnable=PDF, now_ms=T0 + 10)
    before = snapshot(r)

    again = scripts.complete(J1, token, claim_next_for="w1", runnable=PDF, now_ms=T0 + 20)

    assert again.code is Code.DONE and again.next_job is None
    assert changed(before, snapshot(r)) == set()


def test_the_runnable_argument_lists_whole_names_and_leaves_out_impossible_ones() -> None:
    assert runnable_arg(None) == ""
    assert runnable_arg(frozenset()) == "|"
    assert runnable_arg(frozenset({"pdf", "a.b:c-d_e"})) == "|a.b:c-d_e|pdf|"
    # "x|pdf" could only make the script match other types: no job can be of it.
    assert runnable_arg(frozenset({"x|pdf", "email", ""})) == "|email|"


def test_a_dotted_type_is_runnable_by_its_exact_name_only(r: redis.Redis, scripts: Scripts) -> None:
    # workerd.demo's types are dotted (demo.noop): as a Lua pattern "demo.noop" would match
    # "demoxnoop", and "demo" is its prefix; a host running either must not take it.
    put(scripts, J1, "demo.noop", priority=2)
    put(scripts, J2, "demoxnoop", priority=1)
    put(scripts, J3, "demo")
    lookalike, prefix, dotted = (
        frozenset({"demoxnoop"}),
        frozenset({"demo"}),
        frozenset({"demo.noop"}),
    )

    assert scripts.claim("w1", runnable=lookalike, now_ms=T0 + 1) == NotRunnable(
        "default", "demo.noop"
    )
    assert scripts.claim("w1", runnable=prefix, now_ms=T0 + 2) == NotRunnable(
        "default", "demo.noop"
    )
    assert scripts.claim("w1", runnable=dotted, now_ms=T0 + 3).id == J1
    assert scripts.claim("w2", runnable=dotted, now_ms=T0 + 4) == NotRunnable(
        "default", "demoxnoop"
    )
    assert scripts.claim("w2", runnable=lookalike, now_ms=T0 + 5).id == J2
    assert scripts.claim("w3", runnable=prefix, now_ms=T0 + 6).id == J3
