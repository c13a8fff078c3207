"""The gateway's own CPU per POST /enqueue, in process, with the engine stubbed out.

Not a test: a measurement for A/B comparisons of the request path (bench/MEASUREMENTS.md).
Without Redis and gunicorn in the loop, what remains is the WSGI app's own work (parsing,
validation, rendering, the log line and the counters), steady enough on a busy machine to
compare two checkouts. Run it from the root of the checkout to measure (its ``gateway`` is
imported from the current directory)::

    .venv/bin/python tests/gateway/cpu_per_request.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
import timeit
from typing import Any

sys.path.insert(0, os.getcwd())

from gateway import create_app
from shared.engine.engine_types import EnqueueResult
from shared.engine.keys import Keys
from shared.model.jobs import EnqueueRequest, JobState
from shared.settings.config import Settings

JOB = {"type": "bench", "priority": 1, "payload": {"to": "user@example.com", "n": 1}}
CREATED_MS = 1_764_612_345_678
REQUESTS = 2000  # per repeat; a batch repeat sends REQUESTS // 50 batches of BATCH jobs
BATCH = 100
REPEATS = 15  # the minimum is reported: the run least disturbed by other processes


class StubScripts:
    """The two engine calls the enqueue endpoints make, answered without Redis."""

    keys = Keys()
    redis = None

    def enqueue(self, request: EnqueueRequest, job_id: str, **_: Any) -> EnqueueResult:
        """Answer as the script does for a new job."""
        return EnqueueResult(job_id, JobState.PENDING, True, CREATED_MS)

    def enqueue_many(self, pairs: list[tuple[EnqueueRequest, str]], **_: Any) -> list:
        """Answer as the script does for a new batch."""
        return [EnqueueResult(job_id, JobState.PENDING, True, CREATED_MS) for _, job_id in pairs]


def environ(path: str, body: bytes) -> dict[str, Any]:
    """Return the WSGI environ gunicorn builds for a POST of `body` to `path`."""
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "bench",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }


def main() -> None:
    """Print the least CPU per single enqueue and per batched job over REPEATS runs."""
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        # The log lines are part of the cost, as in production; their text is not wanted.
        app = create_app(Settings.from_env({}), scripts=StubScripts())  # type: ignore[arg-type]
        statuses: set[str] = set()

        def send(path: str, body: bytes) -> None:
            answer = app.wsgi_app(environ(path, body), lambda status, _: statuses.add(status))
            b"".join(answer)

        def least(path: str, body: bytes, count: int) -> float:
            runs = timeit.repeat(
                lambda: send(path, body), timer=time.process_time, number=count, repeat=REPEATS
            )
            return min(runs)

        one = least("/enqueue", json.dumps(JOB).encode(), REQUESTS)
        many = least("/enqueue/batch", json.dumps({"jobs": [JOB] * BATCH}).encode(), REQUESTS // 50)
    assert statuses == {"201 CREATED"}, statuses
    print(f"POST /enqueue:       {one / REQUESTS * 1e6:6.1f} µs CPU per request")
    print(f"POST /enqueue/batch: {many / (REQUESTS // 50) / BATCH * 1e6:6.1f} µs CPU per job")


if __name__ == "__main__":
    main()
