"""Durable mode: a write counts only once Redis's WAIT says enough replicas have it.

Redis replicates asynchronously: a primary that answered a write and then died before a
replica had it loses the write at failover. With ``TASKFORGE_WAIT_REPLICAS`` = N ≥ 1, every
write that acknowledges work (an enqueue, a completion, a failure) is followed by
``WAIT N timeout``; shared.scripts reports what it answered (:class:`Confirmation`) and the
callers decide: the gateway answers 503 ``not_replicated``, workers leave the outcome
uncounted (shared.lifecycle). docs/RELIABILITY.md, "Durable mode", says what that guarantees.

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

Redis Cluster (not built here): WAIT has no key, so it must be sent to the primary that owns
the written key's slot, on the connection that wrote (``RedisCluster.get_node_from_key``, then
that node's client: a plain pipeline as here); and a cluster node sends PUBLISH over the
cluster bus, not its replication stream, so there the marker must be a write in the key's
slot. `client` is whatever reaches that node, which keeps both changes local to the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from shared.engine_types import Confirmation


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

    `marker` is the channel the marker goes to (shared.keys.Keys.durable_marker). A write's
    error (NOSCRIPT, OOM) is raised as redis-py raises it from a pipeline, after the WAIT ran.
    """
    pipe = client.pipeline(transaction=False)
    queue_writes(pipe)
    pipe.publish(marker, op)
    pipe.execute_command("WAIT", replicas, timeout_ms)
    *writes, _subscribers, acked = pipe.execute()
    return writes, Confirmation(op, replicas, int(acked))


def replicas_connected(client: redis.Redis) -> tuple[str | None, int]:
    """Return the role of the Redis `client` reaches and its connected replicas (INFO
    replication). Raises RedisError when Redis cannot be reached."""
    info = client.info("replication")
    return info.get("role"), int(info.get("connected_slaves", 0))


def replicas_body(client: redis.Redis, wanted: int) -> dict[str, int]:
    """Return ``{"connected": n, "wanted": wanted}`` for a /ready body (a replica, which has
    none of its own to wait for, counts 0). Raises RedisError when Redis cannot be reached."""
    role, connected = replicas_connected(client)
    return {"connected": connected if role == "master" else 0, "wanted": wanted}


def replica_shortfall(client: redis.Redis, replicas: int) -> str | None:
    """Return why every durable write would time out on this Redis, or None when it can be
    confirmed: not a primary, or fewer connected replicas than `replicas`. Never raises."""
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
