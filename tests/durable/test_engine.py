"""Durable mode in the engine, on a real primary and replica: what WAIT confirms, and when.

Freezing the replica (SIGSTOP) keeps it connected but silent: the primary's WAIT then times
out, which is what a replica that lags or is cut off looks like to the primary.
"""

from __future__ import annotations

import time

import pytest
import redis

from shared.engine import durable
from shared.engine.engine_types import Code, Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.support.replicated import Replicated
from tests.support.tools import commands_caused

TIMEOUT_MS = 300
# A WAIT that times out answers this long after its timeout at most (loopback, an idle machine
# shared with other tests).
LATE = 0.5
DURABLE = Policy(wait_replicas=1, wait_timeout_ms=TIMEOUT_MS)
K = Keys()


def engine(client: redis.Redis, policy: Policy = DURABLE) -> Scripts:
    scripts = Scripts(client, K, policy)
    scripts.load()
    return scripts


def job_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.scan_iter(match=K.job("*")))


def test_enqueue_is_on_the_replica_when_the_answer_arrives(
    primary: redis.Redis, replica: redis.Redis
) -> None:
    result = engine(primary).enqueue(validate_enqueue({"type": "t"}), "j-1")
    # Read at once, no polling: WAIT answered only once the replica had acknowledged it.
    on_replica = replica.hget(K.job("j-1"), "status")
    assert result.confirmation is not None
    assert (result.confirmation.acked, result.confirmation.confirmed) == (1, True)
    assert on_replica == b"pending"


