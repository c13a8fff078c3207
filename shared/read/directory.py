"""Which queues exist, remembered per process, and finding a job's queue from its id.

The list of queues is a set in the global slot (shared.engine.keys). A producer adds a queue to it
before its first job there (once per process and name), and again after an enqueue that was
the queue's first since it was deleted (enqueue.lua says so), so every queue holding a job is
listed, whatever a delete racing it did (shared.read.queue_removal).

A job's id names its queue by a tag (shared.model.job_ids); the global slot maps each tag to its
queues, written with the list. A lookup by id reads the tag's queues (remembered per process)
and then the job in each of them: two round trips at most, whatever the number of queues,
and one for an id no queue has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from shared.connect.redis_conn import MASTER_DOWN, is_cluster
from shared.engine.engine_types import EnqueueResult
from shared.engine.queries import first_found
from shared.engine.scripts import Scripts
from shared.model.job_ids import queue_tag, tag_of
from shared.model.jobs import Job

# Tags remembered per process, at most: past it the memory starts again empty, so a process
# that looks up jobs of many queues keeps a bounded map (a miss costs one SMEMBERS).
TAG_CACHE_LIMIT = 4096


class QueueDirectory:
    """One process's view of the list of queues, and of which queues each job id tag names."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._registered: set[str] = set()
        self._names: list[str] | None = None
        self._tagged: dict[str, tuple[str, ...]] = {}

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
        self._tagged.clear()

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
                known = set(self._names or ()) | self._registered
                if not known or not is_cluster(self.scripts.redis):
                    raise
                return sorted(known)
        return self._names

    def locate(self, job_id: str) -> str | None:
        """Return the queue that holds this job, or a purge's tombstone of it, or None.

        A transition by id (cancel, replay, purge) must run in its job's slot; the tombstone
        lets a repeated purge find where the first one ran.
        """

        def exists(name: str) -> Callable[[Any], Any]:
            keys = self.scripts.keys.for_queue(name)
            return lambda pipe: pipe.exists(keys.job(job_id), keys.tombstone(job_id))

        found = self._search(job_id, exists)
        return found[0] if found is not None else None

    def find_job(self, job_id: str) -> Job | None:
        """Return the job with this id from whichever queue holds it, or None."""

        def hgetall(name: str) -> Callable[[Any], Any]:
            key = self.scripts.keys.for_queue(name).job(job_id)
            return lambda pipe: pipe.hgetall(key)

        found = self._search(job_id, hgetall)
        return Job.from_hash(found[1], job_id, found[0]) if found is not None else None

    def _search(
        self, job_id: str, read: Callable[[str], Callable[[Any], Any]]
    ) -> tuple[str, Any] | None:
        """Read `read(queue)` in the queues the id's tag names: those this process remembers
        first, then, when none had it, any the tag map names besides (another process may
        have listed a queue since, or the remembered ones were deleted)."""
        tag = tag_of(job_id)
        known = self._tagged.get(tag)
        client = self.scripts.redis
        if known:
            found = first_found(client, known, read)
            if found is not None:
                return found
        names = self._tag_names(tag)
        added = [name for name in names if name not in (known or ())]
        return first_found(client, added, read) if added else None

    def _tag_names(self, tag: str) -> tuple[str, ...]:
        """Read the queues whose ids carry `tag` (one SMEMBERS in the global slot); remember them.

        While the global slot's master fails over on a cluster, the queues this process
        knows with that tag answer instead (as names() does), so lookups of jobs on the other
        masters go on; with none, or on one Redis, the error is raised.
        """
        try:
            raw = self.scripts.redis.smembers(self.scripts.keys.queue_tag(tag))
        except MASTER_DOWN:
            known = set(self._names or ()) | self._registered
            mine = tuple(sorted(name for name in known if queue_tag(name) == tag))
            if not mine or not is_cluster(self.scripts.redis):
                raise
            return mine
        names = tuple(sorted(name.decode() for name in raw))
        if len(self._tagged) >= TAG_CACHE_LIMIT:
            self._tagged.clear()
        if names:
            self._tagged[tag] = names
        else:
            self._tagged.pop(tag, None)
        return names
