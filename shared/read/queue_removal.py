"""Deleting an empty queue: the checks, and the order of the two calls that keep the list right.

A queue's keys live in its own slot and the list of queues (with the tag map of job ids) in
the global slot, so on a Redis Cluster no one script can do both. The order that loses nothing
to a racing enqueue (docs/QUEUES.md, "Deleting a queue"):

1. read-only check (delete_queue.lua with delete off): not empty, paused or limited → refused,
   having changed nothing;
2. take the name off the list and the tag map (one MULTI in the global slot);
3. delete_queue.lua again, deleting: it checks again in the step that deletes. A job that
   landed between 1 and 3 makes it refuse, and the name is listed again. A job that lands
   after 3 is its queue's first (its FIFO counter is gone): the enqueuer lists the queue again
   (shared.read.directory.QueueDirectory.enqueued). Every writer writes in the queue's slot first
   and lists after; the delete unlists first and deletes after: whichever comes second, the
   list ends up naming every queue that holds something.

A queue a live workerd host serves (WORKER_QUEUES) is refused: its scheduler lists it again
each second anyway, so deleting it would only empty it. The default queue is always listed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from shared.model.queues import DEFAULT_QUEUE
from shared.read.directory import QueueDirectory
from shared.read.hosts import list_hosts

log = logging.getLogger(__name__)

# delete_queue.lua's counts, in its order.
KEEPING_STATES = ("pending", "held", "scheduled", "retrying", "processing", "dead")


class QueueNotListed(LookupError):
    """No queue of that name is listed."""


@dataclass(frozen=True)
class QueueKept:
    """Why a queue was not deleted: what it holds, and whether it is paused, limited or served."""

    jobs: dict[str, int] = field(default_factory=dict)  # state -> count, every state listed
    paused: bool = False
    limited: bool = False
    served_by: tuple[str, ...] = ()  # registry names of the live hosts that serve it
    default: bool = False

    @classmethod
    def from_reply(cls, reply: list[int]) -> QueueKept:
        """Return the reasons delete_queue.lua gave: six counts, then paused and limited."""
        jobs = dict(zip(KEEPING_STATES, reply[: len(KEEPING_STATES)], strict=True))
        paused, limited = reply[len(KEEPING_STATES) :]
        return cls(jobs=jobs, paused=paused == 1, limited=limited == 1)

    def reason(self) -> str:
        """Return one sentence on why the queue is kept."""
        if self.default:
            return "the default queue is always listed and cannot be deleted"
        if self.served_by:
            return f"workerd serves it (WORKER_QUEUES of {', '.join(self.served_by)})"
        held = [f"{n} {state}" for state, n in self.jobs.items() if n]
        if held:
            return f"the queue is not empty: {', '.join(held)}"
        fixes = (
            ("paused", "resume it", self.paused),
            ("limited", "clear its limits", self.limited),
        )
        kept = [(word, fix) for word, fix, on in fixes if on]
        words, steps = " and ".join(w for w, _ in kept), " and ".join(f for _, f in kept)
        return f"the queue is {words}: {steps} first"


def delete_queue(directory: QueueDirectory, queue: str) -> QueueKept | None:
    """Delete an empty, unpaused, unlimited, unserved queue; return None, or why it was kept.

    Raises QueueNotListed for a name that is not listed.
    """
    scripts = directory.scripts
    if queue == DEFAULT_QUEUE:
        return QueueKept(default=True)
    if not scripts.redis.sismember(scripts.keys.queues, queue):
        raise QueueNotListed(queue)
    served = tuple(h.name for h in list_hosts(scripts.redis, scripts.keys) if queue in h.queues)
    if served:
        return QueueKept(served_by=served)
    reply = scripts.delete_queue(queue, delete=False)
    if reply is not None:
        return QueueKept.from_reply(reply)
    scripts.unregister_queue(queue)
    reply = scripts.delete_queue(queue)
    if reply is not None:  # something arrived since the check: list it again, keep it
        directory.relist(queue)
        return QueueKept.from_reply(reply)
    directory.forget(queue)
    log.info("queue_deleted", extra={"queue": queue})
    return None
