"""``journaled_kill``: a journaled job whose first execution SIGKILLs its own worker at a point.

The points of scenario 1 (docs/RELIABILITY.md) that a handler can reach exactly:

- ``start``: right after the claim, before any side effect (no journal line);
- ``after_effect``: after the side effect (the journal line), before the acknowledgement.

Only the first execution dies: it creates ``payload["marker"]`` with O_EXCL (one process
wins) and writes the kill time into it, so the test can time the recovery. Every later
execution journals and completes like ``journaled``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from tests.faults.handlers_for_faults import append_line
from workerd import JobContext, handler


def _first_execution(marker: str) -> bool:
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _die(marker: str) -> None:
    with open(marker, "w") as out:  # the kill time, for the recovery figure
        out.write(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)


@handler("journaled_kill")
def journaled_kill(payload: dict[str, Any], job: JobContext) -> dict[str, Any]:
    """Journal the execution; on the first one, SIGKILL this worker at payload["kill_at"]."""
    started = time.time()
    first = _first_execution(payload["marker"])
    if first and payload["kill_at"] == "start":
        _die(payload["marker"])
    entry = {"id": job.id, "type": job.type, "attempt": job.attempt, "pid": os.getpid()}
    append_line(payload["file"], {**entry, "start": started, "end": time.time(), "outcome": "ok"})
    if first and payload["kill_at"] == "after_effect":
        _die(payload["marker"])
    return {"pid": os.getpid()}
