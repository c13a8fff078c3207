"""Job types of the WORKER_THREADS tests: jobs that prove they ran at the same time.

Each appends JSON lines (one O_APPEND write each) to the file its payload names: start and
end, with the job id, pid, thread, attempt and recoveries.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

from workerd import JobContext, handler

POLL = 0.01  # seconds between looks at the file


def note(path: str, job: JobContext, event: str, **more: Any) -> None:
    """Append one line about `job` to the file at `path`."""
    entry = {
        "event": event,
        "id": job.id,
        "pid": os.getpid(),
        "thread": threading.get_ident(),
        "attempt": job.attempt,
        "recoveries": job.recoveries,
        "at": time.monotonic(),
        **more,
    }
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def starts(path: str) -> set[str]:
    """Return the ids of the jobs whose start the file holds."""
    if not os.path.exists(path):
        return set()
    with open(path) as lines:
        return {e["id"] for e in map(json.loads, lines) if e["event"] == "start"}


@handler("rendezvous")
def rendezvous(payload: dict[str, Any], job: JobContext) -> int:
    """Start, then wait until payload["count"] jobs have started (bounded by "max_seconds"):
    it ends only if that many ran at once; run one after another, the first never would."""
    note(payload["file"], job, "start")
    deadline = time.monotonic() + float(payload.get("max_seconds", 10))
    while len(starts(payload["file"])) < int(payload["count"]):
        if time.monotonic() > deadline:
            raise TimeoutError("the others never started alongside")
        time.sleep(POLL)
    note(payload["file"], job, "end")
    return len(starts(payload["file"]))


@handler("noted_sleep")
def noted_sleep(payload: dict[str, Any], job: JobContext) -> str:
    """Start, sleep payload["seconds"] in short Python steps, end."""
    note(payload["file"], job, "start")
    deadline = time.monotonic() + float(payload.get("seconds", 0))
    while time.monotonic() < deadline:
        time.sleep(POLL)
    note(payload["file"], job, "end")
    return "slept"


@handler("noted_crash")
def noted_crash(payload: dict[str, Any], job: JobContext) -> None:
    """Start, then kill the whole process with SIGKILL once payload["after"] jobs have
    started in the file (a segfault or the OOM killer, as far as the supervisor can tell),
    unless the job already lost its worker payload["until"] times."""
    note(payload["file"], job, "start")
    if job.recoveries < int(payload.get("until", 1_000_000)):
        deadline = time.monotonic() + float(payload.get("max_seconds", 10))
        while len(starts(payload["file"])) < int(payload.get("after", 1)):
            if time.monotonic() > deadline:
                break
            time.sleep(POLL)
        os.kill(os.getpid(), 9)
    note(payload["file"], job, "end")


@handler("noted_first_hold")
def noted_first_hold(payload: dict[str, Any], job: JobContext) -> str:
    """noted_sleep that holds payload["seconds"] only until its job was first lost (recoveries
    0): the run after a takeover is quick."""
    seconds = float(payload.get("seconds", 0)) if job.recoveries == 0 else 0.0
    return noted_sleep({**payload, "seconds": seconds}, job)
