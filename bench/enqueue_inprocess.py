"""The gateway's own CPU per POST /enqueue, in process: no gunicorn, no HTTP, no load generator.

    .venv/bin/python -m bench.enqueue_inprocess                       # INFO, the default
    .venv/bin/python -m bench.enqueue_inprocess --log-level DEBUG     # with job_enqueued

Builds the app on a private Redis and calls its WSGI entry (``gateway.fastpath.FastEnqueue``)
directly, N times, timing ``time.process_time``: what the app spends per enqueue, whatever
gunicorn adds around it. The log lines go to /dev/null through the JSON formatter, as in
production (until 2026-12-06 they went to the terminal: setStream did not move the handler);
at DEBUG the difference is the ``job_enqueued`` line's cost (INFO until 2026-12-06).
``--with-id`` sends a client's own id in each body, as ``taskforge.Client`` does.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from contextlib import redirect_stdout
from typing import Any

from gateway.app import create_app
from shared.model.job_ids import new_client_id
from shared.settings.config import Settings
from tests.support.redis_server import private_redis

WARM_UP = 500


def environ(body: bytes) -> dict[str, Any]:
    """Return the WSGI environ of one POST /enqueue."""
    return {
        "PATH_INFO": "/enqueue",
        "REQUEST_METHOD": "POST",
        "CONTENT_LENGTH": str(len(body)),
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(body),
        "QUERY_STRING": "",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
        "REMOTE_ADDR": "127.0.0.1",
    }


def body(with_id: bool) -> bytes:
    """Return one enqueue body (a fresh client id in it when asked)."""
    doc: dict[str, Any] = {"type": "send_email", "payload": {"to": "ada@example.com", "n": 1}}
    if with_id:
        doc["id"] = new_client_id("default")
    return json.dumps(doc).encode()


def measure(requests: int, log_level: str, with_id: bool) -> float:
    """Return the app's CPU µs per enqueue."""
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        statuses.append(status)

    # The JSON formatter, writing nowhere: the log handler writes to whatever sys.stdout is
    # when it emits (shared.obs.log), so setStream would not move it.
    with private_redis() as server, open("/dev/null", "w") as sink, redirect_stdout(sink):
        app = create_app(Settings.from_env({"REDIS_URL": server.url, "LOG_LEVEL": log_level}))
        bodies = [body(with_id) for _ in range(WARM_UP + requests)]
        for one in bodies[:WARM_UP]:
            list(app.wsgi_app(environ(one), start_response))
        started = time.process_time()
        for one in bodies[WARM_UP:]:
            list(app.wsgi_app(environ(one), start_response))
        spent = time.process_time() - started
    if set(statuses) != {"201 CREATED"}:
        raise RuntimeError(f"unexpected statuses: {set(statuses)}")
    return spent / requests * 1e6


def main() -> None:
    """Print the app's CPU µs per enqueue."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--with-id", action="store_true")
    args = parser.parse_args()
    cpu = measure(args.requests, args.log_level, args.with_id)
    print(
        f"{cpu:.1f} µs of CPU per POST /enqueue (LOG_LEVEL={args.log_level}, "
        f"{'with' if args.with_id else 'without'} a client id, {args.requests} requests)"
    )


if __name__ == "__main__":
    main()
