"""A worker process's per-job metric writes, added up in memory and written a few times a second.

Every job moves two lifecycle counters and two histograms (queue wait, handler time): six
values in prometheus_client's multiprocess files, each under one process-wide lock with a
``getpid`` to detect a fork: 12 % of a threaded worker's Python time in an I/O drain
(bench/MEASUREMENTS.md). Held, a job adds its figures to two dicts under an uncontended lock; a
flusher thread writes the sums to the same metrics every FLUSH_INTERVAL while anything is held,
and sleeps on an event otherwise (an idle worker wakes it never).

What it changes for a reader of ``/metrics``: a worker's counts reach the files up to
FLUSH_INTERVAL later, and a worker process that is SIGKILLed (a timeout, a lost lease, the OOM
killer) loses what it held, at most that interval's counts; a worker whose run ends, cleanly
or by a bug, writes them first (:meth:`HeldWrites.flush`). Only worker processes hold their writes
(workerd.supervisor turns it on in each worker child); the gateway, the scheduler and tests
that run a worker in their own process write at once.

A histogram's sums are written through its child's bucket and sum values (``_buckets``,
``_sum``, ``_upper_bounds``): prometheus_client's own observe() does the same per value;
tests/observability/test_held_writes.py checks that held and direct writes give the same
samples, so a release that renames them fails there.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

# Seconds a held figure may wait: well under any scrape interval (Prometheus: 15 s or more).
FLUSH_INTERVAL = 0.2


class HeldWrites:
    """Counter increments and histogram observations of one process, written in bulk."""

    def __init__(self, interval: float = FLUSH_INTERVAL) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._counts: dict[Any, float] = {}  # counter child -> amount to add
        self._observed: dict[Any, list[float]] = {}  # histogram child -> [sum, n per bucket...]
        self._held = threading.Event()  # set once something is held, until the next flush
        self._flusher: threading.Thread | None = None
        self._flushing = threading.Lock()  # one flush at a time: the flusher's or a caller's

    def inc(self, child: Any, amount: float = 1) -> None:
        """Hold a counter increment."""
        with self._lock:
            self._counts[child] = self._counts.get(child, 0) + amount
        self._wake()

    def observe(self, child: Any, value: float) -> None:
        """Hold a histogram observation (in the bucket its observe() would count it in)."""
        bounds = child._upper_bounds
        with self._lock:
            sums = self._observed.get(child)
            if sums is None:
                sums = self._observed[child] = [0.0] * (len(bounds) + 1)
            sums[0] += value
            if value == value:  # NaN goes in no bucket, as observe() puts it (NaN <= +Inf is false)
                sums[1 + bisect.bisect_left(bounds, value)] += 1
        self._wake()

    def flush(self) -> None:
        """Write everything held to the metrics now (a worker stopping, a test)."""
        with self._flushing:
            with self._lock:
                counts, self._counts = self._counts, {}
                observed, self._observed = self._observed, {}
                self._held.clear()
            for child, amount in counts.items():
                child.inc(amount)
            for child, sums in observed.items():
                child._sum.inc(sums[0])
                for bucket, count in zip(child._buckets, sums[1:], strict=True):
                    if count:
                        bucket.inc(count)

    def _wake(self) -> None:
        if self._held.is_set():
            return  # the flusher is counting down already
        if self._flusher is None:
            with self._flushing:
                if self._flusher is None:
                    self._start_flusher()
        self._held.set()

    def _start_flusher(self) -> None:
        thread = threading.Thread(target=self._run, name="metrics-flusher", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # no thread to be had (a pids limit): a metric must not fail a job
            # Tried again at the next wake after a flush; until then what is held is written
            # when the worker waits idle or stops.
            log.exception("metrics_flush_failed")
            return
        self._flusher = thread

    def _run(self) -> None:
        while True:
            self._held.wait()
            # Let the interval's jobs add to the sums first: one write per figure, not per job.
            time.sleep(self.interval)
            try:
                self.flush()
            except Exception:  # a metrics file that cannot be written must not stop the flusher
                log.exception("metrics_flush_failed")
