"""POST /enqueue and /enqueue/batch with a `delay`, through the Flask app on the private
redis-server: the due time is counted on Redis's clock by enqueue.lua, so a gateway whose own
clock is a day off schedules the job exactly as one whose clock is right."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from flask import Flask

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import format_ms, parse_rfc3339_ms
from tests.gateway.conftest import make_app
from tests.support.tools import wait_until

DAY_S = 86_400
JOB = {"type": "report", "payload": {"n": 1}}


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return the engine on the emptied private server (idempotency keys kept a minute)."""
    return Scripts(r, Keys(), Policy(idempotency_ttl_ms=60_000))


@pytest.fixture(params=["fast-path", "flask"])
def app(request: pytest.FixtureRequest, engine: Scripts) -> Flask:
    """Return the gateway on the private server, answering POST /enqueue on either path."""
    app = make_app(engine)
    if request.param == "flask":
        app.wsgi_app = app.wsgi_app.flask_wsgi  # type: ignore[attr-defined]
    return app


@pytest.fixture
def skewed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the gateway's wall clock a day ahead (this process is the gateway here)."""
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + DAY_S)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + DAY_S * 10**9)


def redis_ms(r: redis.Redis) -> int:
    """Return Redis's clock in milliseconds."""
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def post(app: Flask, path: str, body: Any, **headers: str) -> Any:
    return app.test_client().post(path, data=json.dumps(body), headers=headers)


def ms(text: str) -> int:
    return parse_rfc3339_ms(text)


@pytest.mark.usefixtures("skewed")
def test_a_delay_is_counted_on_redis_clock_not_on_a_skewed_gateways(
    app: Flask, r: redis.Redis, engine: Scripts
) -> None:
    assert time.time() - r.time()[0] > DAY_S - 60  # the skew is in place

    earliest = redis_ms(r)
    response = post(app, "/enqueue", {**JOB, "delay": "5m"})
    latest = redis_ms(r)

    assert response.status_code == 201
    created = response.get_json()
    assert created["status"] == "scheduled"
    assert earliest <= ms(created["created_at"]) <= latest
    assert ms(created["scheduled_at"]) == ms(created["created_at"]) + 300_000
    stored = get_job(r, engine.keys, created["id"])
    assert stored is not None and stored.to_json() == created  # the 201 is what Redis holds
    assert r.zscore(engine.keys.scheduled, created["id"]) == ms(created["scheduled_at"])


@pytest.mark.usefixtures("skewed")
def test_a_batch_with_mixed_delays_answers_each_due_time_as_stored(
    app: Flask, r: redis.Redis, engine: Scripts
) -> None:
    absolute = "2099-01-01T00:00:00.000Z"
    jobs = [
        {**JOB, "delay": 90},
        {**JOB},
        {**JOB, "delay": "0s"},
        {**JOB, "scheduled_at": absolute},
        {**JOB, "delay": "1.5h", "scheduled_at": None},
    ]
    earliest = redis_ms(r)
    response = post(app, "/enqueue/batch", {"jobs": jobs})
    latest = redis_ms(r)

    assert response.status_code == 201
    created = response.get_json()["jobs"]
    assert [job["status"] for job in created] == [
        "scheduled",
        "pending",
        "pending",
        "scheduled",
        "scheduled",
    ]
    now = ms(created[0]["created_at"])  # one transaction: one clock reading per job, all close
    assert earliest <= now <= latest
    assert [
        ms(job["scheduled_at"]) - ms(job["created_at"]) for job in (created[0], created[4])
    ] == [
        90_000,
        5_400_000,
    ]
    assert "scheduled_at" not in created[1]
    assert created[2]["scheduled_at"] == created[2]["created_at"]
    assert created[3]["scheduled_at"] == absolute
    for job in created:
        stored = get_job(r, engine.keys, job["id"])
        assert stored is not None and stored.to_json() == job


def test_the_same_key_and_delay_answer_the_first_job_unmoved(app: Flask, r: redis.Redis) -> None:
    key = {"Idempotency-Key": "delay-17"}
    first = post(app, "/enqueue", {**JOB, "delay": "5m"}, **key)
    # Later on Redis's clock: counting the delay again from now would move the job.
    created_at = ms(first.get_json()["created_at"])
    wait_until(lambda: redis_ms(r) > created_at, 5, "Redis's clock to pass created_at")
    again = post(app, "/enqueue", {**JOB, "delay": "5m"}, **key)
    spelt_otherwise = post(app, "/enqueue", {**JOB, "delay": 300}, **key)
    other_delay = post(app, "/enqueue", {**JOB, "delay": "6m"}, **key)

    assert (first.status_code, again.status_code, spelt_otherwise.status_code) == (201, 200, 200)
    assert again.get_json() == spelt_otherwise.get_json() == first.get_json()
    assert other_delay.status_code == 409
    assert other_delay.get_json()["job_id"] == first.get_json()["id"]


def test_the_scheduled_at_answered_is_created_at_plus_the_delay_to_the_millisecond(
    app: Flask, engine: Scripts
) -> None:
    for delay, offset_ms in [("500ms", 500), (2.5, 2_500), ("1d", DAY_S * 1000), (0, 0)]:
        created = post(app, "/enqueue", {**JOB, "delay": delay}).get_json()
        assert created["scheduled_at"] == format_ms(ms(created["created_at"]) + offset_ms)
        stored = get_job(engine.redis, engine.keys, created["id"])
        assert stored is not None and stored.to_json() == created
