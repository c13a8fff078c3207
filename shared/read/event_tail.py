"""One tail per gateway process: it follows the event streams and wakes the readers.

Each open ``GET /events`` holds a thread but no Redis connection. The tail holds one of its
own (outside the gateway's bounded pool): ``XREAD BLOCK`` from the last id it saw, then one
read of what arrived (shared.engine.events.read_events: entries and gap check in one MULTI). On one
Redis every event is in one stream, so that is one stream however many queues there are; on a
Redis Cluster each queue has its own, and the tail follows every listed queue's
(_wait_for_growth). It keeps the last WINDOW entries of each stream in memory with the id they
follow (`floor`): every entry after the floor is there, in order. Then it bumps a version under
a condition and wakes every reader. A reader whose position is at or after a stream's floor
takes its entries from memory, with no Redis call at all; one further behind (a client resumed
from an older cursor, or one that fell WINDOW entries behind) reads Redis itself, gap check
included. Fifty streams thus cost Redis three calls per event and process (the blocking
XREAD, then XINFO and XREAD in one MULTI), not a hundred.

It starts with the first reader and ends when the last one leaves, when the gunicorn worker
stops (``alive`` turns false: shutdown or recycling), or on ``stop()``. On an error (Redis's,
or a bug's) it forgets its windows and wakes every reader: they read Redis themselves (in an
outage that fails and their streams end; a browser's EventSource reconnects with
Last-Event-ID); it tries again each RETRY_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.exceptions

from shared.connect.redis_conn import disconnect, is_cluster
from shared.engine.events import (
    FLEET,
    Event,
    StreamId,
    format_id,
    latest_positions,
    read_events,
    stream_key,
    stream_of,
)
from shared.engine.keys import Keys

log = logging.getLogger(__name__)

# On a Redis Cluster the tail blocks on one stream at a time, this long (_wait_for_growth).
CLUSTER_BLOCK_MS = 250
BLOCK_MS = 1000  # longest XREAD BLOCK: how soon the tail sees a stopping worker or new queue
REFRESH_SECONDS = 5.0  # how often the list of queues is re-read (a new queue's stream joins)
RETRY_SECONDS = 1.0  # pause after a Redis error before the next try
READ_COUNT = 500  # entries per stream per read
# Entries kept per stream: a reader this far behind still reads from memory. On one Redis the
# one stream carries every queue's events, hence more than each of a Cluster's per-queue
# streams keeps (there a window per queue that wrote: memory grows with the queues).
WINDOW = 1000
CLUSTER_WINDOW = 200


@dataclass
class Window:
    """The last entries of one stream: every entry after `floor` is in `events`, in order."""

    floor: StreamId
    size: int = 0  # entries kept (0: WINDOW)
    events: deque[Event] = field(default_factory=deque)

    def add(self, event: Event) -> None:
        """Append the stream's next entry, forgetting the oldest beyond its size."""
        self.events.append(event)
        if len(self.events) > (self.size or WINDOW):
            self.floor = self.events.popleft().id

    @property
    def last(self) -> StreamId:
        """Return the id of the last entry seen (the floor until one arrives)."""
        return self.events[-1].id if self.events else self.floor

    def after(self, position: StreamId) -> list[Event] | None:
        """Return the entries after `position`, or None if some of them are not here."""
        if position < self.floor:
            return None
        newer: list[Event] = []
        for event in reversed(self.events):
            if event.id <= position:
                break
            newer.append(event)
        return newer[::-1]


