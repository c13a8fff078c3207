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
of the connection's last write that Redis propagated. A script that wrote nothing (a repeat
answered from what an earlier call wrote: a lost reply retried, an Idempotency-Key resent)
leaves that offset where an older write put it, 0 on a fresh connection, and WAIT would
confirm at once what the replicas may not have. A standalone primary propagates every PUBLISH
to its replicas, so the WAIT after it covers everything the primary wrote before it, on any
connection: the script in front of it, the idempotency key reserve.lua wrote a call earlier,
a batch's MULTI/EXEC (which cannot share a pipeline with WAIT, so it passes no write here).

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
