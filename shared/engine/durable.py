"""Durable mode: a write counts only once Redis's WAIT says enough replicas have it.

Redis replicates asynchronously: a primary that answered a write and then died before a
replica had it loses the write at failover. With ``TASKFORGE_WAIT_REPLICAS`` = N ≥ 1, every
write that acknowledges work (an enqueue, a completion, a failure) is followed by
``WAIT N timeout``; shared.engine.scripts reports what it answered (:class:`Confirmation`) and the
callers decide: the gateway answers 503 ``not_replicated``, workers leave the outcome
uncounted (shared.engine.lifecycle). docs/RELIABILITY.md, "Durable mode", says what that guarantees.

:func:`write_then_wait` is the one place that sends WAIT. The write, a marker and WAIT go on
one non-transactional pipeline: one connection, in order, in one round trip. A pinned
connection would give the same ordering at a round trip more per write, and hold one of the
gateway's few pooled connections longer; a transaction cannot hold WAIT (inside MULTI it
does not block).

The marker (PUBLISH on a channel nobody subscribes to): WAIT waits for the replication offset
its connection recorded at its last command. Redis 7.0 records it after every command; later
versions (7.2, with WAITAOF) only after a command that propagated a write, so there a repeat
that wrote nothing (a lost reply retried, an Idempotency-Key resent) leaves it where an older
write put it. And a batch's MULTI/EXEC cannot share a pipeline with WAIT, so its WAIT goes out
on whichever pooled connection is free, maybe not the one that wrote: without a command in
front, that connection's offset can be older than the batch (tests/durable/test_engine.py
shows WAIT then confirming at once what no replica has). A standalone primary propagates every
PUBLISH to its replicas, so the WAIT after it covers everything the primary wrote before it,
on any connection and in every version: the script in front of it, the idempotency key
reserve.lua wrote a call earlier, a batch's transaction.

Redis Cluster (:func:`write_then_wait_in_slot`): WAIT has no key, and each master has its own
replicas and its own replication stream, so the pipeline goes to the master that owns the
written key's slot, on one of that node's own connections (``RedisCluster.get_node_from_key``,
``get_redis_connection``): write, marker, WAIT, in order, as above. The marker there cannot be
a PUBLISH: a cluster node sends PUBLISH to every node over the cluster bus, and Redis 7.0 does
not count it as a write of any slot, so a repeat that wrote nothing would leave the offset
where it was. It is a SET of a small key in the written slot (``Keys.slot_marker``,
``{taskforge:<queue>}:v2:durable_marker``, the op's name, expiring after MARKER_TTL_MS so an
idle or deleted queue leaves nothing behind): a write like any other of that slot,
replicated in order after whatever that master wrote before it. It is never read. A call that meets the slot moved (MOVED, a failover's promotion or
a resharding), being moved (ASK, TRYAGAIN), or its master gone (a connection error) refreshes
the slot map and runs the whole pipeline again, a bounded number of times: the writes are
scripts safe to run twice, like every retried call. ASK is not followed to the importing node:
a SET there would create the marker on the target before its migration and break it
(BUSYKEY); the retry waits for the move to finish instead, and an enqueue still moving when
the attempts run out answers as an outage does (docs/CLUSTER.md).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.exceptions
from redis.cluster import RedisCluster

from shared.engine.engine_types import Confirmation


def write_then_wait(
    client: redis.Redis,
    queue_writes: Callable[[Any], None],
    *,
    op: str,
    replicas: int,
    timeout_ms: int,
    marker: str,
) -> tuple[list[Any], Confirmation]:
    """Run the writes `queue_writes` puts on a pipeline, then WAIT for `replicas` replicas at
    most `timeout_ms`; return the writes' replies and what WAIT answered.

    `marker` is the channel the marker goes to (shared.engine.keys.Keys.durable_marker). A write's
    error (NOSCRIPT, OOM) is raised as redis-py raises it from a pipeline, after the WAIT ran.
    """
    return _pipeline(
        client,
        queue_writes,
        lambda pipe: pipe.publish(marker, op),
        op=op,
        replicas=replicas,
        timeout_ms=timeout_ms,
    )


# What a cluster pipeline meets when its slot is not (or no longer) where the map says:
# moved (a failover, a resharding), being moved, the cluster failing over, the master gone.
SLOT_ERRORS = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.SlotNotCoveredError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
SLOT_ATTEMPTS = 4  # runs of the pipeline at most: the first and three after a map refresh
SLOT_BACKOFF = 0.1  # seconds before the first retry, doubled each time (0.7 s in all)
MARKER_TTL_MS = 60_000  # a queue's marker outlives its last durable write by this much


def write_then_wait_in_slot(
    cluster: RedisCluster,
    queue_writes: Callable[[Any], None],
    *,
    op: str,
    replicas: int,
    timeout_ms: int,
    marker_key: str,
    attempts: int = SLOT_ATTEMPTS,
) -> tuple[list[Any], Confirmation]:
    """On a Redis Cluster: run the writes, a SET of `marker_key` and WAIT on one connection
    of the master owning `marker_key`'s slot; return the writes' replies and WAIT's answer.

    Every write `queue_writes` queues must lie in `marker_key`'s slot (the caller's one queue,
    or the global slot). On SLOT_ERRORS the slot map is refreshed and the pipeline runs again,
    `attempts` times at most; the last error is raised.
    """
    delay = SLOT_BACKOFF
    for attempt in range(1, attempts + 1):
        try:
            node = cluster.get_node_from_key(marker_key)
            return _pipeline(
                cluster.get_redis_connection(node),
                queue_writes,
                lambda pipe: pipe.set(marker_key, op, px=MARKER_TTL_MS),
                op=op,
                replicas=replicas,
                timeout_ms=timeout_ms,
            )
        except SLOT_ERRORS:
            if attempt == attempts:
                raise
        time.sleep(delay)  # the promotion or the slot's move needs time; bounded by attempts
        delay *= 2
        _refresh_slots(cluster)
    raise AssertionError("unreachable: the last attempt returns or raises")


def _refresh_slots(cluster: RedisCluster) -> None:
    """Ask the cluster for its slot map again; a failed refresh leaves the old one in use
    (the next attempt meets the same error, and the last one is raised)."""
    with contextlib.suppress(redis.exceptions.RedisError, redis.exceptions.RedisClusterException):
        cluster.nodes_manager.initialize()


def _pipeline(
    client: redis.Redis,
    queue_writes: Callable[[Any], None],
    queue_marker: Callable[[Any], None],
    *,
    op: str,
    replicas: int,
    timeout_ms: int,
) -> tuple[list[Any], Confirmation]:
    """Run writes, the marker and WAIT on one non-transactional pipeline of `client`."""
    pipe = client.pipeline(transaction=False)
    queue_writes(pipe)
    queue_marker(pipe)
    pipe.execute_command("WAIT", replicas, timeout_ms)
    *writes, _marker, acked = pipe.execute()
    return writes, Confirmation(op, replicas, int(acked))


def weakest(first: Confirmation, second: Confirmation) -> Confirmation:
    """Return the confirmation of a write that went to two masters: the fewer replicas."""
    return first if first.acked <= second.acked else second


def replicas_connected(client: redis.Redis) -> tuple[str | None, int]:
    """Return the role of the Redis `client` reaches and its connected replicas (INFO
    replication). Raises RedisError when Redis cannot be reached."""
    info = client.info("replication")
    return info.get("role"), int(info.get("connected_slaves", 0))


def replicas_body(client: redis.Redis, wanted: int) -> dict[str, int]:
    """Return ``{"connected": n, "wanted": wanted}`` for a /ready body (a replica, which has
    none of its own to wait for, counts 0). Raises RedisError when Redis cannot be reached."""
    if isinstance(client, RedisCluster):
        # The weakest master decides: a write to it is the one that cannot be confirmed.
        counts = [
            replicas_connected(client.get_redis_connection(node))[1]
            for node in client.get_primaries()
        ]
        return {"connected": min(counts, default=0), "wanted": wanted}
    role, connected = replicas_connected(client)
    return {"connected": connected if role == "master" else 0, "wanted": wanted}


def replica_shortfall(client: redis.Redis, replicas: int) -> str | None:
    """Return why every durable write would time out on this Redis (on a cluster: on one of
    its masters), or None when it can be confirmed: not a primary, or fewer connected replicas
    than `replicas`. Never raises."""
    if isinstance(client, RedisCluster):
        for node in client.get_primaries():
            found = _shortfall(client.get_redis_connection(node), replicas)
            if found is not None:
                return f"cluster master {node.name}: {found}"
        return None
    return _shortfall(client, replicas)


def _shortfall(client: redis.Redis, replicas: int) -> str | None:
    """Return why WAIT for `replicas` on this one server cannot succeed, or None."""
    try:
        role, connected = replicas_connected(client)
    except redis.RedisError:
        return None  # unreachable: the outage is reported where it is met
    if role != "master":
        return (
            f"TASKFORGE_WAIT_REPLICAS={replicas} but REDIS_URL reaches a Redis whose role is "
            f"{role}: WAIT needs the primary"
        )
    if connected < replicas:
        return (
            f"TASKFORGE_WAIT_REPLICAS={replicas} but the primary has {connected} of "
            f"{replicas} {'replica' if replicas == 1 else 'replicas'} connected: until "
            f"{_more(replicas - connected)}, every enqueue answers 503 "
            "not_replicated and no completion is counted"
        )
    return None


def _more(missing: int) -> str:
    return "one more connects" if missing == 1 else f"{missing} more connect"
