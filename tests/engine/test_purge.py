"""purge.lua: a dead job is deleted for good, its DLQ entry with it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from shared.engine.engine_types import JobNotFound, WrongState
from shared.engine.scripts import TOMBSTONE_TTL_MS, Scripts
from tests.engine.conftest import (
    J1,
    J2,
    T0,
    K,
    assert_ttl,
    changed,
    enqueue,
    fail_to_retrying,
    finish,
    kill,
    snapshot,
    start,
)


def test_purge_deletes_the_dead_job_and_its_dlq_entry_and_leaves_a_tombstone(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    kill(scripts, J1)
    kill(scripts, J2, now=T0 + 1)
    pin_request_id("purge-1")
    before = snapshot(r)

    assert scripts.purge(J1) == "t"  # the type, for the caller's log line and counter

    after = snapshot(r)
    assert changed(before, after) == {K.job(J1), K.dead, K.tombstone(J1)}
    assert K.job(J1) not in after
    assert after[K.dead] == [(J2, T0 + 1)]
    assert after[K.tombstone(J1)] == "purge-1|t"
    assert_ttl(r, K.tombstone(J1), TOMBSTONE_TTL_MS)


def test_repeated_purge_with_the_same_request_id_succeeds_again(
    r: redis.Redis, scripts: Scripts, pin_request_id: Callable[[str], None]
) -> None:
    kill(scripts, J1)
    pin_request_id("purge-1")
    scripts.purge(J1)
    before = snapshot(r)

    # No JobNotFound: the reply of the first was lost, not the job; and the same answer.
    assert scripts.purge(J1) == "t"

    assert changed(before, snapshot(r)) == set()


def test_purge_of_a_purged_job_by_another_request_is_not_found(scripts: Scripts) -> None:
    kill(scripts, J1)
    scripts.purge(J1)

    with pytest.raises(JobNotFound):
        scripts.purge(J1)


@pytest.mark.parametrize("state", ["pending", "processing", "retrying", "completed"])
def test_purge_refuses_a_job_that_is_not_dead(r: redis.Redis, scripts: Scripts, state: str) -> None:
    {
        "pending": enqueue,
        "processing": start,
        "retrying": fail_to_retrying,
        "completed": finish,
    }[state](scripts, J1)
    before = snapshot(r)

    with pytest.raises(WrongState) as raised:
        scripts.purge(J1)

    assert raised.value.status == state
    assert changed(before, snapshot(r)) == set()


def test_purge_of_a_missing_job_is_not_found(r: redis.Redis, scripts: Scripts) -> None:
    with pytest.raises(JobNotFound):
        scripts.purge(J1)
    assert snapshot(r) == {}
