"""Durable mode on a real Redis Cluster (3 masters, a replica each): every WAIT goes to the
master owning the written slot, after a marker written in that slot (shared.engine.durable).

Read back on the replica of the slot's master right after the answer; a frozen (SIGSTOPped)
replica makes its master's writes unconfirmed, and only that master's.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.cluster import key_slot

import workerd.demo  # noqa: F401 (registers the demo handlers)
from shared.connect.redis_conn import connect
from shared.engine import durable
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tools import wait_until
from workerd.worker import WorkerProcess

K = Keys()
TIMEOUT = 0.3  # TASKFORGE_WAIT_TIMEOUT, seconds
LATE = 1.0  # a 503 comes at most this long after the timeout (two gunicorn workers, loaded CI)
SECRET = "payload-secret-c41d"  # must never reach a log line


def durable_env(cluster: RedisCluster) -> dict[str, str]:
    return {
        "REDIS_URL": f"redis+cluster://{cluster.seeds}",
        "TASKFORGE_WAIT_REPLICAS": "1",
        "TASKFORGE_WAIT_TIMEOUT": f"{int(TIMEOUT * 1000)}ms",
    }


SYNC_TIMEOUT_MS = 10_000  # for every replica to acknowledge its master's offset


def replicas_acknowledging(cluster: RedisCluster) -> None:
    """Return once every master's replica has acknowledged all its master wrote (WAIT, bounded).

    A replica just synced says "online" before its first acknowledgement (offset 0 for up to a
    second): a durable write meanwhile times out, rightly, which is not what a test here is for.
    """
    for master in cluster.masters():
        client = master.client(socket_timeout=SYNC_TIMEOUT_MS / 1000 + 2)
        try:
            assert client.wait(1, SYNC_TIMEOUT_MS) >= 1, f"no replica acks master {master.port}"
        finally:
            client.close()


@pytest.fixture
def scripts(cluster: RedisCluster) -> Iterator[Scripts]:
    """An engine in durable mode on the cluster, as the gateway builds it."""
    replicas_acknowledging(cluster)
    settings = Settings.from_env(durable_env(cluster))
    client = connect(settings, role="test")
    engine = Scripts(client, K, Policy.from_settings(settings))
    engine.load()
    try:
        yield engine
    finally:
        client.close()


@pytest.fixture
def frozen(cluster: RedisCluster) -> Iterator[list[RedisServer]]:
    """Replicas a test froze (append before freezing); thawed after it, and the cluster ok."""
    held: list[RedisServer] = []
    try:
        yield held
    finally:
        for node in held:
            node.thaw()
        cluster.wait_ok()
        replicas_acknowledging(cluster)


def replica_of_key(cluster: RedisCluster, key: str) -> RedisServer:
    return cluster.replica_of(cluster.master_of(key))


def read_on(node: RedisServer, key: str, field: str = "status") -> bytes | None:
    """HGET on that node itself; READONLY lets a replica answer for its master's slots."""
    client = node.client(socket_timeout=2)
    try:
        client.execute_command("READONLY")
        return client.hget(key, field)
    finally:
        client.close()


def job_keys_on(node: RedisServer, queue: str) -> list[bytes]:
    client = node.client(socket_timeout=2)
    try:
        return sorted(client.scan_iter(match=K.for_queue(queue).job("*")))
    finally:
        client.close()


def queue_on_other_master_than_global(cluster: RedisCluster) -> str:
    """Return a queue whose slot's master is not the global slot's (idempotency keys')."""
    global_master = cluster.master_of(K.global_slot_marker)
    for queue in queue_names_on_distinct_masters(cluster):
        if cluster.master_of(K.for_queue(queue).slot_marker) is not global_master:
            return queue
    raise LookupError("every queue on the global slot's master")


# --- the engine ------------------------------------------------------------------------------


def test_a_confirmed_enqueue_is_on_its_masters_replica(
    cluster: RedisCluster, scripts: Scripts
) -> None:
    for queue in queue_names_on_distinct_masters(cluster):
        request = validate_enqueue({"type": "t", "queue": queue, "payload": {"s": SECRET}})
        result = scripts.enqueue(request, f"j-{queue}")
        key = K.for_queue(queue).job(result.job_id)
        assert result.confirmation is not None and result.confirmation.confirmed, result
        # Read at once: the answer came after WAIT on the slot's master said its replica has it.
        assert read_on(replica_of_key(cluster, key), key) == b"pending"
        marker = K.for_queue(queue).slot_marker
        assert key_slot(marker.encode()) == key_slot(key.encode())  # the marker in the slot
        master = cluster.master_of(marker).client()
        try:
            assert master.get(marker) == b"enqueue"  # written there, and expiring
            assert 0 < master.pttl(marker) <= durable.MARKER_TTL_MS
        finally:
            master.close()


