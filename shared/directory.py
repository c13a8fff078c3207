"""Which queues exist, remembered per process, and finding a job whose queue is not known.

The list of queues is a set in the global slot (shared.keys). A producer adds a queue to it
before its first job there (once per process and name), so every queue holding a job is
listed. A job's id does not name its queue, so a lookup by id tries every queue in one
pipelined round trip; the list is re-read only when that finds nothing (another process may
have added a queue since).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared.jobs import Job
from shared.queries import first_found, get_job
from shared.redis_conn import MASTER_DOWN, is_cluster
from shared.scripts import Scripts


class QueueDirectory:
    """One process's view of the list of queues."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self._registered: set[str] = set()
        self._names: list[str] | None = None

    def ensure(self, queue: str) -> None:
        """List `queue` before a job is enqueued there (one SADD per process and name)."""
        if queue not in self._registered:
            self.scripts.register_queue(queue)
            self._registered.add(queue)
            if self._names is not None and queue not in self._names:
                self._names = sorted([*self._names, queue])

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

        One EXISTS per queue, pipelined: a transition by id (cancel, replay, purge) must run in
        its job's slot; the tombstone lets a repeated purge find where the first one ran.
        """
        known = self.names()
        queue = self._holder(job_id, known)
        if queue is None:
            added = [name for name in self.names(refresh=True) if name not in known]
            queue = self._holder(job_id, added) if added else None
        return queue

    def _holder(self, job_id: str, queues: list[str]) -> str | None:
        def exists(name: str) -> Callable[[Any], Any]:
            keys = self.scripts.keys.for_queue(name)
            return lambda pipe: pipe.exists(keys.job(job_id), keys.tombstone(job_id))

        found = first_found(self.scripts.redis, queues, exists)
        return found[0] if found is not None else None

    def find_job(self, job_id: str) -> Job | None:
        """Return the job with this id from whichever queue holds it, or None."""
        client, keys = self.scripts.redis, self.scripts.keys
        known = self.names()
        job = get_job(client, keys, job_id, known)
        if job is None:
            added = [name for name in self.names(refresh=True) if name not in known]
            job = get_job(client, keys, job_id, added) if added else None
        return job
