"""Job types only the workerd tests use: a journal of executions and a GIL-holding job.

A journal is a JSON-lines file named in the payload; each execution appends a ``start`` line
and, if it finishes, an ``end`` line, each with the job id, attempt, recoveries and pid. One
``write`` per line on an O_APPEND descriptor, so lines from several processes never interleave.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from tests.workerd.release_file import wait_for_release
from workerd import JobContext, PermanentError, handler

RELEASE_WAIT = 30.0  # seconds a journal job waits for its release file at most


def _append(path: str, entry: dict[str, Any]) -> None:
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _entry(job: JobContext, event: str, started: float) -> dict[str, Any]:
    return {
        "event": event,
        "id": job.id,
        "attempt": job.attempt,
        "recoveries": job.recoveries,
        "pid": os.getpid(),
        "start": started,
        "end": time.time() if event == "end" else None,
    }


@handler("journal")
def journal(payload: dict[str, Any], job: JobContext) -> dict[str, int]:
    """Journal the execution; sleep payload["sleep"] seconds (releasing the GIL) in between.

    With payload["die_after"]: the first run (never recovered) sleeps that long, journals a
    ``kill`` line (its ``end``: the kill time) and SIGKILLs its own worker process. With
    payload["release"]: it first waits until that file exists (at most RELEASE_WAIT seconds).
    """
    started = time.time()
    _append(payload["file"], _entry(job, "start", started))
    if "release" in payload:
        wait_for_release(payload["release"], RELEASE_WAIT)
    if "die_after" in payload and job.recoveries == 0:
        time.sleep(float(payload["die_after"]))
        _append(payload["file"], {**_entry(job, "kill", started), "end": time.time()})
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(float(payload.get("sleep", 0)))
    _append(payload["file"], _entry(job, "end", started))
    return {"pid": os.getpid()}


@handler("gil_hog")
def gil_hog(payload: dict[str, Any], job: JobContext) -> dict[str, int]:
    """Hold the GIL in one long C call, sum(range(n)), journaled like ``journal``."""
    started = time.time()
    _append(payload["file"], _entry(job, "start", started))
    total = sum(range(int(payload["n"])))
    _append(payload["file"], _entry(job, "end", started))
    return {"sum": total}


@handler("permanent")
def permanent(payload: dict[str, Any], job: JobContext) -> None:
    """Fail for good: the job goes to the DLQ whatever attempts remain."""
    raise PermanentError(payload.get("error", "permanent failure"))
