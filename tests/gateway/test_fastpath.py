"""The lean POST /enqueue path (gateway/fastpath.py) against the Flask view it stands in for.

Every other test of POST /enqueue goes through it too (test_client calls app.wsgi_app); these
check what only it can get wrong: that it really serves the success path, that it answers
exactly as the Flask view does, that it hands refusals to Flask, and that an enqueue which
may have reached Redis is never run a second time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from flask import Flask

from gateway.fastpath import FastEnqueue
from shared.scripts import Scripts
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


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"{not json", {}, 400),
        ({"type": "", "payload": {}}, {}, 400),
        ({**JOB, "surprise": 1}, {}, 400),
        (JOB, {"Idempotency-Key": "has space"}, 400),
        (JOB, {"Content-Encoding": "gzip"}, 415),
        (b'{"a": 1, "a": 2}', {}, 400),
        ({"type": "a", "payload": None}, {}, 400),
        ({"type": "a", "payload": ["x"]}, {}, 400),
        ({"type": "a", "payload": "x"}, {}, 400),
        ({"type": "a", "timeout": "8d"}, {}, 400),
        ({"type": "a", "timeout": "2 s"}, {}, 400),
    ],
)
def test_a_refusal_is_handed_to_flask_with_the_body_intact(
    scripts: Scripts, body: Any, headers: dict[str, str], status: int
) -> None:
    app = make_app(scripts)
    calls = _flask_view_calls(app)
    response = _post(app, body, **headers)
    assert response.status_code == status, response.get_json()
    assert "error" in response.get_json()
    assert calls == [1]  # Flask's view ran, on the body the fast path had already read
    assert count_jobs(scripts) == 0


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


def test_a_missing_or_wrong_token_is_refused_by_flask(scripts: Scripts) -> None:
    app = make_app(scripts, TASKFORGE_API_TOKEN=TOKEN)
    assert _post(app, JOB).status_code == 401
    assert _post(app, JOB, Authorization="Bearer wrong").status_code == 401
    assert _post(app, JOB, Authorization=f"Bearer {TOKEN}").status_code == 201
    assert count_jobs(scripts) == 1


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
