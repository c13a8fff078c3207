"""The gateway's Python budget per POST /enqueue, in counts a timer cannot blur
(bench/PER_JOB_COST.md has the times).

At the default LOG_LEVEL=INFO an enqueue's one log line is gunicorn's access line
(``http_request``, gateway/server.py): the app itself makes no log record (``job_enqueued`` is
DEBUG), three metric writes (the enqueued counter; the enqueue-duration histogram's bucket and
sum) and, tracing off, builds no span attributes. Each was cut on purpose: a change that adds
one per enqueue changes a number here, with its measured cost.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from flask import Flask

from shared.engine.scripts import Scripts
from shared.obs import tracing
from tests.gateway.conftest import make_app
from tests.support.gunicorn import Gunicorn
from tests.support.tally import Tally
from tests.support.tools import wait_until

ENQUEUES = 5
APP_LOG_RECORDS_PER_ENQUEUE = 0  # the access line is gunicorn's
METRIC_WRITES_PER_ENQUEUE = 3
SPAN_ATTRIBUTE_BUILDS_PER_ENQUEUE = 0  # tracing off
BODY = json.dumps({"type": "send_email", "payload": {"to": "ada@example.com"}}).encode()


def enqueue(app: Flask, count: int) -> None:
    """POST /enqueue `count` times through the app's WSGI entry (gateway/fastpath.py)."""
    statuses: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        statuses.append(status)

    for _ in range(count):
        environ = {
            "PATH_INFO": "/enqueue",
            "REQUEST_METHOD": "POST",
            "CONTENT_LENGTH": str(len(BODY)),
            "CONTENT_TYPE": "application/json",
            "wsgi.input": io.BytesIO(BODY),
            "QUERY_STRING": "",
            "SERVER_NAME": "budget",
            "SERVER_PORT": "80",
            "wsgi.url_scheme": "http",
            "REMOTE_ADDR": "127.0.0.1",
        }
        b"".join(app.wsgi_app(environ, start_response))
    assert statuses == ["201 CREATED"] * count


def test_an_enqueue_makes_no_log_record_three_metric_writes_and_no_span_attributes(
    engine: Scripts, tally: Tally, root_level: Callable[[int], None]
) -> None:
    assert not tracing.enabled()
    root_level(logging.INFO)
    app = make_app(engine)
    enqueue(app, 1)  # the first makes each labelled metric child: not counted
    tally.clear()

    enqueue(app, ENQUEUES)

    assert dict(tally.records) == {}
    assert sum(tally.records.values()) == APP_LOG_RECORDS_PER_ENQUEUE * ENQUEUES
    assert tally.metric_writes == METRIC_WRITES_PER_ENQUEUE * ENQUEUES
    assert tally.span_builds == SPAN_ATTRIBUTE_BUILDS_PER_ENQUEUE * ENQUEUES


def test_job_enqueued_is_there_at_debug(
    engine: Scripts, tally: Tally, root_level: Callable[[int], None]
) -> None:
    root_level(logging.DEBUG)
    app = make_app(engine)

    enqueue(app, ENQUEUES)

    assert tally.records["job_enqueued"] == ENQUEUES


def test_through_gunicorn_an_enqueue_writes_its_access_line_and_nothing_else(gw: Gunicorn) -> None:
    request_id = str(uuid.uuid4())

    status, _, job = gw.request("POST", "/enqueue", BODY, {"X-Request-Id": request_id})

    assert status == 201, job

    def access_line() -> list[dict[str, Any]]:
        return [line for line in gw.log_lines() if line.get("request_id") == request_id]

    # The worker writes the access line after the reply, so wait for it; a line the app
    # wrote during the request is already in the file by then (one process, one stdout).
    [line] = wait_until(access_line, 10, "the enqueue's access line")
    assert (line["event"], line["level"], line["path"], line["status"]) == (
        "http_request",
        "INFO",
        "/enqueue",
        201,
    )
    assert [line for line in gw.log_lines() if job["id"] in json.dumps(line)] == []
