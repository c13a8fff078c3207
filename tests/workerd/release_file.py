"""A wait for a file the test creates: how a test handler holds its job until the test says go.

No handler here: importing this registers nothing, so either handler module may use it.
"""

from __future__ import annotations

import os
import time

POLL = 0.01  # seconds between looks for the file


def wait_for_release(path: str, max_seconds: float) -> None:
    """Return once `path` exists; raise TimeoutError after `max_seconds` (a bound: a test that
    fails before releasing must not leave the job running)."""
    deadline = time.monotonic() + max_seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(POLL)
