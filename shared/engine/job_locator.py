"""The one way a job id finds its queue: through its tag, never by walking the list of queues.

A job's keys sit in its queue's slot, and every operation by id (GET /jobs/<id>, its history,
cancel, replay, purge, bulk DLQ by id, the dashboard's job page, the CLI through the API)
must learn that queue first. An id's first eight hex digits are a hash of its queue's name
(shared.model.job_ids); the global slot maps each such tag to the queues that have it
(``queue_tag:<tag>``, written with the list of queues, shared.engine.scripts.queue_scripts). So a lookup
reads that small set, then the job in each queue it names. A client-chosen id is checked here
for a job of another queue with the same tag (held_elsewhere); cross-queue dependencies are to
resolve through here too, so the rule lives in one place.

Cost per lookup, whatever the number of queues anyone created:
- a tag this process has seen: one round trip, one command per queue the tag names (almost
  always one: HGETALL to read the job, EXISTS to locate it);
- a tag it has not (or a remembered queue no longer holds the id): one more round trip, one
  SMEMBERS of the tag's set (in the global slot);
- an id whose tag no queue has (not one of ours): that SMEMBERS alone, then "not found";
- many ids at once (:meth:`JobLocator.locate_many`): two round trips for the lot, one
  SMEMBERS per distinct tag, one EXISTS per (id, queue the tag names).
Memory: at most TAG_CACHE_LIMIT tags remembered per process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from shared.connect.redis_conn import MASTER_DOWN, is_cluster
from shared.engine.queries import first_found
from shared.engine.scripts import Scripts
from shared.model.job_ids import queue_tag, tag_of
from shared.model.jobs import Job

# Tags remembered per process, at most: past it the memory starts again empty, so a process
# that looks up jobs of many queues keeps a bounded map (a miss costs one SMEMBERS).
TAG_CACHE_LIMIT = 4096

Reader = Callable[[str], Callable[[Any], Any]]


class JobLocator:
    """Resolves job ids to queues for one process; remembers which queues each tag names.

    `known`: the queue names this process knows without reading Redis (those it listed or
    read the list of). While the global slot's master fails over on a cluster, the known
    queues with an id's tag answer instead of the tag map, so lookups of jobs on the other
    masters go on.
    """

    def __init__(self, scripts: Scripts, known: Callable[[], Iterable[str]] = tuple) -> None:
        self.scripts = scripts
        self.known = known
        self._tagged: dict[str, tuple[str, ...]] = {}

    def forget(self) -> None:
        """Forget every tag's queues (a queue was deleted: the next lookup reads the map)."""
        self._tagged.clear()

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

    def held_elsewhere(self, job_id: str, queue: str) -> str | None:
        """Return a queue other than `queue` that holds this id, or None.

        A client's id carries its queue's tag, so only a queue whose name hashes to the same
        tag (about q²/2³³ for q queues) can hold it too: the tag's queues are read once per
        process and tag (remembered after), and only when they name another queue does this
        cost a round trip (an EXISTS there). Not atomic with the enqueue that follows.
        """
        tag = tag_of(job_id)
        names = self._tagged.get(tag)
        if names is None or queue not in names:
            names = self._tag_names(tag)
        others = [name for name in names if name != queue]
        if not others:
            return None

        def exists(name: str) -> Callable[[Any], Any]:
            keys = self.scripts.keys.for_queue(name)
            return lambda pipe: pipe.exists(keys.job(job_id))

        found = first_found(self.scripts.redis, others, exists)
        return found[0] if found is not None else None

    def find_job(self, job_id: str) -> Job | None:
        """Return the job with this id from whichever queue holds it, or None."""

        def hgetall(name: str) -> Callable[[Any], Any]:
            key = self.scripts.keys.for_queue(name).job(job_id)
            return lambda pipe: pipe.hgetall(key)

        found = self._search(job_id, hgetall)
        return Job.from_hash(found[1], job_id, found[0]) if found is not None else None

    def locate_many(self, ids: Sequence[str], among: Iterable[str] | None = None) -> dict[str, str]:
        """Return the queue holding each of `ids` that is found (in `among` only, if given).

        Two round trips for the lot: the tags' sets (one SMEMBERS per distinct tag), then one
        EXISTS per (id, queue its tag names).
        """
        allowed = None if among is None else set(among)
        client = self.scripts.redis
        tags = list(dict.fromkeys(tag_of(jid) for jid in ids))
        pipe = client.pipeline(transaction=False)
        for tag in tags:
            pipe.smembers(self.scripts.keys.queue_tag(tag))
        named = pipe.execute() if tags else []
        by_tag = {
            tag: sorted(q for q in (n.decode() for n in names) if allowed is None or q in allowed)
            for tag, names in zip(tags, named, strict=True)
        }
        pairs = [(jid, queue) for jid in ids for queue in by_tag[tag_of(jid)]]
        pipe = client.pipeline(transaction=False)
        for jid, queue in pairs:
            pipe.exists(self.scripts.keys.for_queue(queue).job(jid))
        found: dict[str, str] = {}
        for (jid, queue), exists in zip(pairs, pipe.execute() if pairs else [], strict=True):
            if exists:
                found.setdefault(jid, queue)
        return found

    def _search(self, job_id: str, read: Reader) -> tuple[str, Any] | None:
        """Read `read(queue)` in the queues the id's tag names: those remembered first, then,
        when none had it, any the tag map names besides (another process may have listed a
        queue since, or the remembered ones were deleted)."""
        tag = tag_of(job_id)
        known = self._tagged.get(tag)
        client = self.scripts.redis
        if known:
            found = first_found(client, known, read)
            if found is not None:
                return found
        added = [name for name in self._tag_names(tag) if name not in (known or ())]
        return first_found(client, added, read) if added else None

    def _tag_names(self, tag: str) -> tuple[str, ...]:
        """Read the queues whose ids carry `tag` (one SMEMBERS in the global slot); remember them.

        While the global slot's master fails over on a cluster, the known queues with that tag
        answer instead; with none, or on one Redis (where nothing else would answer either),
        the error is raised.
        """
        try:
            raw = self.scripts.redis.smembers(self.scripts.keys.queue_tag(tag))
        except MASTER_DOWN:
            mine = tuple(sorted({name for name in self.known() if queue_tag(name) == tag}))
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
