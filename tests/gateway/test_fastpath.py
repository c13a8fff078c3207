"""The lean POST /enqueue path (gateway/fastpath.py) against the Flask view it stands in for.

Every other test of POST /enqueue goes through it too (test_client calls app.wsgi_app); these
check what only it can get wrong: that it really serves the request without Flask, that it
answers every request of a table (accepted and refused) byte for byte as the Flask view does,
that it hands Flask only what it must, and that an enqueue which may have reached Redis is
never run a second time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
import redis
from flask import Flask

from gateway.body import MAX_BODY_BYTES
from gateway.fastpath import FastEnqueue
from shared.engine.scripts import Scripts
from tests.gateway.conftest import TOKEN, make_app
from tests.gateway.helpers import count_jobs

JOB = {"type": "email.send", "priority": 5, "payload": {"to": "a@example.com", "n": [1, 2.5]}}


def _flask_view_calls(app: Flask) -> list[int]:
    """Wrap the Flask enqueue view; return the list its calls are appended to."""
    calls: list[int] = []
    view = app.view_functions["jobs.enqueue"]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return view(*args, **kwargs)

    app.view_functions["jobs.enqueue"] = counted
    return calls


def _post(app: Flask, body: Any, **headers: str) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return app.test_client().post("/enqueue", data=data, headers=headers)


def test_a_valid_enqueue_never_reaches_the_flask_view(scripts: Scripts) -> None:
    app = make_app(scripts)
    assert isinstance(app.wsgi_app, FastEnqueue)
    calls = _flask_view_calls(app)
    response = _post(app, JOB)
    assert response.status_code == 201
    assert calls == []
    assert count_jobs(scripts) == 1


@pytest.mark.parametrize(("timeout", "seconds"), [("500ms", 0.5), ("2m", 120.0), ("7", 7.0)])
def test_a_timeout_given_as_a_duration_is_served_by_the_fast_path_in_seconds(
    scripts: Scripts, timeout: str, seconds: float
) -> None:
    app = make_app(scripts)
    calls = _flask_view_calls(app)

    response = _post(app, {**JOB, "timeout": timeout})

    assert response.status_code == 201
    assert calls == []  # the same rule as the Flask view, applied without it
    assert response.get_json()["timeout"] == seconds
    assert app.test_client().get(response.headers["Location"]).get_json() == response.get_json()


def test_the_fast_answer_is_the_flask_answer(scripts: Scripts) -> None:
    """Same status, headers and JSON (but the fresh id and times) from both paths."""
    answers = []
    for lean in (True, False):
        scripts.redis.flushall()  # the Idempotency-Key starts unused on each path
        app = make_app(scripts)
        if not lean:
            app.wsgi_app = app.wsgi_app.flask_wsgi  # type: ignore[attr-defined]
        for key in (None, "same-key"):
            headers = {"Idempotency-Key": key} if key else {}
            first, again = _post(app, JOB, **headers), _post(app, JOB, **headers)
            answers.append((lean, first, again))

    def shape(response: Any) -> tuple[Any, ...]:
        doc = response.get_json()
        varying = {"id", "created_at", "updated_at"}
        return (
            response.status_code,
            response.headers["Content-Type"],
            response.headers["Location"] == f"/jobs/{doc['id']}",
            response.data.endswith(b"}\n") and b": " not in response.data,
            {k: v for k, v in doc.items() if k not in varying},
        )

    lean = [(shape(a), shape(b)) for fast, a, b in answers if fast]
    flask = [(shape(a), shape(b)) for fast, a, b in answers if not fast]
    assert lean == flask
    statuses = [(a.status_code, b.status_code) for _, a, b in answers]
    assert statuses == [(201, 201), (201, 200)] * 2  # a repeated key answers 200, same job


def test_a_reused_key_with_another_body_is_a_409_from_the_fast_path(scripts: Scripts) -> None:
    app = make_app(scripts)
    calls = _flask_view_calls(app)
    assert _post(app, JOB, **{"Idempotency-Key": "k1"}).status_code == 201
    response = _post(app, {**JOB, "priority": 6}, **{"Idempotency-Key": "k1"})
    assert response.status_code == 409
    assert response.get_json()["job_id"]
    assert calls == []


def test_an_enqueue_that_may_have_reached_redis_is_not_run_again(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timeout after the call went out answers 503; Flask must not enqueue it a second time."""
    app = make_app(scripts)
    calls: list[str] = []
    real = scripts.enqueue

    def enqueue_then_time_out(*args: Any, **kwargs: Any) -> Any:
        calls.append("enqueue")
        real(*args, **kwargs)  # it reached Redis ...
        raise redis.TimeoutError("reply lost")  # ... and the answer did not come back

    monkeypatch.setattr(scripts, "enqueue", enqueue_then_time_out)
    response = _post(app, JOB)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert calls == ["enqueue"]
    assert count_jobs(scripts) == 1


