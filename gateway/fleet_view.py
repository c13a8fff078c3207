"""The gateway process's cached view of the fleet (shared.read.fleet), for the warnings of an
enqueue, which must not spend a Redis command on it.

A daemon thread per gateway process reads the registry every REFRESH_SECONDS (two round trips,
whatever the number of queues) and swaps the result in; an enqueue only looks at the last one.
A thread rather than a refresh after use: an enqueue after a quiet spell (a person trying the
CLI) gets a view at most a few seconds old, not one from minutes ago, and no request ever
waits for the read. It starts with the first look in each process (gunicorn's workers also
start it as they boot: deploy/gunicorn.conf.py), so a process forked from one that ran it
starts its own instead of trusting a thread that did not survive the fork.

No view yet, or one older than MAX_AGE_SECONDS (Redis unreadable since): no warnings at all,
rather than false ones.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import redis

from shared.read.fleet import Fleet

log = logging.getLogger(__name__)

REFRESH_SECONDS = 2.0  # the registry's heartbeat interval: fresher would read the same records
MAX_AGE_SECONDS = 10.0  # a host's record outlives its last heartbeat this long, too


class FleetView:
    """The last fleet read in this process, and the thread that keeps reading it."""

    def __init__(
        self,
        read: Callable[[], Fleet],
        *,
        every: float = REFRESH_SECONDS,
        max_age: float = MAX_AGE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.every = every
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[Fleet, float] | None = None  # swapped whole: readers take no lock
        self._owner: int | None = None  # the pid whose thread refreshes
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> Fleet | None:
        """Return the fleet as last read, or None (not read yet, or too long ago); start the
        refresher if this process has none. No Redis command."""
        self.start()
        last = self._last
        if last is None or self._clock() - last[1] > self.max_age:
            return None
        return last[0]

    def warnings(self, queue: str, job_type: str) -> list[str]:
        """Return what an enqueue into `queue` of `job_type` should be told (none when unsure)."""
        fleet = self.current()
        return [] if fleet is None else fleet.warnings(queue, job_type)

    def start(self) -> None:
        """Start the refresher thread in this process, unless it runs (or was stopped) here."""
        pid = os.getpid()
        if self._owner == pid:
            return
        with self._lock:
            if self._owner == pid:
                return
            # In a forked child, the parent's view ages and its thread is gone: start afresh.
            self._owner, self._last, self._stopped = pid, None, threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stopped,), name="fleet-view", daemon=True
            )
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the refresher (waiting up to `timeout` s for it); the view it read stays until
        it is too old, and no look restarts it in this process."""
        with self._lock:
            self._owner = os.getpid()
            self._stopped.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def refresh(self) -> None:
        """Read the fleet now (the thread's step; tests call it to skip the wait)."""
        self._last = (self._read(), self._clock())

    def _run(self, stopped: threading.Event) -> None:
        failing = False
        while not stopped.is_set():
            try:
                self.refresh()
                if failing:
                    log.info("fleet_view_recovered")
                failing = False
            except Exception as exc:  # a dead thread would leave the view to go stale unseen
                if not failing:
                    # An outage is the requests' to report (redis_unavailable); a bug is ours.
                    level = logging.INFO if isinstance(exc, redis.RedisError) else logging.WARNING
                    error = f"{type(exc).__name__}: {exc}"
                    log.log(
                        level,
                        "fleet_view_failed",
                        extra={"error": error},
                        exc_info=level > logging.INFO,
                    )
                failing = True
            stopped.wait(self.every)