def test_enqueue_with_the_replica_frozen_is_unconfirmed_within_the_timeout(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    scripts = engine(primary)
    body = validate_enqueue({"type": "t", "payload": {"n": 1}})
    pair.replica.freeze()
    started = time.monotonic()
    first = scripts.enqueue(body, "j-1", idempotency_key="key-1")
    took = time.monotonic() - started
    assert first.confirmation is not None and not first.confirmation.confirmed
    assert first.confirmation.acked == 0 and first.created
    assert TIMEOUT_MS / 1000 * 0.9 <= took < TIMEOUT_MS / 1000 + LATE
    # On the primary, once. A resend with the same key makes nothing more and waits again.
    again = scripts.enqueue(body, "j-2", idempotency_key="key-1")
    assert (again.job_id, again.created) == ("j-1", False)
    assert again.confirmation is not None and not again.confirmation.confirmed
    assert job_keys(primary) == [K.job("j-1").encode()]
    pair.replica.thaw()
    confirmed = scripts.enqueue(body, "j-3", idempotency_key="key-1")
    assert confirmed.confirmation is not None and confirmed.confirmation.confirmed
    assert (confirmed.job_id, confirmed.created) == ("j-1", False)
    assert replica.hget(K.job("j-1"), "status") == b"pending"
    assert job_keys(primary) == [K.job("j-1").encode()]


def test_the_wait_covers_what_other_connections_wrote(
    pair: Replicated, primary: redis.Redis
) -> None:
    """The marker: WAIT alone waits for its own connection's last write. A batch's WAIT may go
    out on another pooled connection than its MULTI/EXEC (gateway threads share a pool), one
    whose last write the replica has: without the marker it would confirm at once."""
    stale = pair.primary.client()  # one pooled connection: a single thread reuses it
    try:
        # Its last command was answered once the replica had everything up to it.
        assert stale.execute_command("WAIT", 1, 2000) == 1
        pair.replica.freeze()
        engine(primary).enqueue(validate_enqueue({"type": "t"}), "j-1")  # not replicated
        _, confirmation = durable.write_then_wait(
            stale,
            lambda pipe: None,
            op="enqueue_batch",
            replicas=1,
            timeout_ms=50,
            marker=K.durable_marker,
        )
    finally:
        stale.close()
    assert (confirmation.acked, confirmation.confirmed) == (0, False)


def test_a_batch_waits_after_its_transaction(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    scripts = engine(primary)
    batch = [(validate_enqueue({"type": "t", "payload": {"n": n}}), f"b-{n}") for n in range(3)]
    results = scripts.enqueue_many(batch)
    assert all(r.confirmation is not None and r.confirmation.confirmed for r in results)
    assert [replica.exists(K.job(f"b-{n}")) for n in range(3)] == [1, 1, 1]
    pair.replica.freeze()
    more = [(validate_enqueue({"type": "t", "payload": {"n": n}}), f"c-{n}") for n in range(3)]
    held = scripts.enqueue_many(more, idempotency_key="batch-1")
    assert {r.confirmation.confirmed for r in held if r.confirmation} == {False}
    pair.replica.thaw()
    again = scripts.enqueue_many(more, idempotency_key="batch-1")
    assert [r.job_id for r in again] == ["c-0", "c-1", "c-2"]
    assert all(r.confirmation is not None and r.confirmation.confirmed for r in again)
    assert len(job_keys(primary)) == 6


def test_complete_and_fail_report_what_wait_answered(
    pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    scripts = engine(primary)
    for n in (1, 2, 3):
        scripts.enqueue(validate_enqueue({"type": "t", "max_retries": 1}), f"j-{n}")
    first = scripts.claim("w1")
    assert first is not None and not isinstance(first, type(None))
    done = scripts.complete(first.id, first.token, "1")
    assert done.code is Code.DONE and done.confirmation is not None
    assert done.confirmation.confirmed
    assert replica.hget(K.job(first.id), "status") == b"completed"
    pair.replica.freeze()
    second = scripts.claim("w1")
    held = scripts.complete(second.id, second.token, "2")
    assert held.code is Code.DONE and held.confirmation is not None
    assert not held.confirmation.confirmed
    assert primary.hget(K.job(second.id), "status") == b"completed"  # done, not confirmed
    third = scripts.claim("w1")
    failed = scripts.fail(third.id, third.token, "E: x")
    assert failed.code is Code.DEAD and failed.confirmation is not None
    assert (failed.confirmation.op, failed.confirmation.confirmed) == ("fail", False)


@pytest.mark.parametrize("replicas", [0, 1])
def test_off_sends_no_wait_and_on_sends_one_per_write(primary: redis.Redis, replicas: int) -> None:
    """With 0 replicas nothing changes (tests/engine/test_budgets.py holds the scripts' own
    commands); with 1, each acknowledging write costs exactly a PUBLISH and a WAIT more."""
    scripts = engine(primary, Policy(wait_replicas=replicas, wait_timeout_ms=TIMEOUT_MS))
    body = validate_enqueue({"type": "t", "max_retries": 1})

    def writes() -> None:
        scripts.enqueue(body, "j-1")
        scripts.enqueue(body, "j-2", idempotency_key="k")
        scripts.enqueue_many([(body, "j-3")])
        job = scripts.claim("w1")
        scripts.complete(job.id, job.token, "1")
        job = scripts.claim("w1")
        scripts.fail(job.id, job.token, "E: x")

    counts = commands_caused(primary, writes)
    assert (counts["wait"], counts["publish"]) == (5 * replicas, 5 * replicas)
    reads = commands_caused(primary, lambda: scripts.claim("w1"))
    assert (reads["wait"], reads["publish"]) == (0, 0)  # a claim acknowledges nothing


def test_a_durable_write_reloads_scripts_redis_lost(
    primary: redis.Redis, replica: redis.Redis
) -> None:
    """A failover or restart empties the script cache: the pipeline's EVALSHA is refused
    (NOSCRIPT, nothing written), the scripts are loaded and the write made once."""
    scripts = engine(primary)
    primary.script_flush()
    result = scripts.enqueue(validate_enqueue({"type": "t"}), "j-1")
    assert result.created and result.confirmation is not None and result.confirmation.confirmed
    assert replica.hget(K.job("j-1"), "status") == b"pending"
    job = scripts.claim("w1")
    primary.script_flush()
    done = scripts.complete(job.id, job.token, "1")
    assert done.code is Code.DONE and done.confirmation is not None
    assert done.confirmation.confirmed


def test_start_up_says_when_no_write_could_be_confirmed(
    primary: redis.Redis, replica: redis.Redis
) -> None:
    """The gateway and workerd log this as a config_warning at start (shared.engine.durable)."""
    assert durable.replica_shortfall(primary, 1) is None
    too_many = durable.replica_shortfall(primary, 2)
    assert (
        too_many is not None
        and "the primary has 1 of 2 replicas connected: until one more connects," in too_many
    )
    not_primary = durable.replica_shortfall(replica, 1)
    assert not_primary is not None and "role is slave" in not_primary