# --- both paths agree: one table of requests, answered byte for byte alike -----------------------


@dataclass(frozen=True)
class Sent:
    """One POST /enqueue: its body (bytes, or a document sent as JSON), headers and query."""

    body: Any = field(default_factory=lambda: JOB)
    headers: dict[str, str] = field(default_factory=dict)
    query: str = ""
    chunked: bool = False  # no Content-Length: Transfer-Encoding: chunked


def _send(app: Flask, sent: Sent) -> Any:
    data = sent.body if isinstance(sent.body, bytes) else json.dumps(sent.body).encode()
    headers, environ = dict(sent.headers), {}
    if sent.chunked:
        headers["Transfer-Encoding"] = "chunked"
        environ["wsgi.input_terminated"] = True  # what gunicorn says of a body it dechunks
    return app.test_client().post(
        "/enqueue",
        data=data,
        headers=headers,
        query_string=sent.query,
        environ_overrides=environ,
    )


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _answers(app: Flask, requests: tuple[Sent, ...]) -> list[tuple[str, list[Any], bytes]]:
    """Send `requests` in order; return each status line, headers and body, with the fresh job
    ids (numbered in order of appearance) and timestamps masked."""
    ids: dict[bytes, bytes] = {}

    def mask(raw: bytes) -> bytes:
        raw = _UUID.sub(lambda m: ids.setdefault(m.group(), b"<id%d>" % len(ids)), raw)
        return _STAMP.sub(b"<time>", raw)

    answers = []
    for sent in requests:
        response = _send(app, sent)
        headers = [(name, mask(value.encode()).decode()) for name, value in response.headers]
        answers.append((response.status, headers, mask(response.data)))
    return answers


