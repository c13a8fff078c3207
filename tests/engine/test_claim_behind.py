"""A claim sent behind an idle worker's BLPOP (Scripts.claim_behind, ScriptTransport.begin_behind),
against the private redis-server: Redis runs it as the BLPOP is served, before the client reads
anything; with a hint, or when the wait runs out; after a script flush; on a paused queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis

from shared.engine.engine_types import QueuePaused
from shared.engine.scripts import Scripts, new_request_id
from shared.engine.scripts.job_scripts import PendingClaim
from shared.model.jobs import JobState
from tests.engine.conftest import J1, J2, K, enqueue, job
from tests.support.tools import wait_until, waiting_in_blpop

DEADLINE = 5.0  # seconds any one expected step may take


def blpop(timeout: float) -> tuple[Any, ...]:
    return ("BLPOP", K.wake, timeout)


def claim_behind(scripts: Scripts, timeout: float) -> tuple[Any, PendingClaim]:
    return scripts.claim_behind(blpop(timeout), "w1", request_id=new_request_id())


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor


def test_the_claim_runs_as_the_hint_lands_before_the_waiting_client_reads_anything(
    r: redis.Redis, scripts: Scripts, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The waiting thread may read nothing until the test lets it: the job must be processing
    # by then, so the claim went out with the BLPOP and ran without the client's round trip.
    may_read = threading.Event()
    conn_type = type(r.connection_pool.get_connection())
    read, send = conn_type.read_response, conn_type.send_packed_command
    waiter: list[int] = []
    sent = threading.Event()  # the BLPOP and the claim went out: hold the waiter's reads

    def held_send(self: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
        result = send(self, command, *args, **kwargs)
        if b"BLPOP" in b"".join(command):  # not a new connection's handshake
            sent.set()
        return result

    def held_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        if sent.is_set() and threading.get_ident() == waiter[0]:
            assert may_read.wait(DEADLINE), "the test never let the waiting thread read"
        return read(self, *args, **kwargs)

    monkeypatch.setattr(conn_type, "send_packed_command", held_send)
    monkeypatch.setattr(conn_type, "read_response", held_read)

    def wait_and_claim() -> tuple[Any, Any]:
        waiter.append(threading.get_ident())
        popped, claim = claim_behind(scripts, 10)
        return popped, claim.result()

    pending: Future[tuple[Any, Any]] = pool.submit(wait_and_claim)
    wait_until(lambda: waiting_in_blpop(r), DEADLINE, "the BLPOP to block")
    enqueue(scripts, J1)  # pushes the wake-up hint
    wait_until(
        lambda: job(r, J1).status is JobState.PROCESSING, DEADLINE, "the claim to run in Redis"
    )
    assert job(r, J1).worker_id == "w1"
    may_read.set()
    popped, claimed = pending.result(DEADLINE)
    assert popped == [K.wake.encode(), b"1"]
    assert claimed is not None and claimed.id == J1 and claimed.status is JobState.PROCESSING
    assert claimed.attempts == 1 and claimed.worker_id == "w1"


def test_a_wait_that_runs_out_still_claims_a_job_whose_hint_was_lost(
    r: redis.Redis, scripts: Scripts
) -> None:
    enqueue(scripts, J1)
    r.delete(K.wake)  # the hint popped by a worker that died before claiming
    popped, claim = claim_behind(scripts, 0.05)
    assert popped is None
    claimed = claim.result()
    assert claimed is not None and claimed.id == J1
    assert job(r, J1).status is JobState.PROCESSING


def test_a_wait_that_runs_out_on_an_empty_queue_claims_nothing(scripts: Scripts) -> None:
    popped, claim = claim_behind(scripts, 0.05)
    assert popped is None and claim.result() is None


def test_the_claim_behind_survives_a_flushed_script_cache(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    r.script_flush()  # as a restart or failover leaves it: the claim answers NOSCRIPT
    popped, claim = claim_behind(scripts, 1)
    assert popped == [K.wake.encode(), b"1"]
    claimed = claim.result()
    assert claimed is not None and claimed.id == J1
    # Sound afterwards: the next call answers its own reply.
    enqueue(scripts, J2)
    again = scripts.claim("w1")
    assert again is not None and again.id == J2


def test_a_paused_queue_raises_having_claimed_nothing(r: redis.Redis, scripts: Scripts) -> None:
    enqueue(scripts, J1)
    scripts.pause_queue("default")
    popped, claim = claim_behind(scripts, 1)
    assert popped == [K.wake.encode(), b"1"]
    with pytest.raises(QueuePaused):
        claim.result()
    assert job(r, J1).status is JobState.PENDING


def test_an_error_from_the_wait_leaves_no_reply_to_answer_a_later_call(
    r: redis.Redis, scripts: Scripts
) -> None:
    r.set(K.wake, "not a list")  # BLPOP answers WRONGTYPE; the claim's reply follows it
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        claim_behind(scripts, 1)
    r.delete(K.wake)
    enqueue(scripts, J1)
    # The thread's kept connection again: its unread claim reply must not answer this BLPOP.
    popped, claim = claim_behind(scripts, 1)
    assert popped == [K.wake.encode(), b"1"]
    claimed = claim.result()
    assert claimed is not None and claimed.id == J1
