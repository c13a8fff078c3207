"""A stop signal sent to a child between its fork and its own handlers (ForkSpawner, the real
fork): it waits for them and is handled, not lost to the handler the child inherited. Lost,
the supervisor's drain waited its whole grace for a child that never stopped."""

from __future__ import annotations

import os
import signal
import time

from workerd.children import ForkSpawner, accept_stop_signals

WAIT = 10.0


def test_a_sigterm_sent_before_the_childs_handlers_are_in_waits_for_them() -> None:
    read_end, write_end = os.pipe()

    def body() -> int:
        os.write(write_end, b"forked ")
        # The parent signals now; the child is still setting up (no handler of its own yet).
        deadline = time.monotonic() + WAIT
        while signal.SIGTERM not in signal.sigpending():
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.001)
        signal.signal(signal.SIGTERM, lambda *_: os.write(write_end, b"handled"))
        accept_stop_signals()
        return 0

    pid = ForkSpawner().spawn("child", body)
    try:
        assert os.read(read_end, 100) == b"forked "
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert os.read(read_end, 100) == b"handled"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_supervisor_takes_its_own_stop_signals_again_after_a_fork() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    pid = ForkSpawner().spawn("child", lambda: 0)
    os.waitpid(pid, 0)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
