"""The ack delay's bound while a job runs (WORKER_BATCH, workerd.batching), and the read of a
call in flight while a held job runs long (WORKER_PREFETCH, workerd.prefetch.READ_LATE).

Holding the next job, the worker arms the same thread as each held job starts, with the
deadline READ_LATE after the call in flight was sent: should the held job still run then, the
thread reads the reply and records the completion it carried (WorkerProcess._read_late), as the
batch's flush sends the completions waiting. What follows is written for the batch; the same
holds for the read. A job thread's flusher (WORKER_THREADS > 1) is `polled`: it has no thread;
its process's main thread, which waits on the job threads anyway, polls every job thread's
flusher each READ_LATE (workerd.worker_threads). A thread per job thread woke ten times a second
each, about a quarter of a wake a job in a 4 × 8 I/O drain.

Between jobs the worker's main thread keeps the bound itself (Batch.must_send). A job of a type
known short can still run long, and the completions waiting behind it must not wait for its
end (a death would run them again; past the lease they would be recovered and counted). So one
daemon thread per batched worker process sends them at their deadline (the oldest waiting one's
finish + ACK_DELAY) when the job running then has not ended by it.

The main thread arms the flusher when it starts a job with completions waiting and disarms it
when the job ends: a lock per job, where a timer per job would cost a thread (~100 µs). The
thread is woken only when it would otherwise sleep past the new deadline. A disarm leaves the
deadline in place and only marks the job ended: the thread wakes at it, finds no job running
(the main thread sends them itself before its next job, Batch.must_send) and sleeps until the
next arm. Clearing the deadline at each disarm, as first written, made the thread wait for a
notify at nearly every job: woken by one job's arm, it runs only once the main thread lets go
of the GIL, by when that job has often ended — a notify and two GIL hand-offs a job, 30–40 µs
of worker CPU per no-op job (bench.job_cpu). A flush holds the same lock (an RLock: the flush takes it again to touch the waiting
list), so disarming waits for a flush in progress and, between jobs, the main thread alone
touches the completions. A batch's flush claims nothing (count 0): no claim fence, no claim
planning; a late read takes the call's reply as the main thread would have, the job it claimed
kept for the main thread, and gives back the claim lock the call held. The thread starts with
the first job armed, so a worker with neither a batch nor holding (WORKER_PREFETCH=off), or
without short jobs, never has one; daemon, it does not keep the process alive at exit. The
worker process forks nothing (the supervisor forks, and has no thread).

A flush that raises something other than a Redis error (those it waits out itself: the
worker's backoff) is a bug, but must not end the thread: with it gone, completions would wait
for the end of whatever job runs, and past their leases be recovered and run again. The
flush puts back the completions it did not send (WorkerProcess._send_done); the thread logs
``ack_flush_failed`` and tries again after RETRY_AFTER while the job still runs, each further
failure waiting twice as long (up to RETRY_MAX).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# Seconds before the first try again of a flush that raised (a bug): often enough to keep the
# ack delay's order of magnitude. Each further failure waits twice the last, up to RETRY_MAX: a
# bug that persists logs a traceback a few times a minute, not ten a second for the whole job
# (up to its timeout), while the completions still go far within their leases (30 s default).
RETRY_AFTER = 0.1
RETRY_MAX = 1.6


class AckFlusher:
    """Sends the completions waiting at their deadline while a job runs, on its own thread
    (`polled`: on no thread of its own, when its owner calls :meth:`poll`)."""

    def __init__(
        self, flush: Callable[[], None], clock: Callable[[], float], *, polled: bool = False
    ) -> None:
        self.polled = polled
        # The condition's own lock, taken bare where nothing waits or is notified (arm without
        # a notify, disarm, poll): Condition's Python-level enter and exit doubled what arming
        # and disarming cost a job (callgrind: ~10k instructions a pair).
        self._mutex = threading.RLock()
        self.lock = threading.Condition(self._mutex)
        self._flush = flush  # sends the completions waiting, claiming nothing; takes `lock`
        self._clock = clock  # the worker's monotonic clock (the completions' times are on it)
        self._deadline: float | None = None  # the last armed job's, until passed
        self._running = False  # armed: a job with completions waiting runs now
        self._wakes_at: float | None = None  # the thread's next wake by itself (None: notify)
        self._thread: threading.Thread | None = None
        self._closed = False
        self._retry_after = RETRY_AFTER  # the wait after the next failure (doubled by each)
        self.wakes = 0  # the thread's turns of its loop (the tests count them)

    def arm(self, deadline: float) -> None:
        """A job starts with completions waiting: send them at `deadline` if it still runs."""
        with self._mutex:
            self._deadline, self._running = deadline, True
            if self.polled:
                return
            if self._wakes_at is None or deadline < self._wakes_at:
                self.lock.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ack-flusher", daemon=True)
            self._thread.start()

    def disarm(self) -> None:
        """The job ended: no flush from now on (waits for one in progress to finish)."""
        with self._mutex:
            self._running = False

    def close(self) -> None:
        """End the thread (the worker is stopping)."""
        with self.lock:
            self._deadline, self._running, self._closed = None, False, True
            self.lock.notify()

    def _run(self) -> None:
        with self.lock:
            while not self._closed:
                self.wakes += 1
                if self._deadline is None:
                    self._wakes_at = None
                    self.lock.wait()
                    continue
                left = self._deadline - self._clock()
                if left > 0:
                    self._wakes_at = self._deadline
                    self.lock.wait(left)
                    continue
                self._deadline_passed()

    def poll(self) -> None:
        """Polled: flush now if the job armed runs past its deadline (its owner's tick)."""
        with self._mutex:
            if self._deadline is not None and self._deadline <= self._clock():
                self._deadline_passed()

    def _deadline_passed(self) -> None:
        """Under the lock, the deadline passed: flush if the job armed still runs."""
        self._deadline = None
        if self._running:
            try:
                self._flush()  # under the lock: the job's thread waits for it to end
            except Exception:
                log.exception("ack_flush_failed")
                self._deadline = self._clock() + self._retry_after
                self._retry_after = min(2 * self._retry_after, RETRY_MAX)
            else:
                self._retry_after = RETRY_AFTER
