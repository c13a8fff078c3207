"""The scheduler's backstop: a slow walk of the list of queues, a few names a second.

The scheduler's passes never walk the list of queues (it grows with every name anyone
enqueues under): scheduled jobs are found through the due index, the rest through the served
queues (workerd/scheduler.py). Each can miss a queue only after a crash or a lost write:

- a producer that died between a script and its cross-slot write (shared.engine.scripts.cross_slot:
  the due index's note, Scripts.note_due), a scheduler that died between removing a due entry
  and putting it back (Scripts.settle_due), or a failover that lost either write: the
  queue's scheduled jobs have no due entry;
- a host that died serving a queue the served set never had, or lost (a failover, a flush):
  its leases, retries and gates are in no served queue;
- a job canceled while it waited in a queue no host serves: finished jobs there are in no
  served queue either (the only finished jobs such a queue can get).

Each pass (once a second) reads SWEEP_BATCH names with SSCAN and asks each one EXISTS of the
keys above (each registered cross-slot write names its own: the due index, the queue's
scheduled jobs); the rare queue that holds any gets its global entries back (the due
index: ZADD LT), joins the served
set (until it holds nothing more for the per-queue duties), or is trimmed. A full walk of N
listed names takes N / SWEEP_BATCH passes: that bounds how late such a queue is served
(10,000 names: about 5 minutes), at a cost per second that does not grow with N.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from shared.engine.scripts import Scripts, cross_slot

log = logging.getLogger(__name__)

SWEEP_BATCH = 32  # names a pass (SSCAN's COUNT is a hint: about as many)
# The indexes each of the scheduler's per-queue duties acts on (workerd/scheduler.py walks the
# served queues for them; this sweep finds them where no host serves the queue). Only a worker
# fills the first three: a queue holding one is served, or its host died.
PROMOTE_FROM = ("retrying",)
# Rate-limit gates (docs/QUEUES.md, limits): checked every tick, of queues with a rate only.
OPEN_GATES_FROM = ("gates",)
RECOVER_FROM = ("processing",)
TRIM_FROM = ("completed", "canceled", "dead", "failures")
WORKER_MADE = (*PROMOTE_FROM, *OPEN_GATES_FROM, *RECOVER_FROM)
FINISHED = TRIM_FROM
INDEXES = (*WORKER_MADE, *FINISHED)


class Sweep:
    """One pass a second over the next few listed names; the cursor carries on from there."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.cursor = 0

    def step(self, served: Sequence[str], now_ms: int | None, *, share: int = 1) -> None:
        """Check the next names; repair what a crash left (`served`: the served queues;
        `share`: how many queues share the finished-job caps, as the scheduler's trims)."""
        client = self.scripts.redis
        self.cursor, raw = client.sscan(self.scripts.keys.queues, self.cursor, count=SWEEP_BATCH)
        names = sorted({name.decode() for name in raw})
        if not names:
            return
        pipe = client.pipeline(transaction=False)
        for name in names:
            keys = self.scripts.q(name)
            pipe.exists(*cross_slot.evidence_of(keys), *(getattr(keys, i) for i in INDEXES))
        holding = [name for name, n in zip(names, pipe.execute(), strict=True) if n]
        if holding:
            self._repair(holding, set(served), now_ms, share)

    def _repair(self, queues: list[str], served: set[str], now_ms: int | None, share: int) -> None:
        client, keys = self.scripts.redis, self.scripts.keys
        pipe = client.pipeline(transaction=False)
        written = 0
        for queue in queues:
            q = self.scripts.q(queue)
            written = cross_slot.read_each(pipe, q)  # what its global entries should be
            pipe.exists(*(getattr(q, i) for i in WORKER_MADE))
            pipe.exists(*(getattr(q, i) for i in FINISHED))
        replies = pipe.execute()
        step = written + 2
        writes = [r for n in range(0, len(replies), step) for r in replies[n : n + written]]
        cross_slot.restore_all(client, keys, queues, writes)
        unserved = [q for q in queues if q not in served]
        worker_made = dict(zip(queues, replies[written::step], strict=True))
        adopted = [q for q in unserved if worker_made[q]]
        if adopted:
            # Score 0: as if last listed long ago, so it leaves the set once it holds nothing.
            client.zadd(keys.served, dict.fromkeys(adopted, 0), nx=True)
            log.warning("served_queue_adopted", extra={"queues": adopted})
        finished = dict(zip(queues, replies[written + 1 :: step], strict=True))
        for queue in unserved:
            if finished[queue] and queue not in adopted:
                self.scripts.trim(queue=queue, now_ms=now_ms, share=share)
