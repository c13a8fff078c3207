"""The due index as a cross-slot write: queue -> earliest scheduled_at (ms), in the global slot.

A delayed enqueue's script schedules the job in its queue's slot; the second call
(shared.engine.scripts.cross_slot.follow) adds its queue here with ``ZADD LT``, which lowers an entry
or adds a missing one and never delays one. The scheduler settles an entry after promoting
(Scripts.settle_due: ZREM, then the read, then ZADD LT); the sweep restores an entry a crash or
a failover lost, from the queue's earliest scheduled job (docs/WORKERD.md, "The scheduler at
scale of names").

Cost: a delayed job, one ZADD per enqueue call (one per batch); any other job, nothing. A
sweep pass: one more EXISTS key (the queue's scheduled zset) per name checked, and for a queue
holding scheduled jobs one ZRANGE, then one ZMSCORE for the pass (and one ZADD when lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.engine.keys import Keys
from shared.engine.scripts.cross_slot import CrossSlotWrite, register


class DueIndex(CrossSlotWrite):
    """The scheduler's index of queues by their earliest scheduled job."""

    name = "due index"
    failed_event = "due_note_failed"
    repaired_event = "due_index_repaired"

    def key(self, keys: Keys) -> str:
        return keys.due

    def send(self, client: Any, key: str, entries: Mapping[str, Any]) -> None:
        client.zadd(key, dict(entries), lt=True)

    def evidence(self, queue_keys: Keys) -> tuple[str, ...]:
        return (queue_keys.scheduled,)

    def read(self, pipe: Any, queue_keys: Keys) -> None:
        pipe.zrange(queue_keys.scheduled, 0, 0, withscores=True)

    def lost(self, client: Any, key: str, replies: Mapping[str, Any]) -> dict[str, Any]:
        first = {queue: int(reply[0][1]) for queue, reply in replies.items() if reply}
        if not first:
            return {}
        indexed = client.zmscore(key, list(first))
        return {
            queue: first[queue]
            for queue, at in zip(first, indexed, strict=True)
            if at is None or at > first[queue]
        }


DUE_INDEX = register(DueIndex())
