"""A job type only the deployment tests use: a handler that runs a child program.

``shell_out`` journals a ``start`` line naming its child's pid (tests/workerd's journal
format), waits for ``sleep <seconds>``, and fails if the child did not exit 0: what a handler
that shells out to ffmpeg or pg_dump does.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

from workerd import JobContext, handler


def _append(path: str, entry: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


@handler("shell_out")
def shell_out(payload: dict[str, Any], job: JobContext) -> dict[str, int]:
    """Run ``sleep payload["seconds"]`` as a child process; fail unless it exits 0."""
    child = subprocess.Popen(["sleep", str(payload["seconds"])])
    entry = {"id": job.id, "attempt": job.attempt, "recoveries": job.recoveries}
    _append(payload["file"], {"event": "start", "child": child.pid, "start": time.time(), **entry})
    code = child.wait()
    if code != 0:
        raise RuntimeError(f"child exited with {code}")
    _append(payload["file"], {"event": "end", "start": None, "end": time.time(), **entry})
    return {"child": child.pid}
