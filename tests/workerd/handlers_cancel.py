"""Job types of the cancel tests: how a running job meets its cancel.

Each appends JSON lines to the file its payload names (one write per line, O_APPEND): start,
and what it saw on the way out, so a test knows the handler's own view.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from workerd import JobContext, handler


def _note(payload: dict[str, Any], job: JobContext, event: str, **more: Any) -> None:
    line = json.dumps({"event": event, "id": job.id, "pid": os.getpid(), "at": time.time(), **more})
    fd = os.open(payload["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@handler("cancel_sleeper")
def sleeper(payload: dict[str, Any], job: JobContext) -> str:
    """Sleep in Python in short steps, never asking: a cancel's SIGTERM interrupts it."""
    _note(payload, job, "start")
    try:
        deadline = time.monotonic() + float(payload.get("seconds", 30))
        while time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        _note(payload, job, "unwound")  # JobCanceled unwinds the stack: finally blocks run
    _note(payload, job, "end")
    return "slept"


@handler("cancel_polite")
def polite(payload: dict[str, Any], job: JobContext) -> str:
    """Ask job.cancel_requested() between steps and stop by itself (returns)."""
    _note(payload, job, "start")
    deadline = time.monotonic() + float(payload.get("seconds", 30))
    while time.monotonic() < deadline:
        if job.cancel_requested():
            _note(payload, job, "saw_cancel")
            return "stopped early"
        time.sleep(0.01)
    _note(payload, job, "end")
    return "finished"


@handler("cancel_stubborn")
def stubborn(payload: dict[str, Any], job: JobContext) -> str:
    """Ignore the cancel: swallow JobCanceled (any BaseException), or hold the GIL in one long
    C call (payload["c"]), where no Python signal handler can run. Only SIGKILL stops it."""
    _note(payload, job, "start")
    if payload.get("c"):
        sum(range(10**12))  # minutes of C with the GIL held
    deadline = time.monotonic() + float(payload.get("seconds", 30))
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except BaseException as exc:
            _note(payload, job, "swallowed", kind=type(exc).__name__)
    return "never stopped"


@handler("cancel_quick")
def quick(payload: dict[str, Any], job: JobContext) -> str:
    """Sleep payload["seconds"] then return: the race with a cancel at its end."""
    _note(payload, job, "start")
    time.sleep(float(payload["seconds"]))
    return "done"
