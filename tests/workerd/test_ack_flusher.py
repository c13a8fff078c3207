"""workerd.ack_flusher: the thread that keeps the ack delay while a job runs."""

from __future__ import annotations

import threading
import time

from workerd.ack_flusher import RETRY_AFTER, AckFlusher

BOUND = 5.0  # seconds: every wait here is bounded by it


def test_it_flushes_at_the_deadline_while_armed() -> None:
    flushed = threading.Event()
    flusher = AckFlusher(flushed.set, time.monotonic)
    assert flusher._thread is None  # no thread before the first job armed

    flusher.arm(time.monotonic() + 0.05)

    assert flushed.wait(BOUND)
    flusher.close()


def test_disarming_waits_for_a_flush_in_progress_and_a_disarmed_one_never_flushes() -> None:
    started, release, flushes = threading.Event(), threading.Event(), []

    def slow_flush() -> None:  # a flush waiting out an outage
        flushes.append(time.monotonic())
        started.set()
        release.wait(BOUND)

    flusher = AckFlusher(slow_flush, time.monotonic)
    flusher.arm(time.monotonic())  # due at once
    assert started.wait(BOUND)
    disarmed = threading.Event()

    def disarm() -> None:
        flusher.disarm()
        disarmed.set()

    threading.Thread(target=disarm, daemon=True).start()
    assert not disarmed.wait(0.1)  # the main thread waits for the flush in progress ...
    release.set()
    assert disarmed.wait(BOUND)  # ... and goes on once it ended

    # Armed far ahead and disarmed: no flush; closing ends the thread.
    flusher.arm(time.monotonic() + 3600)
    flusher.disarm()
    flusher.close()
    assert flusher._thread is not None
    flusher._thread.join(BOUND)
    assert not flusher._thread.is_alive() and len(flushes) == 1


def wait_for(condition: object, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_jobs_of_one_batch_do_not_wake_the_thread() -> None:
    # Each job of a batch arms the oldest completion's deadline and disarms at its end: the
    # thread, asleep toward that deadline, must not be woken (a wake a job cost a third of a
    # batched no-op drain: workerd/ack_flusher.py).
    flushes: list[float] = []
    flusher = AckFlusher(lambda: flushes.append(time.monotonic()), time.monotonic)
    deadline = time.monotonic() + 3600
    flusher.arm(deadline)
    wait_for(lambda: flusher._wakes_at == deadline, "the thread to sleep toward the deadline")
    wakes = flusher.wakes
    for _ in range(50):
        flusher.disarm()
        flusher.arm(deadline)
        time.sleep(0.001)  # the job: the GIL let go, as a handler's I/O does
    flusher.disarm()
    assert flusher.wakes == wakes and flushes == []
    flusher.close()


def test_a_deadline_passed_between_jobs_flushes_nothing() -> None:
    # Disarmed before its deadline: the main thread sends them itself before its next job.
    flushes: list[float] = []
    flusher = AckFlusher(lambda: flushes.append(time.monotonic()), time.monotonic)
    flusher.arm(time.monotonic() + 0.05)
    flusher.disarm()
    wait_for(lambda: flusher._deadline is None, "the thread to pass the deadline")
    assert flushes == []
    flusher.close()


def test_a_flush_that_keeps_raising_is_tried_ever_less_often() -> None:
    """A bug that persists must not log a traceback every RETRY_AFTER for as long as the job
    runs (up to its timeout, 10 min by default: 6,000 of them): each try waits twice the last."""
    now = [100.0]
    tries: list[float] = []

    def flush_raises() -> None:
        tries.append(now[0])
        raise ValueError("a bug in the flush")

    flusher = AckFlusher(flush_raises, lambda: now[0])
    flusher.arm(now[0])  # due at once
    waits = []
    for tried in (1, 2, 3):
        wait_for(lambda n=tried: len(tries) == n, f"try {tried}")  # type: ignore[misc]
        with flusher.lock:  # the thread set its next try before it let go of the lock
            assert flusher._deadline is not None
            waits.append(round(flusher._deadline - now[0], 6))
            now[0] = flusher._deadline  # the retry is due
            flusher.lock.notify()
    flusher.close()
    assert waits == [RETRY_AFTER, 2 * RETRY_AFTER, 4 * RETRY_AFTER]


def test_a_polled_flusher_has_no_thread_and_flushes_only_when_polled_past_its_deadline() -> None:
    # A job thread's (WORKER_THREADS > 1): its process's main thread polls it.
    now, flushes = [100.0], []
    flusher = AckFlusher(lambda: flushes.append(now[0]), lambda: now[0], polled=True)
    flusher.arm(100.1)
    flusher.poll()  # before the deadline: nothing
    now[0] = 100.2
    assert flushes == [] and flusher._thread is None  # nothing flushes by itself
    flusher.poll()
    flusher.poll()  # once per deadline
    assert flushes == [100.2]
    flusher.arm(100.3)
    flusher.disarm()  # the job ended before its deadline
    now[0] = 101.0
    flusher.poll()
    assert flushes == [100.2] and flusher._thread is None
