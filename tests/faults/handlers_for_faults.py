"""The job type the fault scenarios run: ``journaled``, which records every execution.

Each execution that reaches its end appends exactly one JSON line to the journal file named
in ``payload["file"]`` -- outside Redis, so it survives whatever happens to Redis and to the
worker. The line is the job's *side effect*: an execution killed before it is written left
no effect, one killed after it (before the ack) is a duplicate the checker must explain.

One ``write`` on an O_APPEND descriptor per line, so lines of concurrent processes never
interleave. The handler does not see the job's token (JobContext has none), so the line
carries the attempt and recovery count, which identify the claim as far as a handler can.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from workerd import JobContext, handler


def append_line(path: str, entry: dict[str, Any]) -> None:
    """Append one JSON line to `path` with a single write (atomic for O_APPEND)."""
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@handler("journaled")
def journaled(payload: dict[str, Any], job: JobContext) -> dict[str, Any]:
    """Sleep payload["sleep"] seconds, then journal the execution (start, end, outcome)."""
    started = time.time()
    time.sleep(float(payload.get("sleep", 0)))
    outcome = "error" if payload.get("fail") else "ok"
    append_line(
        payload["file"],
        {
            "id": job.id,
            "type": job.type,
            "attempt": job.attempt,
            "recoveries": job.recoveries,
            "token": None,
            "pid": os.getpid(),
            "start": started,
            "end": time.time(),
            "outcome": outcome,
        },
    )
    if outcome == "error":
        raise RuntimeError("journaled failure on purpose")
    return {"pid": os.getpid()}
