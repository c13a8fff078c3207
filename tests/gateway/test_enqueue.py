"""POST /enqueue and /enqueue/batch through app.test_client() on fakeredis: the input matrix."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from flask.testing import FlaskClient

from gateway import service
from gateway.body import MAX_BODY_BYTES
from gateway.inputs import MAX_BATCH
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_ids, queue_tag, tag_of
from shared.model.jobs import JOB_ID_PATTERN
from tests.gateway.helpers import VALID, count_jobs


def post(client: FlaskClient, path: str, body: Any, **headers: str) -> Any:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(path, data=data, headers=headers)


def test_enqueue_answers_201_with_the_job_and_its_location(
    client: FlaskClient, scripts: Scripts
) -> None:
    response = post(client, "/enqueue", VALID)
    assert response.status_code == 201
    job = response.get_json()
    assert JOB_ID_PATTERN.fullmatch(job["id"])
    assert response.headers["Location"] == f"/jobs/{job['id']}"
    assert job["status"] == "pending"
    assert job["payload"] == VALID["payload"]
    assert (job["priority"], job["max_retries"], job["attempts"]) == (0, 3, 0)
    assert job["created_at"].endswith("Z") and job["created_at"] == job["updated_at"]
    stored = get_job(scripts.redis, scripts.keys, job["id"])
    assert stored is not None and stored.to_json() == job


def test_enqueue_answer_matches_what_get_returns_for_every_field(client: FlaskClient) -> None:
    body = {
        "type": "report",
        "payload": {"list": [1, "two", {"3": None}]},
        "priority": -7,
        "max_retries": 5,
        "scheduled_at": "2099-01-01T00:00:00+02:00",
        "timeout": 2.5,
    }
    created = post(client, "/enqueue", body).get_json()
    assert created["status"] == "scheduled"
    assert created["scheduled_at"] == "2098-12-31T22:00:00.000Z"
    assert client.get(f"/jobs/{created['id']}").get_json() == created


@pytest.mark.parametrize(
    "content_type",
    [None, "application/json", "text/plain", "application/x-www-form-urlencoded"],
)
def test_enqueue_reads_json_whatever_the_content_type(
    client: FlaskClient, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post("/enqueue", data=json.dumps(VALID), headers=headers)
    assert response.status_code == 201


def test_a_past_scheduled_at_is_pending_at_once(client: FlaskClient) -> None:
    body = {**VALID, "scheduled_at": "2001-01-01T00:00:00Z"}
    assert post(client, "/enqueue", body).get_json()["status"] == "pending"


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({}, ["type"]),
        ({"payload": {}}, ["type"]),
        ({"type": ""}, ["type"]),
        ({"type": "has space"}, ["type"]),
        ({"type": "x" * 129}, ["type"]),
        ({"type": 5}, ["type"]),
        ({"type": "a", "priority": "high"}, ["priority"]),
        ({"type": "a", "priority": True}, ["priority"]),
        ({"type": "a", "priority": 1.5}, ["priority"]),
        ({"type": "a", "priority": 2**31 + 1}, ["priority"]),
        ({"type": "a", "max_retries": 0}, ["max_retries"]),
        ({"type": "a", "max_retries": 101}, ["max_retries"]),
        ({"type": "a", "max_retries": "3"}, ["max_retries"]),
        ({"type": "a", "scheduled_at": "tomorrow"}, ["scheduled_at"]),
        ({"type": "a", "scheduled_at": "2026-08-19T15:30:00"}, ["scheduled_at"]),
        ({"type": "a", "scheduled_at": 1767225600}, ["scheduled_at"]),
        ({"type": "a", "scheduled_at": "0999-01-01T00:00:00Z"}, ["scheduled_at"]),
        ({"type": "a", "scheduled_at": "1969-12-31T23:59:59Z"}, ["scheduled_at"]),
        ({"type": "a", "delay": -1}, ["delay"]),
        ({"type": "a", "delay": "-5s"}, ["delay"]),
        ({"type": "a", "delay": "367d"}, ["delay"]),
        ({"type": "a", "delay": 366 * 86400 + 1}, ["delay"]),
        ({"type": "a", "delay": "5 m"}, ["delay"]),
        ({"type": "a", "delay": "soon"}, ["delay"]),
        ({"type": "a", "delay": True}, ["delay"]),
        (
            {"type": "a", "delay": "5m", "scheduled_at": "2099-01-01T00:00:00Z"},
            ["delay", "scheduled_at"],
        ),
        ({"type": "a", "delay": 0, "scheduled_at": "tomorrow"}, ["delay", "scheduled_at"]),
        ({"type": "a", "timeout": 0}, ["timeout"]),
        ({"type": "a", "timeout": -1}, ["timeout"]),
        ({"type": "a", "timeout": 10**9}, ["timeout"]),
        ({"type": "a", "timeout": True}, ["timeout"]),
        ({"type": "a", "timeout": "8d"}, ["timeout"]),
        ({"type": "a", "timeout": "5 s"}, ["timeout"]),
        ({"type": "a", "timeout": "soon"}, ["timeout"]),
        ({"type": "a", "payload": None}, ["payload"]),
        ({"type": "a", "payload": [1]}, ["payload"]),
        ({"type": "a", "payload": "text"}, ["payload"]),
        ({"type": "a", "payload": 5}, ["payload"]),
        ({"type": "a", "colour": "red"}, ["colour"]),
        ({"type": "a", "id": "x", "status": "done"}, ["id", "status"]),
        ({"priority": "x", "max_retries": 0}, ["type", "priority", "max_retries"]),
    ],
)
def test_an_invalid_job_is_400_naming_every_bad_field(
    client: FlaskClient, scripts: Scripts, body: dict[str, Any], fields: list[str]
) -> None:
    response = post(client, "/enqueue", body)
    assert response.status_code == 400
    doc = response.get_json()
    assert doc["error"].startswith("invalid job: ")
    assert sorted(f["field"] for f in doc["fields"]) == sorted(fields)
    assert count_jobs(scripts) == 0


# --- payload and timeout: the forms each takes --------------------------------------------------


@pytest.mark.parametrize("payload", ["null", "[]", '["a", 1]', '"text"', '""', "0", "1.5", "true"])
def test_a_payload_that_is_not_an_object_is_400_naming_it(
    client: FlaskClient, scripts: Scripts, payload: str
) -> None:
    one = post(client, "/enqueue", '{"type": "a", "payload": ' + payload + "}")
    batch = post(client, "/enqueue/batch", '{"jobs": [{"type": "a", "payload": ' + payload + "}]}")

    assert (one.status_code, batch.status_code) == (400, 400)
    assert one.get_json()["fields"] == [{"field": "payload", "message": "must be a JSON object"}]
    assert "payload: must be a JSON object" in one.get_json()["error"]
    assert batch.get_json()["errors"] == [
        {"index": 0, "field": "payload", "message": "must be a JSON object"}
    ]
    assert count_jobs(scripts) == 0


def test_an_absent_payload_is_an_empty_object(client: FlaskClient) -> None:
    created = post(client, "/enqueue", {"type": "a"}).get_json()

    assert created["payload"] == {}
    assert client.get(f"/jobs/{created['id']}").get_json()["payload"] == {}


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1m", 60.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("90", 90.0),
        (90, 90.0),
        (2.5, 2.5),
    ],
)
def test_timeout_takes_durations_and_bare_seconds_and_is_shown_in_seconds(
    client: FlaskClient, timeout: Any, seconds: float
) -> None:
    one = post(client, "/enqueue", {"type": "a", "timeout": timeout})
    batch = post(client, "/enqueue/batch", {"jobs": [{"type": "a", "timeout": timeout}]})

    assert (one.status_code, batch.status_code) == (201, 201)
    created = one.get_json()
    assert created["timeout"] == seconds
    assert batch.get_json()["jobs"][0]["timeout"] == seconds
    assert client.get(f"/jobs/{created['id']}").get_json()["timeout"] == seconds


@pytest.mark.parametrize(
    "timeout", ["0s", "0", "8d", "604801", "-5s", "5 s", "5sec", "1w", "", "\u0661s", [5], {}]
)
def test_a_bad_timeout_is_400_naming_it_single_and_batch(
    client: FlaskClient, scripts: Scripts, timeout: Any
) -> None:
    one = post(client, "/enqueue", {"type": "a", "timeout": timeout})
    batch = post(client, "/enqueue/batch", {"jobs": [{"type": "a", "timeout": timeout}]})

    assert (one.status_code, batch.status_code) == (400, 400)
    [field] = one.get_json()["fields"]
    assert field["field"] == "timeout" and "500ms, 2s, 1m, 1h or 1d" in field["message"]
    assert [e["field"] for e in batch.get_json()["errors"]] == ["timeout"]
    assert count_jobs(scripts) == 0


BOTH = {"delay": "5m", "scheduled_at": "2099-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"delay": d}, ["delay"]) for d in ["-1s", -0.5, "367d", 31_622_401, "1w", "", [5], {}]]
    + [(BOTH, ["delay", "scheduled_at"])],
    ids=repr,
)
def test_a_bad_delay_is_400_naming_it_single_and_batch(
    client: FlaskClient, scripts: Scripts, fields: dict[str, Any], named: list[str]
) -> None:
    body = {"type": "a", **fields}
    one = post(client, "/enqueue", body)
    batch = post(client, "/enqueue/batch", {"jobs": [{"type": "ok"}, body]})

    assert (one.status_code, batch.status_code) == (400, 400)
    messages = {f["field"]: f["message"] for f in one.get_json()["fields"]}
    assert sorted(messages) == named
    assert "give one of the two" in messages["delay"] or "366d" in messages["delay"]
    assert sorted(e["field"] for e in batch.get_json()["errors"] if e["index"] == 1) == named
    assert count_jobs(scripts) == 0


def test_a_null_delay_is_no_delay(client: FlaskClient) -> None:
    created = post(client, "/enqueue", {"type": "a", "delay": None}).get_json()

    assert created["status"] == "pending" and "scheduled_at" not in created


@pytest.mark.parametrize("body", ["[]", '"job"', "42", "null", "true"])
def test_a_body_that_is_not_an_object_is_400(client: FlaskClient, body: str) -> None:
    response = post(client, "/enqueue", body)
    assert response.status_code == 400
    assert "must be a JSON object" in response.get_json()["error"]


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "empty"),
        (b'{"type": "a"', "not valid JSON"),
        (b'{"type": "a\xff"}', "not valid UTF-8"),
        (b'{"type": "\\udc00"}', "surrogate"),
        (b'{"type": "a", "priority": NaN}', "NaN"),
        (b'{"type": "a", "type": "b"}', "appears twice"),
        (b'{"type": "a", "payload": ' + b"[" * 200 + b"]" * 200 + b"}", "deeper"),
    ],
)
def test_a_malformed_body_is_400_saying_what(
    client: FlaskClient, scripts: Scripts, raw: bytes, says: str
) -> None:
    response = post(client, "/enqueue", raw)
    assert response.status_code == 400
    assert says in response.get_json()["error"]
    assert count_jobs(scripts) == 0


def test_a_body_over_one_mebibyte_is_413(client: FlaskClient) -> None:
    body = json.dumps({"type": "a", "payload": "x" * MAX_BODY_BYTES})
    response = post(client, "/enqueue", body)
    assert response.status_code == 413
    error = response.get_json()["error"]
    # One job cannot be split: the answer is about its payload, not about batches.
    assert "larger than" in error and "payload" in error and "batch" not in error


def test_a_batch_over_one_mebibyte_is_413_saying_split_it(client: FlaskClient) -> None:
    body = json.dumps({"jobs": [{"type": "a", "payload": {"k": "x" * MAX_BODY_BYTES}}]})
    response = post(client, "/enqueue/batch", body)
    assert response.status_code == 413
    assert "split the batch" in response.get_json()["error"]


def test_another_route_over_the_limit_is_413_without_a_hint(client: FlaskClient) -> None:
    response = post(client, "/dlq/retry", "x" * (MAX_BODY_BYTES + 1))
    assert response.status_code == 413
    error = response.get_json()["error"]
    assert "larger than" in error and "batch" not in error and "payload" not in error


def test_a_body_of_exactly_one_mebibyte_is_read(client: FlaskClient) -> None:
    body = json.dumps({"type": "a", "payload": {"k": ""}}).encode()
    body = body[:-3] + b"x" * (MAX_BODY_BYTES - len(body)) + body[-3:]
    assert len(body) == MAX_BODY_BYTES
    assert post(client, "/enqueue", body).status_code == 201


def test_a_compressed_body_is_415(client: FlaskClient) -> None:
    response = post(client, "/enqueue", VALID, **{"Content-Encoding": "gzip"})
    assert response.status_code == 415
    assert "gzip" in response.get_json()["error"]


# --- Idempotency-Key ----------------------------------------------------------------------


def test_the_same_key_and_body_answer_200_with_the_first_job(
    client: FlaskClient, scripts: Scripts
) -> None:
    first = post(client, "/enqueue", VALID, **{"Idempotency-Key": "order-17"})
    # Same meaning, different text: key order and spacing do not matter.
    again_text = json.dumps(dict(reversed(list(VALID.items()))), indent=2)
    again = post(client, "/enqueue", again_text, **{"Idempotency-Key": "order-17"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert count_jobs(scripts) == 1


def test_the_same_key_with_another_body_is_409_naming_the_job(
    client: FlaskClient, scripts: Scripts
) -> None:
    first = post(client, "/enqueue", VALID, **{"Idempotency-Key": "k"}).get_json()
    response = post(client, "/enqueue", {**VALID, "priority": 9}, **{"Idempotency-Key": "k"})
    assert response.status_code == 409
    assert response.get_json()["job_id"] == first["id"]
    assert count_jobs(scripts) == 1


def test_different_keys_create_different_jobs(client: FlaskClient, scripts: Scripts) -> None:
    post(client, "/enqueue", VALID, **{"Idempotency-Key": "a"})
    post(client, "/enqueue", VALID, **{"Idempotency-Key": "b"})
    assert count_jobs(scripts) == 2


def test_a_key_whose_job_is_gone_by_the_read_back_answers_that_job_as_created(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = post(client, "/enqueue", VALID, **{"Idempotency-Key": "k1"})
    # Deleted (trimmed, purged) after the script named it, before the gateway read it.
    monkeypatch.setattr(service, "get_job", lambda *_: None)
    again = post(client, "/enqueue", VALID, **{"Idempotency-Key": "k1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json() == first.get_json()


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "tab\there", "caf\u00e9"])
def test_a_malformed_idempotency_key_is_400(
    client: FlaskClient, scripts: Scripts, key: str
) -> None:
    headers = {"Idempotency-Key": key.encode("utf-8").decode("latin-1")}
    response = post(client, "/enqueue", VALID, **headers)
    assert response.status_code == 400
    assert "Idempotency-Key" in response.get_json()["error"]
    assert count_jobs(scripts) == 0


def test_the_longest_idempotency_key_is_accepted(client: FlaskClient) -> None:
    assert post(client, "/enqueue", VALID, **{"Idempotency-Key": "k" * 255}).status_code == 201


# --- batch --------------------------------------------------------------------------------


def test_a_batch_answers_201_with_the_jobs_in_order(client: FlaskClient, scripts: Scripts) -> None:
    jobs = [{"type": f"t{i}", "priority": i % 3, "payload": {"i": i}} for i in range(5)]
    response = post(client, "/enqueue/batch", {"jobs": jobs})
    assert response.status_code == 201
    created = response.get_json()["jobs"]
    assert [j["payload"]["i"] for j in created] == list(range(5))
    assert len({j["id"] for j in created}) == 5
    for job in created:
        assert client.get(f"/jobs/{job['id']}").get_json() == job
    assert count_jobs(scripts) == 5


def test_a_batch_of_the_maximum_size_is_accepted(client: FlaskClient, scripts: Scripts) -> None:
    response = post(client, "/enqueue/batch", {"jobs": [{"type": "t"}] * MAX_BATCH})
    assert response.status_code == 201
    assert count_jobs(scripts) == MAX_BATCH


def test_a_batch_with_bad_jobs_names_each_by_index_and_field_and_enqueues_nothing(
    client: FlaskClient, scripts: Scripts
) -> None:
    jobs = [{"type": "ok"}, {"priority": 1}, {"type": "ok"}, {"type": "a b", "max_retries": 0}]
    response = post(client, "/enqueue/batch", {"jobs": jobs})
    assert response.status_code == 400
    doc = response.get_json()
    assert {(e["index"], e["field"]) for e in doc["errors"]} == {
        (1, "type"),
        (3, "type"),
        (3, "max_retries"),
    }
    assert "jobs[1].type" in doc["error"] and "jobs[3].max_retries" in doc["error"]
    assert "2 of 4 jobs are invalid" in doc["error"]
    assert count_jobs(scripts) == 0


@pytest.mark.parametrize(
    "body",
    [
        {"jobs": []},
        {"jobs": [{"type": "t"}] * (MAX_BATCH + 1)},
        {"jobs": {"type": "t"}},
        {"jobs": [{"type": "t"}], "extra": 1},
        {},
        [{"type": "t"}],
    ],
)
def test_a_malformed_batch_is_400(client: FlaskClient, scripts: Scripts, body: Any) -> None:
    response = post(client, "/enqueue/batch", body)
    assert response.status_code == 400
    assert count_jobs(scripts) == 0


def test_enqueue_logs_ids_and_types_never_payloads(
    client: FlaskClient, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="shared.engine.lifecycle")  # job_enqueued is DEBUG
    secret = {"type": "t", "payload": {"password": "hunter2"}}
    one = post(client, "/enqueue", secret).get_json()
    many = post(client, "/enqueue/batch", {"jobs": [secret, secret]}).get_json()["jobs"]
    out = capsys.readouterr().out
    assert "hunter2" not in out
    events = [json.loads(line) for line in out.splitlines() if "job_enqueued" in line]
    assert events[0]["job_id"] == one["id"] and events[0]["type"] == "t"
    assert events[1]["job_ids"] == [j["id"] for j in many]


def test_new_job_ids_are_distinct_uuid4s_that_name_their_queue() -> None:
    queues = ["default", "mail"] * 1000
    ids = new_job_ids(queues)
    assert len(set(ids)) == 2000
    assert {tag_of(i) for i in ids[::2]} == {queue_tag("default")} != {queue_tag("mail")}
    assert {tag_of(i) for i in ids[1::2]} == {queue_tag("mail")}
    for job_id in ids:
        parsed = uuid.UUID(job_id)
        assert (parsed.version, parsed.variant, str(parsed)) == (4, uuid.RFC_4122, job_id)
        assert JOB_ID_PATTERN.fullmatch(job_id)
