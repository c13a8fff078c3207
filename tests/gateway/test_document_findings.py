"""What Schemathesis found where the gateway and its OpenAPI document disagreed, each pinned
down without it: a resume cursor the document allows, the messages of GET /events, the job
ids GET /workers hands to whatever follows them, and a page cursor of GET /queues (tests/gateway/test_schemathesis.py runs
the tool itself)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest
import redis
from flask import Flask

from gateway import events_api as gateway_events
from gateway.contract.types import JOB_ID_PATTERN as JOB_ID
from gateway.openapi import document
from shared.engine.events import decode_cursor
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.gateway.test_events import Stream, emit, emit_host, make_app, new_job
from tests.support.redis_server import RedisServer

U64_MAX = str(2**64 - 1)
PAST_U64 = str(2**64)


@pytest.fixture
def app(r: redis.Redis, redis_server: RedisServer) -> Iterator[Flask]:
    application = make_app(r)
    yield application
    application.extensions[gateway_events.EXTENSION].tail.stop()


def operation(path: str, method: str = "get") -> dict[str, Any]:
    return document(auth=False)["paths"][path][method]


def validator(schema: dict[str, Any]) -> Any:
    """Return a validator of `schema`, its $refs resolved in the open gateway's document."""
    components = document(auth=False)["components"]
    return jsonschema_rs.validator_for({**schema, "components": components})


# --- Last-Event-ID: every cursor the document allows is one the gateway accepts -----------


CURSORS = [
    "1764645600000-3",
    f"{U64_MAX}-{U64_MAX}",  # the largest stream id Redis can hold
    "00000000000000000001-0",  # 20 digits, leading zeros
    f"t{U64_MAX},*={U64_MAX}",  # what a Cluster reader may hand out: (ms-1, 2^64-1) positions
    "t5,default=1,default=2",  # a name twice: the document cannot forbid it
    "t5,*=1,*=0",
    "",  # read as none, from now (EventSource itself never sends an empty one)
    f"{PAST_U64}-0",  # not a stream id: past what Redis holds
    f"t{PAST_U64}",
    f"t5,*={PAST_U64}",
    "١٢-٣",  # digits, but not ASCII ones: JSON Schema's patterns mean [0-9]
    "t5,default=1,",
]


@pytest.mark.parametrize("cursor", CURSORS)
def test_the_gateway_accepts_exactly_the_last_event_ids_the_document_allows(
    app: Flask, cursor: str
) -> None:
    header, query = (
        next(p for p in operation("/events")["parameters"] if p["name"] == name)["schema"]
        for name in ("Last-Event-ID", "last_event_id")
    )
    allowed = validator(header).is_valid(cursor)
    assert validator(query).is_valid(cursor) == allowed
    requests = [{"query_string": {"last_event_id": cursor}}]
    if cursor.isascii():  # an HTTP header carries Latin-1 at most
        requests.append({"headers": {"Last-Event-ID": cursor}})
    for request in requests:
        response = app.test_client().get("/events", buffered=False, **request)
        try:
            assert response.status_code == (200 if allowed else 400), (request, cursor)
        finally:
            response.close()


def test_a_stream_named_twice_resumes_from_its_earlier_position() -> None:
    assert decode_cursor("t5,a=3,*=7,a=1").seen == {"a": 1, "*": 7}


# --- GET /events: each message matches the schema the document declares --------------------


def test_every_kind_of_event_message_matches_its_documented_schema(
    app: Flask, r: redis.Redis
) -> None:
    media = operation("/events")["responses"]["200"]["content"]["text/event-stream"]
    message_schema = media["schema"]
    data_schema = message_schema["properties"]["data"]["contentSchema"]
    response = app.test_client().get("/events", buffered=False)
    try:
        stream = Stream(response)
        stream.next()  # retry and the cursor: no data, so no event a client dispatches
        job = new_job()
        emit(r, "default", "enqueued", job, t="email.send")
        emit(r, "default", "claimed", job, t="email.send", a="1", w="host-1-7:3")
        # `r`, the reason, is a field name emit() cannot take: written as the scripts do.
        r.xadd(Keys().fleet_events, {"q": "default", "e": "held", "j": job, "r": "rate"})
        emit(r, "default", "queue_paused")
        emit_host(r, "worker_joined", "host-1-7")
        messages = stream.events(5)
        r.xtrim(Keys().fleet_events, maxlen=0, approximate=False)
    finally:
        response.close()
    # A gap too: a reader whose cursor is older than what the cap dropped.
    for _ in range(3):
        emit(r, "default", "enqueued", new_job())
    r.xtrim(Keys().fleet_events, maxlen=1, approximate=False)
    response = app.test_client().get(
        "/events", headers={"Last-Event-ID": messages[0].id}, buffered=False
    )
    try:
        stream = Stream(response)
        stream.next()
        messages += stream.events(1)
    finally:
        response.close()
    assert messages[-1].event == "gap"
    for message in messages:
        # As an EventSource hands it over: the data as text, the last id seen.
        event = {"event": message.event, "data": json.dumps(message.data)}
        if message.id is not None:
            event["id"] = message.id
        assert validator(message_schema).is_valid(event), event
        assert validator(data_schema).is_valid(message.data), message.data


# --- GET /workers: no process hands out a null job id --------------------------------------


def test_an_idle_worker_process_lists_no_job_rather_than_a_null_one(
    app: Flask, r: redis.Redis
) -> None:
    job = new_job()
    procs = [
        {"pid": 11, "job_id": job, "type": "pdf", "queue": "default", "busy_since_ms": 1_000,
         "beat_ms": 2_000},
        {"pid": 12, "job_id": None, "type": None, "queue": None, "busy_since_ms": None,
         "beat_ms": 2_000},
    ]  # fmt: skip
    fields = {"host": "h", "pid": 10, "workers": 2, "busy": 1, "queues": "default"}
    Scripts(r, Keys()).heartbeat("h-10", {**fields, "procs": json.dumps(procs)}, ttl_ms=60_000)

    response = app.test_client().get("/workers")

    assert response.status_code == 200
    (host,) = response.get_json()["hosts"]
    busy, idle = host["processes"]
    assert busy["job_id"] == job and (busy["type"], busy["queue"]) == ("pdf", "default")
    assert idle == {"pid": 12, "last_heartbeat": "1970-01-01T00:00:02.000Z"}
    # Whatever follows a process's job_id to /jobs/{id} gets an id its path accepts.
    path_id = {"type": "string", "pattern": JOB_ID}
    for process in host["processes"]:
        assert "job_id" not in process or validator(path_id).is_valid(process["job_id"])
    hosts = operation("/workers")["responses"]["200"]["content"]["application/json"]["schema"]
    assert validator(hosts).is_valid(response.get_json())


# --- GET /queues: a page cursor the document allows is one Redis takes -----------------------


@pytest.mark.parametrize("cursor", ["0", "7", U64_MAX, PAST_U64, "9" * 20, "0" * 20, "１"])
def test_the_gateway_accepts_exactly_the_queue_cursors_the_document_allows(
    app: Flask, cursor: str
) -> None:
    param = document(auth=False)["components"]["parameters"]["QueueCursor"]
    allowed = validator(param["schema"]).is_valid(cursor)
    response = app.test_client().get("/queues", query_string={"cursor": cursor})
    # Past 2^64 - 1 Redis refuses the SSCAN: that was a 500.
    assert response.status_code == (200 if allowed else 400), response.get_json()
