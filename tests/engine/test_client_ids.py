"""A job id the client chose: one job per id, a different body refused, kept past the trim's caps
while young, and never a derived id's (shared.model.job_ids)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine.engine_types import EnqueueResult, JobIdConflict, TrimResult
from shared.engine.scripts import Scripts
from shared.model import ticks
from shared.model.job_ids import (
    CLIENT_ID_MEMORY_MS,
    client_id_problem,
    new_client_id,
    new_job_id,
    queue_tag,
)
from shared.model.jobs import JobState
from tests.engine.conftest import J1, J2, J3, J4, POLICY, T0, K, changed, job, request, snapshot
from tests.engine.conftest import finish as finish_job

C1, C2, C3 = (new_client_id("default") for _ in range(3))


def finish(scripts: Scripts, jid: str, *, now: int) -> None:
    """Run a job to completed; a client's id goes in the body as a client sends it."""
    fields = {"id": jid} if jid.startswith(queue_tag("default")) and jid[14] == "8" else {}
    finish_job(scripts, jid, now=now, **fields)


def test_a_client_id_makes_one_job_and_a_repeat_answers_it_not_created(
    r: redis.Redis, scripts: Scripts
) -> None:
    first = scripts.enqueue(request(id=C1, payload={"a": 1}), C1, now_ms=T0)
    before = snapshot(r)

    again = scripts.enqueue(request(id=C1, payload={"a": 1}), C1, now_ms=T0 + 50)

    assert first == EnqueueResult(C1, JobState.PENDING, created=True, created_at_ms=T0)
    assert again == EnqueueResult(C1, JobState.PENDING, created=False, created_at_ms=T0)
    assert again.existed
    assert changed(before, snapshot(r)) == set()
    assert job(r, C1).id == C1


def test_a_client_id_under_another_body_is_refused_and_changes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(id=C1, payload={"a": 1}), C1, now_ms=T0)
    before = snapshot(r)

    with pytest.raises(JobIdConflict) as refused:
        scripts.enqueue(request(id=C1, payload={"a": 2}), C1, now_ms=T0 + 50)
    with pytest.raises(JobIdConflict):
        scripts.enqueue(request(id=C1, payload={"a": 1}, priority=1), C1, now_ms=T0 + 50)

    assert refused.value.job_id == C1
    assert changed(before, snapshot(r)) == set()


def test_the_same_body_is_the_canonical_request_whatever_its_key_order(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(id=C1, payload={"a": 1, "b": 2}), C1, now_ms=T0)
    again = scripts.enqueue(request(id=C1, payload={"b": 2, "a": 1}), C1, now_ms=T0 + 1)
    assert again.existed and not again.created


def test_a_client_id_job_keeps_a_short_digest_and_a_server_id_job_none(
    r: redis.Redis, scripts: Scripts
) -> None:
    scripts.enqueue(request(id=C1), C1, now_ms=T0)
    scripts.enqueue(request(), J1, now_ms=T0)
    assert len(r.hget(K.job(C1), "digest") or b"") == 32
    assert r.hget(K.job(J1), "digest") is None


def test_a_finished_client_id_job_outlives_the_count_cap_until_it_is_old(
    r: redis.Redis,
    make_scripts: Callable[..., Scripts],
    pin_request_id: Callable[[str], None],
) -> None:
    # Five finished jobs over a cap of three (retention an hour): the two oldest are client
    # ids, so the cap keeps them while young and, behind them, forgets nothing; once old, they
    # go first.
    scripts = make_scripts(finished_retention_ms=3_600_000)
    for n, jid in enumerate((C1, C2, J1, J2, J3)):
        finish(scripts, jid, now=T0 + n)
    assert POLICY.finished_max_jobs == 3

    pin_request_id("young")
    assert scripts.trim(now_ms=T0 + CLIENT_ID_MEMORY_MS - 1000) == TrimResult(0, 0, 0)
    assert r.exists(K.job(C1), K.job(C2)) == 2

    pin_request_id("old")
    assert scripts.trim(now_ms=T0 + CLIENT_ID_MEMORY_MS + 10).completed == 2
    assert r.exists(K.job(C1), K.job(C2)) == 0
    assert [m.decode() for m in r.zrange(K.completed, 0, -1)] == [J1, J2, J3]


def test_a_finished_client_id_job_outlives_a_retention_shorter_than_its_memory(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    finish(scripts, C1, now=T0)
    finish(scripts, J1, now=T0)
    assert POLICY.finished_retention_ms < CLIENT_ID_MEMORY_MS
    pin_request_id("past-retention")
    assert scripts.trim(now_ms=T0 + POLICY.finished_retention_ms + 1).completed == 1
    assert r.exists(K.job(C1)) == 1 and r.exists(K.job(J1)) == 0


def test_a_server_id_job_is_capped_as_before(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    for n, jid in enumerate((J1, J2, J3, J4, C3)):
        finish(scripts, jid, now=T0 + n)
    pin_request_id("pinned")
    assert scripts.trim(now_ms=T0 + 10).completed == 2
    assert [m.decode() for m in r.zrange(K.completed, 0, -1)] == [J3, J4, C3]


def test_client_ids_never_take_a_derived_id() -> None:
    tick = ticks.job_id("nightly", T0 + 86_400_000)  # a future tick's id, predictable
    assert tick[14] == "4" and new_job_id("default")[14] == "4"
    assert client_id_problem(tick, "default") is not None
    assert client_id_problem(new_client_id("default"), "default") is None
    assert "the tag of queue 'other'" in (client_id_problem(C1, "other") or "")


def test_the_engine_refuses_a_client_id_that_is_not_the_job_id(scripts: Scripts) -> None:
    with pytest.raises(ValueError):
        scripts.enqueue(request(id=C1), C2, now_ms=T0)
    with pytest.raises(ValueError):
        scripts.enqueue(request(id=C1), C1, idempotency_key="k", now_ms=T0)
