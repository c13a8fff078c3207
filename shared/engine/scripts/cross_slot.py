"""Writes that must reach the global slot after a script wrote a queue's: a second call, swept.

A script writes one slot (a Cluster refuses a key of another in it), yet some state about a
queue's jobs lives in the global slot, where one read serves every queue: the due index now
(shared.engine.scripts.due_index), workflow counters and the audit trail later. Each such write is
declared once as a :class:`CrossSlotWrite` and then follows the same rules:

- *The second call.* After the script that made it needed, :func:`follow` sends the write as
  one more command on the same client (one round trip). A script that needs none sends
  nothing: a job that does not use the write pays zero commands and zero round trips. Each
  declared write must be idempotent and monotone (the due index: ``ZADD LT``), so a repeat,
  or the repair racing a producer, never undoes a newer write.
- *Lost, then repaired.* The script's effect is durable before the write is sent, so a write
  that fails (the global slot's master unreachable) is logged (``failed_event``), not raised:
  an error would make the caller redo the script. A producer that dies between the two calls,
  or a failover that loses the write, leaves it missing too. Every declared write is
  :func:`register` ed, and workerd/sweep.py, which walks the list of queues a few names a
  second, asks each registered write what a queue's slot says the global entry should be
  (``evidence`` keys to find candidates; ``read`` in the same pipeline as the sweep's other
  reads) and restores what is missing (``restore``; logged as ``repaired_event``).

Cost per job that uses a write: one command, one round trip, after its script (one per call
of a batch, whatever its size). Per job that does not: none. Per sweep pass: one more EXISTS
key per queue checked, one read per candidate queue (those holding the evidence), and for
those one read of the global key and one write when something was lost.

Why not pipelined with its script on one Redis: a write's value may depend on the script's
reply (the due index's time of a delayed job counts from Redis's clock, read in the script),
and one code path on one Redis, Sentinel and Cluster keeps the proven protocol single.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.obs.log import error_text

log = logging.getLogger(__name__)


class CrossSlotWrite(ABC):
    """One kind of write to a global key that follows scripts run in queues' slots.

    Entries are per queue: ``{queue: value}``; what a value means is the write's own.
    """

    name: str  # for logs
    failed_event: str  # logged when the second call fails (warning)
    repaired_event: str  # logged when the sweep restores entries (warning)

    @abstractmethod
    def key(self, keys: Keys) -> str:
        """Return the global key this write goes to."""

    @abstractmethod
    def send(self, client: Any, key: str, entries: Mapping[str, Any]) -> None:
        """Write `entries` to `key` (one command; idempotent and monotone)."""

    @abstractmethod
    def evidence(self, queue_keys: Keys) -> tuple[str, ...]:
        """Return the keys of a queue's slot whose existence means it may need an entry."""

    @abstractmethod
    def read(self, pipe: Any, queue_keys: Keys) -> None:
        """Queue on `pipe` the read of what a queue's slot says its entry should be."""

    @abstractmethod
    def lost(self, client: Any, key: str, replies: Mapping[str, Any]) -> dict[str, Any]:
        """Return the entries `replies` (queue -> reply of `read`) call for that `key` lacks."""


_REGISTERED: list[CrossSlotWrite] = []


def register(write: CrossSlotWrite) -> CrossSlotWrite:
    """Put `write` under the sweep's repair; return it (declare once, at import)."""
    if write not in _REGISTERED:
        _REGISTERED.append(write)
    return write


def registered() -> tuple[CrossSlotWrite, ...]:
    """Return every write the sweep repairs, in the order registered."""
    return tuple(_REGISTERED)


def follow(
    client: redis.Redis, keys: Keys, write: CrossSlotWrite, entries: Mapping[str, Any]
) -> None:
    """Send `write`'s entries as the second call after their script; nothing when empty.

    A failure is logged, not raised: the script's effect stands, the sweep restores the entry.
    """
    if not entries:
        return
    try:
        write.send(client, write.key(keys), entries)
    except redis.RedisError as exc:
        log.warning(write.failed_event, extra={"queues": sorted(entries), "error": error_text(exc)})


def restore(
    client: redis.Redis, keys: Keys, write: CrossSlotWrite, replies: Mapping[str, Any]
) -> list[str]:
    """Restore what `write`'s entries lack for the queues read (`replies`: queue -> reply of
    its `read`); return the queues restored (the sweep's repair)."""
    key = write.key(keys)
    lost = write.lost(client, key, replies)
    if lost:
        write.send(client, key, lost)
        log.warning(write.repaired_event, extra={"queues": list(lost)})
    return list(lost)


def evidence_of(queue_keys: Keys) -> list[str]:
    """Return the evidence keys of every registered write for one queue."""
    return [key for write in _REGISTERED for key in write.evidence(queue_keys)]


def read_each(pipe: Any, queue_keys: Keys) -> int:
    """Queue every registered write's read for one queue; return how many were queued."""
    for write in _REGISTERED:
        write.read(pipe, queue_keys)
    return len(_REGISTERED)


def restore_all(
    client: redis.Redis, keys: Keys, queues: Sequence[str], replies: Sequence[Any]
) -> None:
    """Restore every registered write's entries for `queues`; `replies`: per queue, each
    write's read in registration order (as :func:`read_each` queued them)."""
    for index, write in enumerate(_REGISTERED):
        step = len(_REGISTERED)
        per_queue = dict(zip(queues, replies[index::step], strict=True))
        restore(client, keys, write, per_queue)