def test_a_frozen_replica_leaves_only_its_masters_writes_unconfirmed(
    cluster: RedisCluster, scripts: Scripts, frozen: list[RedisServer]
) -> None:
    queues = queue_names_on_distinct_masters(cluster)
    stopped = replica_of_key(cluster, K.for_queue(queues[0]).slot_marker)
    frozen.append(stopped)
    stopped.freeze()
    started = time.monotonic()
    cut_off = scripts.enqueue(validate_enqueue({"type": "t", "queue": queues[0]}), "j-cut")
    took = time.monotonic() - started
    assert cut_off.confirmation is not None and not cut_off.confirmation.confirmed
    assert cut_off.confirmation.acked == 0 and TIMEOUT * 0.9 <= took < TIMEOUT + LATE
    for queue in queues[1:]:
        other = scripts.enqueue(validate_enqueue({"type": "t", "queue": queue}), f"j-{queue}")
        assert other.confirmation is not None and other.confirmation.confirmed


def test_a_batch_across_masters_waits_on_each(
    cluster: RedisCluster, scripts: Scripts, frozen: list[RedisServer]
) -> None:
    queues = queue_names_on_distinct_masters(cluster)
    batch = [(validate_enqueue({"type": "t", "queue": q}), f"b-{q}") for q in queues]
    results = scripts.enqueue_many(batch, idempotency_key="batch-a")
    assert all(r.confirmation is not None and r.confirmation.confirmed for r in results)
    for queue, result in zip(queues, results, strict=True):
        key = K.for_queue(queue).job(result.job_id)
        assert read_on(replica_of_key(cluster, key), key) == b"pending"

    # The last queue's master only: the batch is unconfirmed, though two masters confirmed.
    stopped = replica_of_key(cluster, K.for_queue(queues[-1]).slot_marker)
    frozen.append(stopped)
    stopped.freeze()
    again = [(validate_enqueue({"type": "u", "queue": q}), f"c-{q}") for q in queues]
    results = scripts.enqueue_many(again, idempotency_key="batch-b")
    assert [r.confirmation.acked for r in results if r.confirmation] == [0, 0, 0]


def test_an_idempotency_key_is_confirmed_on_the_global_slots_master(
    cluster: RedisCluster, scripts: Scripts, frozen: list[RedisServer]
) -> None:
    """The key lies in the global slot: a key lost at its master's failover would let a resend
    make a second job. With that master's replica frozen, a keyed enqueue is unconfirmed, an
    unkeyed one (which writes only its queue's slot) confirmed."""
    queue = queue_on_other_master_than_global(cluster)
    stopped = replica_of_key(cluster, K.global_slot_marker)
    frozen.append(stopped)
    stopped.freeze()
    request = validate_enqueue({"type": "t", "queue": queue})
    keyed = scripts.enqueue(request, "j-keyed", idempotency_key="order-7")
    assert keyed.confirmation is not None and keyed.confirmation.acked == 0
    plain = scripts.enqueue(request, "j-plain")
    assert plain.confirmation is not None and plain.confirmation.confirmed


def test_a_stale_slot_map_is_refreshed_after_a_failover(
    cluster: RedisCluster, scripts: Scripts
) -> None:
    """A manual failover moves the queue's slot to the old replica: the engine's pipeline meets
    MOVED at the old master, refreshes the map and runs again there, confirmed."""
    queue = queue_names_on_distinct_masters(cluster)[0]
    marker = K.for_queue(queue).slot_marker
    first = scripts.enqueue(validate_enqueue({"type": "t", "queue": queue}), "j-before")
    assert first.confirmation is not None and first.confirmation.confirmed
    old = cluster.master_of(marker)
    new = cluster.replica_of(old)
    promote = new.client(socket_timeout=5)
    try:
        promote.execute_command("CLUSTER FAILOVER")
    finally:
        promote.close()
    cluster.wait_promoted(new)
    cluster.wait_ok()  # the old master now syncs as the new one's replica
    cluster_client: Any = scripts.redis
    assert cluster_client.get_node_from_key(marker).port == old.port  # the map is stale
    after = scripts.enqueue(validate_enqueue({"type": "t", "queue": queue}), "j-after")
    assert after.confirmation is not None and after.confirmation.confirmed
    key = K.for_queue(queue).job("j-after")
    assert read_on(old, key) == b"pending"  # the old master is the replica now
    assert cluster_client.get_node_from_key(marker).port == new.port


def test_the_start_check_reads_every_master(cluster: RedisCluster, scripts: Scripts) -> None:
    assert durable.replica_shortfall(scripts.redis, 1) is None
    too_many = durable.replica_shortfall(scripts.redis, 2)
    assert (
        too_many is not None
        and "cluster master" in too_many
        and "1 of 2 replicas connected" in too_many
    )


