"""POST /enqueue/batch with an Idempotency-Key, through the Flask app on the private
redis-server (and once through real gunicorn): the same batch sent again is answered 200 with
the jobs the first request made, in order, as they are now; never made twice."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from flask import Flask

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.lifecycle import Outcome, Transition
from shared.engine.scripts import Scripts
from tests.gateway.conftest import make_app
from tests.support.engine_jobs import claim, fresh_queue
from tests.support.gunicorn import Gunicorn

KEY = {"Idempotency-Key": "orders-2026-01-07"}
SECRET = "hunter2"


def jobs_in(queue: str, other: str) -> list[dict[str, Any]]:
    """Return a batch of three jobs across two queues, one payload secret."""
    return [
        {"type": "email", "queue": queue, "payload": {"password": SECRET}},
        {"type": "pdf", "queue": other, "priority": 3},
        {"type": "email", "queue": queue, "delay": "5m"},
    ]


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return the engine on the emptied private server (idempotency keys kept a minute)."""
    return Scripts(r, Keys(), Policy(idempotency_ttl_ms=60_000))


@pytest.fixture
def app(engine: Scripts) -> Flask:
    return make_app(engine)


def post(app: Flask, body: Any, **headers: str) -> Any:
    data = body if isinstance(body, str) else json.dumps(body)
    return app.test_client().post("/enqueue/batch", data=data, headers=headers)


def job_keys(r: redis.Redis) -> list[bytes]:
    """Return every job hash in Redis, in any queue."""
    return sorted(r.scan_iter(match="{taskforge:*}:v2:job:*", count=1000))


def test_the_same_batch_with_its_key_is_201_then_200_with_the_same_jobs_in_order(
    app: Flask, r: redis.Redis, engine: Scripts
) -> None:
    batch = {"jobs": jobs_in("mail", "print")}
    first = post(app, batch, **KEY)
    created = first.get_json()["jobs"]
    claim(engine, "print", created[1]["id"])  # the 200 shows the jobs as they are now

    # Spelled otherwise (key order), it is the same batch.
    respelled = json.dumps({"jobs": [dict(reversed(job.items())) for job in batch["jobs"]]})
    again = post(app, respelled, **KEY)

    assert (first.status_code, again.status_code) == (201, 200)
    answered = again.get_json()["jobs"]
    assert [job["id"] for job in answered] == [job["id"] for job in created]
    assert [job["status"] for job in answered] == ["pending", "processing", "scheduled"]
    assert [job["queue"] for job in answered] == ["mail", "print", "mail"]
    assert answered[0] == created[0] and answered[2] == created[2]
    for job in answered:
        stored = app.test_client().get(f"/jobs/{job['id']}").get_json()
        assert stored == job
    assert len(job_keys(r)) == 3


def test_a_different_batch_with_the_key_is_409_naming_its_first_job(
    app: Flask, r: redis.Redis
) -> None:
    jobs = jobs_in("mail", "print")
    first = post(app, {"jobs": jobs}, **KEY).get_json()["jobs"]

    reordered = post(app, {"jobs": jobs[::-1]}, **KEY)
    fewer = post(app, {"jobs": jobs[:2]}, **KEY)

    for conflict in (reordered, fewer):
        assert conflict.status_code == 409
        assert conflict.get_json()["job_id"] == first[0]["id"]
        assert "Idempotency-Key" in conflict.get_json()["error"]
    assert len(job_keys(r)) == 3


def test_a_key_used_for_a_single_enqueue_and_then_a_batch_is_409(
    app: Flask, r: redis.Redis
) -> None:
    job = {"type": "email", "payload": {"to": "a"}}
    single = app.test_client().post("/enqueue", json=job, headers=KEY)

    batch = post(app, {"jobs": [job]}, **KEY)

    assert (single.status_code, batch.status_code) == (201, 409)
    assert batch.get_json()["job_id"] == single.get_json()["id"]
    assert len(job_keys(r)) == 1


def test_a_key_used_for_a_batch_and_then_a_single_enqueue_is_409(
    app: Flask, r: redis.Redis
) -> None:
    job = {"type": "email", "payload": {"to": "a"}}
    batch = post(app, {"jobs": [job, job]}, **KEY)

    single = app.test_client().post("/enqueue", json=job, headers=KEY)

    assert (batch.status_code, single.status_code) == (201, 409)
    assert single.get_json()["job_id"] == batch.get_json()["jobs"][0]["id"]
    assert len(job_keys(r)) == 2


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "caf\u00e9", "tab\there"])
def test_a_malformed_key_is_400_and_enqueues_nothing(app: Flask, r: redis.Redis, key: str) -> None:
    environ = {"HTTP_IDEMPOTENCY_KEY": key}  # as sent: the test client would refuse some
    response = app.test_client().post(
        "/enqueue/batch", data=json.dumps({"jobs": [{"type": "t"}]}), environ_overrides=environ
    )

    assert response.status_code == 400
    assert "Idempotency-Key" in response.get_json()["error"]
    assert job_keys(r) == []


def test_a_job_deleted_since_is_answered_as_created_and_made_again_under_its_id(
    app: Flask, r: redis.Redis, engine: Scripts
) -> None:
    first = post(app, {"jobs": [{"type": "a"}, {"type": "b"}]}, **KEY).get_json()["jobs"]
    r.delete(engine.keys.job(first[0]["id"]))  # as retention or a purge would

    again = post(app, {"jobs": [{"type": "a"}, {"type": "b"}]}, **KEY)

    assert again.status_code == 200
    answered = again.get_json()["jobs"]
    assert [job["id"] for job in answered] == [job["id"] for job in first]
    assert answered[0]["status"] == "pending" and answered[0]["type"] == "a"
    assert len(job_keys(r)) == 2


def test_a_repeat_records_duplicates_logs_no_enqueue_and_never_a_payload(
    app: Flask,
    transitions: list[Transition],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="shared.engine.lifecycle")  # job_enqueued is DEBUG
    batch = {"jobs": jobs_in("mail", "print")}
    ids = [job["id"] for job in post(app, batch, **KEY).get_json()["jobs"]]
    first_out = capsys.readouterr().out
    del transitions[:]

    post(app, batch, **KEY)

    out = capsys.readouterr().out
    assert SECRET not in first_out + out
    assert "job_enqueued" in first_out and "job_enqueued" not in out
    assert sorted((t.outcome, t.job_id, t.queue) for t in transitions) == sorted(
        (Outcome.DUPLICATE, job_id, queue)
        for job_id, queue in zip(ids, ["mail", "print", "mail"], strict=True)
    )


def test_the_key_works_through_gunicorn(gw: Gunicorn, r: redis.Redis) -> None:
    queue = fresh_queue()
    body = {"jobs": [{"type": "t", "queue": queue}, {"type": "u", "queue": queue}]}
    headers = {"Idempotency-Key": f"k-{queue}", "Content-Type": "application/json"}

    status, _, first = gw.request("POST", "/enqueue/batch", body, headers)
    again_status, _, again = gw.request("POST", "/enqueue/batch", body, headers)
    other_status, _, other = gw.request(
        "POST", "/enqueue/batch", {"jobs": body["jobs"][:1]}, headers
    )

    assert (status, again_status, other_status) == (201, 200, 409)
    assert [job["id"] for job in again["jobs"]] == [job["id"] for job in first["jobs"]]
    assert other["job_id"] == first["jobs"][0]["id"]
    _, _, listed = gw.request("GET", f"/jobs?state=pending&queue={queue}")
    assert sorted(job["id"] for job in listed["jobs"]) == sorted(j["id"] for j in first["jobs"])
