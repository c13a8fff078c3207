"""A queue's limits in Redis: reading them and their use now, changing them atomically.

What a limit is and its stored form: shared.model.limit_rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from shared.engine.keys import Keys
from shared.model.limit_rules import LimitError, QueueLimits, from_stored

if TYPE_CHECKING:
    from shared.engine.scripts import Scripts

# Rereads of the limits before a change gives up on writers that keep changing them.
CHANGE_TRIES = 10


@dataclass(frozen=True)
class ScopeUse:
    """What a scope holds now: jobs running in its slots, pending jobs it holds back."""

    running: int
    held: int


@dataclass(frozen=True)
class LimitsState:
    """One queue's limits and their use: the queue's own, and per limited type."""

    queue: str
    limits: QueueLimits
    use: ScopeUse
    type_use: Mapping[str, ScopeUse]

    def to_json(self) -> dict[str, Any]:
        doc = self.limits.to_json()
        doc.update(running=self.use.running, held=self.use.held)
        for name, limit_doc in doc["types"].items():
            use = self.type_use.get(name, ScopeUse(0, 0))
            limit_doc.update(running=use.running, held=use.held)
        return {"queue": self.queue, **doc}


def read_state(client: redis.Redis, keys: Keys, queues: Sequence[str]) -> list[LimitsState]:
    """Return the limits of `queues` that have any, with their use: two pipelined round trips.

    Running and held per type are ZLEXCOUNTs over the `<type>|` range of each zset (O(log n)).
    """
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.get(keys.for_queue(queue).limits)
    limited = [
        (queue, from_stored(raw)) for queue, raw in zip(queues, pipe.execute(), strict=True) if raw
    ]
    if not limited:
        return []
    pipe = client.pipeline(transaction=False)
    for queue, limits in limited:
        k = keys.for_queue(queue)
        pipe.zcard(k.running)
        pipe.zcard(k.held)
        for name in sorted(limits.types):
            pipe.zlexcount(k.running, f"[{name}|", f"({name}}}")
            pipe.zlexcount(k.held, f"[{name}|", f"({name}}}")
    counts = iter(pipe.execute())
    states = []
    for queue, limits in limited:
        use = ScopeUse(next(counts), next(counts))
        type_use = {name: ScopeUse(next(counts), next(counts)) for name in sorted(limits.types)}
        states.append(LimitsState(queue, limits, use, type_use))
    return states


def read_limits(client: redis.Redis, keys: Keys, queue: str) -> QueueLimits:
    """Return one queue's limits (empty when it has none)."""
    return from_stored(client.get(keys.for_queue(queue).limits))


def change(scripts: Scripts, queue: str, edit: Callable[[QueueLimits], QueueLimits]) -> QueueLimits:
    """Apply `edit` to a queue's limits and store the result; return it.

    A read, then set_limits.lua with what was read (compare and set): two changes of
    different types' limits at once both stand. Retried on a conflict, a bounded number of
    times (each retry means another change landed).
    """
    key = scripts.q(queue).limits
    for _ in range(CHANGE_TRIES):
        raw = scripts.redis.get(key)
        before = "" if raw is None else raw.decode()
        after = edit(from_stored(before))
        if scripts.set_limits(queue, after.compact_json(), expected=before) is not None:
            return after
    raise LimitError(f"the limits of {queue!r} kept changing; try again")
