"""POST /enqueue and /enqueue/batch with the job's own `id` (the client's), on a real Redis and
on the fast path: 201 then 200 with the same job, 409 for another body or another queue."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.engine.scripts import Scripts
from shared.model import ticks
from shared.model.job_ids import new_client_id, queue_tag
from tests.gateway.helpers import count_jobs


def post(client: FlaskClient, path: str, body: Any, **headers: str) -> Any:
    return client.post(path, data=json.dumps(body), headers=headers)


def test_an_id_is_the_jobs_and_a_repeat_answers_200_with_the_same_job(
    web: FlaskClient, engine: Scripts
) -> None:
    body = {"type": "t", "payload": {"n": 1}, "id": new_client_id("default")}
    first = post(web, "/enqueue", body)
    again = post(web, "/enqueue", body)

    assert first.status_code == 201 and again.status_code == 200
    assert first.get_json()["id"] == body["id"] == again.get_json()["id"]
    assert again.headers["Location"] == f"/jobs/{body['id']}"
    assert web.get(f"/jobs/{body['id']}").get_json()["payload"] == {"n": 1}
    assert count_jobs(engine) == 1


def test_an_id_given_in_upper_case_is_the_same_job(web: FlaskClient, engine: Scripts) -> None:
    given = new_client_id("default")
    assert post(web, "/enqueue", {"type": "t", "id": given.upper()}).get_json()["id"] == given
    assert post(web, "/enqueue", {"type": "t", "id": given}).status_code == 200


def test_an_id_with_another_body_is_409_naming_it_and_makes_nothing(
    web: FlaskClient, engine: Scripts
) -> None:
    given = new_client_id("default")
    post(web, "/enqueue", {"type": "t", "payload": {"n": 1}, "id": given})
    refused = post(web, "/enqueue", {"type": "t", "payload": {"n": 2}, "id": given})

    assert refused.status_code == 409
    assert refused.get_json()["job_id"] == given
    assert "different body" in refused.get_json()["error"]
    assert web.get(f"/jobs/{given}").get_json()["payload"] == {"n": 1}
    assert count_jobs(engine) == 1


@pytest.mark.parametrize(
    ("given", "wanted"),
    [
        ("not-a-uuid", "version 8"),
        (ticks.job_id("nightly", 4_102_444_800_000), "version 8"),  # a future tick's id
        # queue other's tag (a fixed id: xdist's workers must collect the same parameters)
        ("db0fba7c-0405-8607-8809-0a0b0c0d0e0f", f"must begin with {queue_tag('default')}"),
    ],
)
def test_an_id_that_is_not_a_clients_for_its_queue_is_400(
    web: FlaskClient, engine: Scripts, given: str, wanted: str
) -> None:
    assert queue_tag("other") == "db0fba7c"
    refused = post(web, "/enqueue", {"type": "t", "id": given})
    assert refused.status_code == 400
    assert refused.get_json()["fields"][0]["field"] == "id"
    assert wanted in refused.get_json()["fields"][0]["message"]
    assert count_jobs(engine) == 0


def test_an_id_with_an_idempotency_key_is_400(web: FlaskClient, engine: Scripts) -> None:
    body = {"type": "t", "id": new_client_id("default")}
    refused = post(web, "/enqueue", body, **{"Idempotency-Key": "k1"})
    assert refused.status_code == 400 and "not both" in refused.get_json()["error"]


def test_an_id_a_queue_with_the_same_tag_holds_is_409(
    web: FlaskClient, engine: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two queue names with one tag (about q²/2³³ for q queues): made here by pinning the tags
    # where the id is checked and where the tag map is written.
    pinned = {"one": "0badc0de", "two": "0badc0de"}
    for where in ("shared.model.job_ids", "shared.engine.scripts.queue_scripts"):
        monkeypatch.setattr(f"{where}.queue_tag", lambda name: pinned.get(name, "ffffffff"))
    given = "0badc0de" + new_client_id("x")[8:]
    assert post(web, "/enqueue", {"type": "t", "queue": "one", "id": given}).status_code == 201
    refused = post(web, "/enqueue", {"type": "t", "queue": "two", "id": given})
    assert refused.status_code == 409 and "another queue" in refused.get_json()["error"]


def test_a_batch_takes_ids_and_its_repeat_answers_200_with_the_same_jobs(
    web: FlaskClient, engine: Scripts
) -> None:
    jobs = [{"type": "t", "id": new_client_id("default"), "payload": {"n": n}} for n in range(3)]
    jobs.append({"type": "t"})  # a job without one gets the server's
    first = post(web, "/enqueue/batch", {"jobs": jobs[:3]})
    again = post(web, "/enqueue/batch", {"jobs": jobs[:3]})
    mixed = post(web, "/enqueue/batch", {"jobs": jobs})

    assert (first.status_code, again.status_code, mixed.status_code) == (201, 200, 200)
    ids = [job["id"] for job in first.get_json()["jobs"]]
    assert ids == [job["id"] for job in jobs[:3]] == [j["id"] for j in again.get_json()["jobs"]]
    assert count_jobs(engine) == 4


def test_a_batch_with_an_id_under_another_body_is_409_and_enqueues_nothing(
    web: FlaskClient, engine: Scripts
) -> None:
    taken = new_client_id("default")
    post(web, "/enqueue", {"type": "t", "id": taken})
    batch = [{"type": "t"}, {"type": "u", "id": taken}, {"type": "t"}]
    refused = post(web, "/enqueue/batch", {"jobs": batch})
    assert refused.status_code == 409 and refused.get_json()["job_id"] == taken
    assert count_jobs(engine) == 1


def test_a_batch_with_one_id_twice_is_400(web: FlaskClient, engine: Scripts) -> None:
    given = new_client_id("default")
    refused = post(web, "/enqueue/batch", {"jobs": [{"type": "t", "id": given}] * 2})
    assert refused.status_code == 400 and "twice" in refused.get_json()["error"]
