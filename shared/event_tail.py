"""One tail per gateway process: it blocks on every event stream and wakes the readers.

Each open ``GET /events`` holds a thread but no Redis connection. The tail holds one of its
own (outside the gateway's bounded pool) for ``XREAD BLOCK`` on every stream from the last id
it saw; when entries arrive it bumps a version under a condition and wakes every reader, which
then reads its own positions with a short non-blocking read. The tail only signals: what a
reader sends comes from its own read, so resumption and gap checks stay per reader.

It starts with the first reader and ends when the last one leaves, when the gunicorn worker
stops (``alive`` turns false: shutdown or recycling), or on ``stop()``. While Redis is down it
wakes every reader (their reads fail and their streams end: a browser's EventSource
reconnects with Last-Event-ID) and tries again each RETRY_SECONDS.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis
import redis.exceptions

from shared.events import FLEET, StreamId, format_id, id_of, latest_positions, stream_key
from shared.keys import Keys

log = logging.getLogger(__name__)

BLOCK_MS = 1000  # longest XREAD BLOCK: how soon the tail sees a stopping worker or new queue
REFRESH_SECONDS = 5.0  # how often the list of queues is re-read (a new queue's stream joins)
RETRY_SECONDS = 1.0  # pause after a Redis error before the next try
READ_COUNT = 1000  # entries per stream per XREAD: the tail reads only to move past them


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
    ) -> None:
        self._connect = connect  # called in the tail's thread: its own connection
        self._keys = keys
        self._queue_names = queue_names
        self._alive = alive
        self._block_ms = block_ms
        self._cond = threading.Condition()
        self._version = 0
        self._changed: dict[str, int] = {}  # stream name -> version of its last growth
        self._names: list[str] = []
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

    def queue_names(self) -> list[str]:
        """Return the queues the tail watches (empty until its first refresh)."""
        with self._cond:
            return list(self._names)

    def changed_since(self, version: int) -> set[str]:
        """Return the streams that grew after `version` (or joined the tail since)."""
        with self._cond:
            return {name for name, at in self._changed.items() if at > version}

    def wait(self, version: int, timeout: float) -> int:
        """Wait until the version moves past `version` or `timeout` s pass; return it."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version or self._stopping, timeout)
            return self._version

    def join(self) -> None:
        """Count a reader in; start the tail if it is not running."""
        with self._cond:
            self._readers += 1
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
            return False

    def _run(self) -> None:
        client = self._connect()
        positions: dict[str, StreamId] = {}
        refreshed = float("-inf")
        try:
            while self._should_run():
                try:
                    if time.monotonic() - refreshed >= REFRESH_SECONDS:
                        self._refresh(client, positions)
                        refreshed = time.monotonic()
                    self._step(client, positions)
                except redis.exceptions.RedisError as exc:
                    log.warning("events_tail_error", extra={"error": type(exc).__name__})
                    positions.clear()  # re-pinned on the next try: entries may have moved on
                    refreshed = float("-inf")
                    self._bump(set())  # readers try their own read: it fails, they end
                    with self._cond:
                        self._cond.wait_for(lambda: self._stopping, RETRY_SECONDS)
        finally:
            client.close()

    def _refresh(self, client: redis.Redis, positions: dict[str, StreamId]) -> None:
        """Watch every listed queue: a new stream starts at its last id, and readers look."""
        names = sorted(set(self._queue_names()))
        new = [name for name in [FLEET, *names] if name not in positions]
        if new:
            positions.update(latest_positions(client, self._keys, new))
        with self._cond:
            self._names = names
        if new:
            self._bump(set(new))  # entries written before the pin are the readers' to find

    def _step(self, client: redis.Redis, positions: dict[str, StreamId]) -> None:
        """Block until a stream grows (or BLOCK_MS pass); tell the readers which did."""
        keys = {stream_key(self._keys, name): name for name in positions}
        streams = {key: format_id(positions[name]) for key, name in keys.items()}
        reply = client.xread(streams, count=READ_COUNT, block=self._block_ms)
        grown: set[str] = set()
        for key, entries in reply or []:
            name = keys[key.decode() if isinstance(key, bytes) else key]
            if entries:
                positions[name] = id_of(entries[-1][0])
                grown.add(name)
        if grown:
            self._bump(grown)