# --- a worker: an outcome counted only once confirmed -----------------------------------------


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_completion_is_counted_only_once_its_masters_replica_has_it(
    cluster: RedisCluster,
    scripts: Scripts,
    frozen: list[RedisServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings.from_env(durable_env(cluster))
    worker = WorkerProcess(settings, scripts, IdleSlot(), "w1", os.getppid())
    body = {"type": "demo.noop", "payload": {"secret": SECRET}}
    scripts.enqueue(validate_enqueue(body), "j-1")
    scripts.enqueue(validate_enqueue(body), "j-2")
    labels = {"type": "demo.noop", "queue": "default"}
    before = counter("taskforge_jobs_completed_total", **labels)
    timeouts = counter("taskforge_wait_replicas_timeouts_total", op="complete")

    def run_one() -> None:
        done = worker.jobs_done
        deadline = time.monotonic() + 5
        while worker.jobs_done == done:
            assert time.monotonic() < deadline, "the worker ran no job"
            worker.step()

    run_one()
    assert counter("taskforge_jobs_completed_total", **labels) == before + 1
    key = K.job("j-1")
    assert read_on(replica_of_key(cluster, key), key) == b"completed"

    stopped = replica_of_key(cluster, K.job("j-2"))
    frozen.append(stopped)
    stopped.freeze()
    with caplog.at_level(logging.INFO):
        run_one()
    master = cluster.master_of(K.job("j-2")).client()
    try:
        assert master.hget(K.job("j-2"), "status") == b"completed"  # done, not counted
    finally:
        master.close()
    assert counter("taskforge_jobs_completed_total", **labels) == before + 1
    assert counter("taskforge_wait_replicas_timeouts_total", op="complete") == timeouts + 1
    assert [r.getMessage() for r in caplog.records].count("write_not_replicated") == 1
    assert SECRET not in caplog.text


# --- the gateway ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def durable_gateway(
    redis_cluster: RedisCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    env = durable_env(redis_cluster)
    url = env.pop("REDIS_URL")
    with run_gunicorn(url, tmp_path_factory.mktemp("durable-cluster"), **env) as server:
        yield server


def post(gw: Gunicorn, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    started = time.monotonic()
    status, headers_back, doc = gw.request("POST", path, body, headers)
    return status, headers_back, doc, time.monotonic() - started


@pytest.mark.slow
def test_the_gateway_answers_201_with_the_job_on_the_replica_and_503_without(
    cluster: RedisCluster, durable_gateway: Gunicorn, frozen: list[RedisServer]
) -> None:
    replicas_acknowledging(cluster)
    queue = queue_on_other_master_than_global(cluster)
    k = K.for_queue(queue)
    body = {"type": "t", "queue": queue, "payload": {"s": SECRET}}
    status, _, doc, _ = post(durable_gateway, "/enqueue", body, key="order-0")
    first_id = doc["id"]
    # Read at once: the 201 left the gateway after WAIT confirmed the replica had the job.
    assert status == 201
    assert read_on(replica_of_key(cluster, k.job(first_id)), k.job(first_id)) == b"pending"

    stopped = replica_of_key(cluster, k.slot_marker)
    frozen.append(stopped)
    stopped.freeze()
    status, headers, doc, took = post(durable_gateway, "/enqueue", body, key="order-1")
    assert status == 503 and headers["retry-after"] == "1"
    assert (doc["code"], doc["replicas"], doc["wanted"]) == ("not_replicated", 0, 1)
    assert TIMEOUT * 0.9 <= took < TIMEOUT + LATE
    job_id = doc["job_id"]
    master = cluster.master_of(k.slot_marker)
    status, _, again, took = post(durable_gateway, "/enqueue", body, key="order-1")
    assert (status, again["code"], again["job_id"]) == (503, "not_replicated", job_id)
    assert took < TIMEOUT + LATE

    stopped.thaw()
    wait_until(lambda: read_on(stopped, k.job(job_id)) == b"pending", 10, "the replica's sync")
    status, _, confirmed, _ = post(durable_gateway, "/enqueue", body, key="order-1")
    assert (status, confirmed["id"]) == (200, job_id)
    assert job_keys_on(master, queue) == sorted(k.job(i).encode() for i in (first_id, job_id))
    assert SECRET not in durable_gateway.log_path.read_text()


@pytest.mark.slow
def test_the_gateways_batch_across_masters(
    cluster: RedisCluster, durable_gateway: Gunicorn, frozen: list[RedisServer]
) -> None:
    replicas_acknowledging(cluster)
    queues = queue_names_on_distinct_masters(cluster)
    batch = {"jobs": [{"type": "t", "queue": q} for q in queues]}
    status, _, doc, _ = post(durable_gateway, "/enqueue/batch", batch, key="b-0")
    assert status == 201
    for queue, job in zip(queues, doc["jobs"], strict=True):
        key = K.for_queue(queue).job(job["id"])
        assert read_on(replica_of_key(cluster, key), key) == b"pending"

    stopped = replica_of_key(cluster, K.for_queue(queues[1]).slot_marker)
    frozen.append(stopped)
    stopped.freeze()
    status, _, doc, took = post(durable_gateway, "/enqueue/batch", batch, key="b-1")
    assert (status, doc["code"], len(doc["job_ids"])) == (503, "not_replicated", 3)
    assert took < TIMEOUT + LATE
    stopped.thaw()
    cluster.wait_ok()
    replicas_acknowledging(cluster)
    status, _, again, _ = post(durable_gateway, "/enqueue/batch", batch, key="b-1")
    assert status == 200 and [job["id"] for job in again["jobs"]] == doc["job_ids"]
    for queue in queues:
        assert len(job_keys_on(cluster.master_of(K.for_queue(queue).slot_marker), queue)) == 2
