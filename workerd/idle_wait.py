"""An idle worker's wait for a wake-up hint: one BLPOP, or on a Redis Cluster one slice at a
time over its queues' wake lists.

A Redis Cluster refuses a BLPOP whose lists sit in different slots (every queue has its own),
so there each round pops every list at once without blocking (a pipeline: one round trip per
master; a master that fails sets its queues aside), then blocks on one of them for the
planner's `cluster_wake_slice`, the next one next time. The cost, per idle worker: pickup
within a slice for a queue it is not blocked on, and (queues + 1) commands a slice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.connect.redis_conn import MASTER_DOWN, is_cluster, read_each
from shared.engine.scripts import Scripts
from shared.engine.scripts.job_scripts import PendingClaim
from workerd.claim_plan import ClaimPlanner


@dataclass(frozen=True)
class Hint:
    """A wake-up hint popped from a queue's wake list (pushed back as it was, if unused)."""

    wake: str
    value: bytes
    queue: str


def pop_hint(scripts: Scripts, planner: ClaimPlanner, queues: tuple[str, ...]) -> Hint | None:
    """Wait for a hint on any of `queues`' wake lists, at most the wake timeout; return it.

    On a cluster, queues found with a hint besides the one returned are marked hinted in the
    planner (the next claims ask them too), and a master that fails sets its queue aside.
    """
    client = scripts.redis
    wakes = {scripts.q(queue).wake: queue for queue in queues}
    if not is_cluster(client):
        scripts.transport.let_go()  # the BLPOP takes it: one connection a thread, as ever
        popped = client.blpop(list(wakes), timeout=planner.timings.wake_timeout)
        return _hint(popped, wakes)
    found: list[Hint] = []
    replies = read_each(client, [_lpop(wake) for wake in wakes])
    for (wake, queue), value in zip(wakes.items(), replies, strict=True):
        if isinstance(value, Exception):
            planner.set_aside(queue, value)
        elif value is not None:
            found.append(Hint(wake, value, queue))
    for hint in found[1:]:
        planner.hinted(hint.queue)  # claim from these too
    if found:
        return found[0]
    wake = planner.cluster_turn(tuple(wakes))
    try:
        popped = client.blpop([wake], timeout=planner.timings.cluster_wake_slice)
    except MASTER_DOWN as exc:
        planner.set_aside(wakes[wake], exc)
        return None
    return _hint(popped, wakes)


def pop_hint_then_claim(
    scripts: Scripts,
    timeout: float,
    queue: str,
    worker_id: str,
    runnable: frozenset[str] | None,
    request_id: str,
) -> tuple[Hint | None, PendingClaim]:
    """pop_hint on one queue of one Redis for at most `timeout` seconds, with the queue's claim
    sent behind the BLPOP in the same write (Scripts.claim_behind); return the hint and the
    claim, to be read next.

    The claim runs when the BLPOP is served, whether a hint came or the wait ran out.
    """
    wake = scripts.q(queue).wake
    popped, claim = scripts.claim_behind(
        ("BLPOP", wake, timeout),
        worker_id,
        queue=queue,
        runnable=runnable,
        request_id=request_id,
    )
    return _hint(popped, {wake: queue}), claim


def _hint(popped: tuple[bytes, bytes] | list[bytes] | None, wakes: dict[str, str]) -> Hint | None:
    if popped is None:
        return None
    wake = popped[0].decode()
    return Hint(wake, popped[1], wakes[wake])


def _lpop(key: str) -> Callable[[Any], Any]:
    return lambda pipe: pipe.lpop(key)
