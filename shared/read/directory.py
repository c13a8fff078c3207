"""Which queues exist, remembered per process.

The list of queues is a set in the global slot (shared.engine.keys). A producer adds a queue to it
before its first job there (once per process and name), and again after an enqueue that was
the queue's first since it was deleted (enqueue.lua says so), so every queue holding a job is
listed, whatever a delete racing it did (shared.read.queue_removal).

Finding a job's queue from its id is shared.engine.job_locator's (``QueueDirectory.locator``): it
reads the tag map written with the list, and falls back on the names known here while the
global slot's master fails over.
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.connect.redis_conn import MASTER_DOWN, is_cluster
from shared.engine.engine_types import EnqueueResult
from shared.engine.job_locator import JobLocator
from shared.engine.scripts import Scripts


class QueueDirectory:
    """One process's view of the list of queues; its `locator` finds a job id's queue."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._registered: set[str] = set()
        self._names: list[str] | None = None
        self.locator = JobLocator(scripts, known=self._known)

    def ensure(self, queue: str) -> None:
        """List `queue` before a job is enqueued there (one MULTI per process and name)."""
        if queue not in self._registered:
            self.relist(queue)

    def relist(self, queue: str) -> None:
        """List `queue` now, whatever this process remembers (after a write a delete may race)."""
        self.scripts.register_queue(queue)
        self._registered.add(queue)
        if self._names is not None and queue not in self._names:
            self._names = sorted([*self._names, queue])

    def enqueued(self, results: Iterable[tuple[str, EnqueueResult]]) -> None:
        """List again each queue an enqueue was the first job of (new, or deleted since)."""
        for queue in dict.fromkeys(q for q, result in results if result.first_in_queue):
            self.relist(queue)

    def forget(self, queue: str) -> None:
        """Forget `queue` (deleted): the next enqueue there lists it again."""
        self._registered.discard(queue)
        if self._names is not None and queue in self._names:
            self._names = [name for name in self._names if name != queue]
        self.locator.forget()

    def names(self, *, refresh: bool = False) -> list[str]:
        """Return every queue, sorted (read from Redis the first time or when asked to).

        On a cluster the list lives on the global slot's master. While that master fails
        over, a refresh answers with the queues this process already knows, so lookups,
        listings and stats of the queues on the other masters go on; with none known, or on
        one Redis (where nothing else would answer either), the error is raised.
        """
        if refresh or self._names is None:
            try:
                self._names = self.scripts.queue_names()
            except MASTER_DOWN:
                known = self._known()
                if not known or not is_cluster(self.scripts.redis):
                    raise
                return sorted(known)
        return self._names

    def _known(self) -> set[str]:
        """Return the names this process knows without reading Redis."""
        return set(self._names or ()) | self._registered
