"""workerd.ack_flusher: the thread that keeps the ack delay while a job runs."""

from __future__ import annotations

import threading
import time

from workerd.ack_flusher import AckFlusher

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