TOO_BIG = b" " * (MAX_BODY_BYTES + 1)
KEY = {"Idempotency-Key": "k1"}
BAD_KEY = {"Idempotency-Key": "has space"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PARENT = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
LATER = {"scheduled_at": "2099-01-01T00:00:00+02:00", "timeout": "500ms", "max_retries": 5}


def case(
    name: str,
    statuses: tuple[int, ...],
    *requests: Sent,
    token: bool = False,
    handed: bool = False,
    engine: str = "ok",
) -> Any:
    """One row: `requests` (one valid job if none) sent in order, and the statuses they get.

    token: the gateway requires TASKFORGE_API_TOKEN; handed: the fast path gives the requests
    to Flask unread (a query string, a chunked body); engine: how the enqueue script behaves
    ("ok", "down": Redis unreachable, "bug": any other exception).
    """
    return pytest.param(token, requests or (Sent(),), statuses, handed, engine, id=name)


AGREEMENT = [
    case("valid", (201,)),
    case("minimal", (201,), Sent({"type": "a"})),
    case("scheduled", (201,), Sent({**JOB, "priority": -7, **LATER})),
    case("any-type", (201,), Sent(headers={"Content-Type": "text/plain"})),
    case("identity", (201,), Sent(headers={"Content-Encoding": " Identity "})),
    case("traceparent", (201,), Sent(headers=PARENT)),
    case("delay", (201,), Sent({**JOB, "delay": "5m"})),
    case("delay-zero", (201,), Sent({**JOB, "delay": 0})),
    case("delay-null", (201,), Sent({**JOB, "delay": None})),
    case(
        "delay-key-again",
        (201, 200, 200),
        Sent({**JOB, "delay": "90s"}, KEY),
        Sent({**JOB, "delay": "90s"}, KEY),
        Sent({**JOB, "delay": 90}, KEY),
    ),
    case(
        "delay-key-conflict",
        (201, 409),
        Sent({**JOB, "delay": "90s"}, KEY),
        Sent({**JOB, "delay": "91s"}, KEY),
    ),
    case("key-again", (201, 200), Sent(headers=KEY), Sent(headers=KEY)),
    case(
        "key-conflict",
        (201, 409),
        Sent(headers=KEY),
        Sent({**JOB, "priority": 6}, KEY),
    ),
    case("not-json", (400,), Sent(b"{not json")),
    case("empty", (400,), Sent(b"")),
    case("not-utf8", (400,), Sent(b'{"type": "\xff"}')),
    case("twice-a-key", (400,), Sent(b'{"type": "a", "type": "b"}')),
    case("nan", (400,), Sent(b'{"type": "a", "payload": {"x": NaN}}')),
    case("deep", (400,), Sent(b'{"type": "a", "payload": ' + b'{"a":' * 70 + b"1" + b"}" * 71)),
    case("surrogate", (400,), Sent(b'{"type": "a", "payload": {"x": "\\udc00"}}')),
    case("not-an-object", (400,), Sent([JOB])),
    case("bad-type", (400,), Sent({"type": ""})),
    case("unknown-field", (400,), Sent({**JOB, "surprise": 1})),
    case("server-field", (400,), Sent({**JOB, "id": "x", "status": "done"})),
    case("null-payload", (400,), Sent({"type": "a", "payload": None})),
    case("bad-timeout", (400,), Sent({"type": "a", "timeout": "8d"})),
    case("bad-delay", (400,), Sent({"type": "a", "delay": "-1s"})),
    case("delay-and-scheduled_at", (400,), Sent({**JOB, "delay": 5, **LATER})),
    case("many-fields", (400,), Sent({"priority": "x", "max_retries": 0})),
    case("bad-key", (400,), Sent(headers=BAD_KEY)),
    case("long-key", (400,), Sent(headers={"Idempotency-Key": "k" * 256})),
    case("gzip", (415,), Sent(headers={"Content-Encoding": "gzip"})),
    case("too-big", (413,), Sent(TOO_BIG)),
    # Several faults at once: the first check in Flask's order names the answer.
    case("not-json-and-bad-key", (400,), Sent(b"{", BAD_KEY)),
    case("bad-job-and-bad-key", (400,), Sent({"type": ""}, BAD_KEY)),
    case("gzip-and-not-json", (415,), Sent(b"{", {"Content-Encoding": "gzip"})),
    case("gzip-and-too-big", (415,), Sent(TOO_BIG, {"Content-Encoding": "br"})),
    case("no-token", (401,), token=True),
    case("wrong-token", (401,), Sent(headers={"Authorization": "Bearer nope"}), token=True),
    case("basic-auth", (401,), Sent(headers={"Authorization": "Basic eDp5"}), token=True),
    case("no-token-bad-body", (401,), Sent(b"{", {"Content-Encoding": "gzip"}), token=True),
    case("token", (201,), Sent(headers=AUTH), token=True),
    case("token-bad-key", (400,), Sent(headers={**AUTH, **BAD_KEY}), token=True),
    case("redis-down", (503,), engine="down"),
    case("engine-bug", (500,), engine="bug"),
    case("query", (400,), Sent(query="x=1"), handed=True),
    case("query-no-token", (401,), Sent(query="x=1"), token=True, handed=True),
    case("chunked", (201,), Sent(chunked=True), handed=True),
    case("chunked-not-json", (400,), Sent(b"{", chunked=True), handed=True),
]


@pytest.mark.parametrize(("token", "requests", "statuses", "handed", "engine"), AGREEMENT)
def test_the_fast_path_and_flask_answer_every_request_alike(
    scripts: Scripts,
    monkeypatch: pytest.MonkeyPatch,
    token: bool,
    requests: tuple[Sent, ...],
    statuses: tuple[int, ...],
    handed: bool,
    engine: str,
) -> None:
    """Same status, headers and body byte for byte (fresh ids and times masked) on both paths."""
    if engine != "ok":
        failure = redis.ConnectionError("down") if engine == "down" else RuntimeError("bug")
        monkeypatch.setattr(scripts, "enqueue", mock.Mock(side_effect=failure))
    env = {"TASKFORGE_API_TOKEN": TOKEN} if token else {}
    fast_app, flask_app = make_app(scripts, **env), make_app(scripts, **env)
    fast = fast_app.wsgi_app
    assert isinstance(fast, FastEnqueue)
    flask_app.wsgi_app = flask_app.wsgi_app.flask_wsgi  # type: ignore[attr-defined]
    handed_over: list[int] = []
    flask_wsgi = fast.flask_wsgi

    def counted(environ: dict[str, Any], start_response: Any) -> Any:
        handed_over.append(1)
        return flask_wsgi(environ, start_response)

    fast.flask_wsgi = counted

    lean = _answers(fast_app, requests)
    created = count_jobs(scripts)
    scripts.redis.flushall()  # our own fakeredis: the second path starts from the same state
    plain = _answers(flask_app, requests)

    assert lean == plain
    assert tuple(int(status.split()[0]) for status, _, _ in lean) == statuses
    assert handed_over == ([1] * len(requests) if handed else [])
    assert created == count_jobs(scripts)
