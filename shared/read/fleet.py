"""Which queues the live workerd hosts serve and which job types they run there, from the
fleet registry (workerd/duties/fleet_heartbeat.py), and what an enqueue should be told about it.

Read from the host records, never from per-queue keys: two round trips (the registry's
names, then one pipelined HMGET of each record's ``queues`` and ``types``) whatever the
number of queue names anyone created. The hosts are few and each lists its WORKER_QUEUES
(configuration). A record that expired (a host silent for 10 s) counts as gone.

This is the registry's answer, true now; not the served zset (Keys.served), which keeps a
queue 60 s after its last host left so the schedulers finish its work.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import redis

from shared.engine.keys import Keys
from shared.engine.replies import text

# Names (types, queues) a warning lists at most: a host may run dozens.
NAMES_SHOWN = 8


@dataclass(frozen=True)
class Fleet:
    """The live hosts' queues and, per served queue, the types some host serving it runs."""

    hosts: int
    # queue -> the types run there; None: a host serving it did not say (an older workerd)
    types_by_queue: Mapping[str, frozenset[str] | None] = field(default_factory=dict)

    def serves(self, queue: str) -> bool:
        """Tell whether a live host serves `queue`."""
        return queue in self.types_by_queue

    def warnings(self, queue: str, job_type: str) -> list[str]:
        """Return what an enqueue of `job_type` into `queue` should be told (none: all well)."""
        if self.hosts == 0:
            return [
                "no workerd host is registered (none has beaten in the last 10 s): "
                f"the job waits in queue {queue!r} until a host serving it starts"
            ]
        if not self.serves(queue):
            return [
                f"no workerd host serves queue {queue!r}; the job waits until one does "
                f"(queues served: {_some(self.types_by_queue)})"
            ]
        types = self.types_by_queue[queue]
        if types is None or job_type in types:
            return []
        return [_unknown_type(queue, job_type, types)]


def _unknown_type(queue: str, job_type: str, types: frozenset[str]) -> str:
    # What workerd does with it (docs/QUEUES.md, "Routing"): a host serving the queue takes
    # it anyway, fails it as NoHandler, retries it, and it ends in the dead-letter queue.
    close = difflib.get_close_matches(job_type, sorted(types), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"no workerd host serving queue {queue!r} runs job type {job_type!r}{hint}: "
        "each attempt fails as NoHandler and the job ends dead-lettered; "
        f"types run there: {_some(types)}"
    )


def _some(names: Iterable[str]) -> str:
    """Return the first few of `names`, sorted, for a warning ("none" for none)."""
    listed = sorted(names)
    shown = ", ".join(listed[:NAMES_SHOWN]) + (", …" if len(listed) > NAMES_SHOWN else "")
    return shown or "none"


def read_fleet(client: redis.Redis, keys: Keys) -> Fleet:
    """Return the live hosts' queues and types: two round trips."""
    names = [text(name) or "" for name in client.zrange(keys.workers, 0, -1)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hmget(keys.worker(name), "queues", "types")
    hosts = 0
    served: dict[str, frozenset[str] | None] = {}
    for queues, types in pipe.execute():
        if queues is None:  # expired since the ZRANGE: gone
            continue
        hosts += 1
        runs = None if types is None else frozenset(t for t in types.decode().split(",") if t)
        for queue in (q for q in queues.decode().split(",") if q):
            served[queue] = _union(served.get(queue, frozenset()), runs, queue in served)
    return Fleet(hosts, served)


def _union(
    known: frozenset[str] | None, more: frozenset[str] | None, seen: bool
) -> frozenset[str] | None:
    """Return the types of a queue with one more host's; unknown once any host's is."""
    if more is None or (seen and known is None):
        return None
    return (known or frozenset()) | more
