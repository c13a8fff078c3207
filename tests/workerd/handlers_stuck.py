"""A fault for tests/workerd/test_threads.py: job thread 1 stuck between jobs.

Imported by the supervisor with the handlers (TASKFORGE_HANDLERS), so every worker it forks
has it. While the file named by STUCK_FLAG exists, the thread `<worker>.t1` stops at its next
step, before it would beat, and notes that it did in `<flag>.stuck`: a bug of ours standing
still between jobs, which the supervisor's watchdog must notice although a sibling beats.
"""

from __future__ import annotations

import os
import time

from workerd.worker_threads import JobThread

STUCK_FLAG = "TASKFORGE_TEST_STUCK_FLAG"
STUCK_SECONDS = 120.0  # far past any test's wait: the supervisor kills the process first

_step = JobThread.step


def _step_or_stick(self: JobThread) -> None:
    flag = os.environ.get(STUCK_FLAG, "")
    if flag and self.worker_id.endswith(".t1") and os.path.exists(flag):
        with open(f"{flag}.stuck", "a") as note:
            note.write(f"{os.getpid()}\n")
        time.sleep(STUCK_SECONDS)
    _step(self)


JobThread.step = _step_or_stick  # type: ignore[method-assign]
