"""The ack delay's bound while a job runs (WORKER_BATCH, workerd.batching).

Between jobs the worker's main thread keeps the bound itself (Batch.must_send). A job of a type
known short can still run long, and the completions waiting behind it must not wait for its
end (a death would run them again; past the lease they would be recovered and counted). So one
daemon thread per batched worker process sends them at their deadline (the oldest waiting one's
finish + ACK_DELAY) when the job running then has not ended by it.

The main thread arms the flusher when it starts a job with completions waiting and disarms it
when the job ends: a lock and a notify per job, where a timer per job would cost a thread
(~100 µs). A flush holds the same lock (an RLock: the flush takes it again to touch the waiting
list), so disarming waits for a flush in progress and, between jobs, the main thread alone
touches the completions. A flush claims nothing (count 0): no claim fence, no claim planning.
The thread starts with the first job armed, so a worker without a batch (WORKER_BATCH=1) or
without short jobs never has one; daemon, it does not keep the process alive at exit. The
worker process forks nothing (the supervisor forks, and has no thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class AckFlusher:
    """Sends the completions waiting at their deadline while a job runs, on its own thread."""

    def __init__(self, flush: Callable[[], None], clock: Callable[[], float]) -> None:
        self.lock = threading.Condition(threading.RLock())
        self._flush = flush  # sends the completions waiting, claiming nothing; takes `lock`
        self._clock = clock  # the worker's monotonic clock (the completions' times are on it)
        self._deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, deadline: float) -> None:
        """A job starts with completions waiting: send them at `deadline` if it still runs."""
        with self.lock:
            self._deadline = deadline
            self.lock.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ack-flusher", daemon=True)
            self._thread.start()

    def disarm(self) -> None:
        """The job ended: no flush from now on (waits for one in progress to finish)."""
        with self.lock:
            self._deadline = None

    def close(self) -> None:
        """End the thread (the worker is stopping)."""
        with self.lock:
            self._deadline, self._closed = None, True
            self.lock.notify()

    def _run(self) -> None:
        with self.lock:
            while not self._closed:
                if self._deadline is None:
                    self.lock.wait()
                    continue
                left = self._deadline - self._clock()
                if left > 0:
                    self.lock.wait(left)
                    continue
                self._deadline = None
                self._flush()  # under the lock: the main thread waits for it to end