class EventTail:
    """Wakes the readers of one process when any event stream grows."""

    def __init__(
        self,
        connect: Callable[[], redis.Redis],
        keys: Keys,
        queue_names: Callable[[], list[str]],
        *,
        alive: Callable[[], bool] = lambda: True,
        block_ms: int = BLOCK_MS,
        per_queue: bool = False,
    ) -> None:
        self._connect = connect  # called in the tail's thread: its own connection
        self._keys = keys
        self.per_queue = per_queue  # a Cluster: one stream per queue (shared.engine.events)
        self._queue_names = queue_names
        self._alive = alive
        self._block_ms = block_ms
        self._turn = 0  # which stream a cluster's tail blocks on next (_wait_for_growth)
        self._cond = threading.Condition()
        self._version = 0
        self._changed: dict[str, int] = {}  # stream name -> version of its last growth
        self._windows: dict[str, Window] = {}
        self._names: list[str] = []  # the listed queues (what unfiltered readers follow)
        # Queues a reader names: the tail re-reads the list of queues at once, not within
        # REFRESH_SECONDS. Only listed ones are watched, so a client naming made-up queues
        # cannot grow what the tail reads (a queue is listed before its first job).
        self._wanted: set[str] = set()
        self._readers = 0
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- the readers' side -------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Return the current version (take it before a read, wait on it after)."""
        with self._cond:
            return self._version

    @property
    def stopping(self) -> bool:
        """Tell whether readers should end their streams (the worker is going away)."""
        return self._stopping

    @property
    def running(self) -> bool:
        """Tell whether the tail's thread runs (from the first reader to shortly after the last)."""
        with self._cond:
            return self._thread is not None

    def stream_of(self, queue: str) -> str:
        """Return the name of the stream that holds `queue`'s events."""
        return stream_of(queue, self.per_queue)

    def queue_names(self) -> list[str]:
        """Return the queues whose streams the tail watches (a Cluster's; none on one Redis)."""
        with self._cond:
            return list(self._names)

    def changed_since(self, version: int) -> set[str]:
        """Return the streams that grew after `version` (or joined the tail since)."""
        with self._cond:
            return {name for name, at in self._changed.items() if at > version}

    def entries_after(self, name: str, position: StreamId) -> list[Event] | None:
        """Return a stream's entries after `position` from memory; None: read Redis instead."""
        with self._cond:
            window = self._windows.get(name)
            return None if window is None else window.after(position)

    def position(self, name: str) -> StreamId | None:
        """Return the last id the tail has of a stream; None while it does not watch it.

        Every entry after it reaches the tail's memory later: a reader that takes it before
        reading what the stream records (a job's state) misses no later change.
        """
        with self._cond:
            window = self._windows.get(name)
            return None if window is None else window.last

    def wait(self, version: int, timeout: float) -> int:
        """Wait until the version moves past `version` or `timeout` s pass; return it."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._stopping, timeout)
            return self._version

    def join(self, queues: list[str] | None = None) -> None:
        """Count a reader in (watching `queues` within BLOCK_MS); start the tail if need be."""
        with self._cond:
            self._readers += 1
            if self.per_queue:
                self._wanted.update(queues or ())
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="event-tail", daemon=True)
                self._thread.start()

    def leave(self) -> None:
        """Count a reader out (the tail ends within BLOCK_MS after the last one)."""
        with self._cond:
            self._readers -= 1

    def stop(self) -> None:
        """End every reader's stream and the tail; joins after this start nothing."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    # --- the tail's thread -------------------------------------------------------------------

    def _bump(self, names: set[str]) -> None:
        with self._cond:
            self._version += 1
            for name in names:
                self._changed[name] = self._version
            self._cond.notify_all()

    def _should_run(self) -> bool:
        if not self._alive():
            self.stop()
        with self._cond:
            if self._readers > 0 and not self._stopping:
                return True
            self._thread = None
            self._windows.clear()  # nobody follows them now: they would only go stale
            return False

    def _run(self) -> None:
        client = self._connect()
        positions: dict[str, StreamId] = {}
        refreshed = float("-inf")
        try:
            while self._should_run():
                try:
                    if not positions or (
                        self.per_queue
                        and (self._wanted or time.monotonic() - refreshed >= REFRESH_SECONDS)
                    ):
                        self._refresh(client, positions)
                        refreshed = time.monotonic()
                    self._step(client, positions)
                except Exception as exc:
                    # Any error, not only Redis's: a thread that died here would stay counted
                    # as running, so no join would start another and every stream would go
                    # silent. A bug is logged with its traceback and retried like an outage.
                    if isinstance(exc, redis.exceptions.RedisError):
                        log.warning("events_tail_error", extra={"error": type(exc).__name__})
                    else:
                        log.exception("events_tail_failed", extra={"error": type(exc).__name__})
                    with self._cond:
                        self._windows.clear()  # readers read Redis: it fails, they end
                    self._bump(set(positions))
                    positions.clear()  # pinned again on the next try
                    refreshed = float("-inf")
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopping, RETRY_SECONDS)
        finally:
            disconnect(client)  # its own pool: closing the client keeps it

    def _refresh(self, client: redis.Redis, positions: dict[str, StreamId]) -> None:
        """Watch the global stream and (Cluster) every listed queue's: a new stream starts at
        its last id, and readers look. On one Redis the list of queues is never read."""
        with self._cond:
            self._wanted = set()  # asked for: this refresh answers it
        names = sorted(set(self._queue_names())) if self.per_queue else []
        new = [name for name in [FLEET, *names] if name not in positions]
        pinned = latest_positions(client, self._keys, new) if new else {}
        positions.update(pinned)
        with self._cond:
            self._names = names
            for name, position in pinned.items():
                self._windows[name] = self._window(position)
        if new:
            self._bump(set(new))  # entries written before the pin are the readers' to find

    def _window(self, floor: StreamId) -> Window:
        return Window(floor, CLUSTER_WINDOW if self.per_queue else 0)

    def _wait_for_growth(self, client: redis.Redis, streams: dict[str, str]) -> list[Any]:
        """Return XREAD's reply for the streams that grew past their ids, waiting up to the block.

        One Redis: one XREAD BLOCK of every stream. A Redis Cluster refuses an XREAD whose
        streams sit in different slots (every queue's has its own), so there each round reads
        every stream without blocking (a pipeline: one round trip per master), then blocks on
        one of them for CLUSTER_BLOCK_MS, the next one next time. The cost, per gateway
        process with readers: (streams + 1) commands a slice, and an event of a stream it is
        not blocked on reaches the readers within a slice.
        """
        if not is_cluster(client):
            return client.xread(streams, count=1, block=self._block_ms) or []
        pipe = client.pipeline(transaction=False)
        for key, position in streams.items():
            pipe.xread({key: position}, count=1)
        reply = [entry for answer in pipe.execute() for entry in answer or []]
        if reply:
            return reply
        keys = list(streams)
        self._turn = (self._turn + 1) % len(keys)
        key = keys[self._turn]
        block = min(self._block_ms, CLUSTER_BLOCK_MS)
        return client.xread({key: streams[key]}, count=1, block=block) or []

    def _step(self, client: redis.Redis, positions: dict[str, StreamId]) -> None:
        """Block until a stream grows (or BLOCK_MS pass), take what arrived, wake the readers."""
        keys = {stream_key(self._keys, name): name for name in positions}
        streams = {key: format_id(positions[name]) for key, name in keys.items()}
        # Only a signal: the entries are read again below, with the gap check, atomically.
        reply = self._wait_for_growth(client, streams)
        grown = {keys[key.decode() if isinstance(key, bytes) else key] for key, _ in reply or []}
        while grown:
            batch = read_events(client, self._keys, {n: positions[n] for n in grown}, READ_COUNT)
            lost = {gap.stream for gap in batch.gaps}
            with self._cond:
                for event in batch.events:
                    positions[event.stream] = event.id
                    if event.stream not in lost:
                        self._windows[event.stream].add(event)
                for name in lost:  # the window restarts past the hole; readers behind it
                    self._windows[name] = self._window(positions[name])  # read Redis, gap too
            self._bump(grown)
            grown = {event.stream for event in batch.events} if batch.more else set()
