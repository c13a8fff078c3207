"""GET /jobs/<id>/history: the app on fakeredis, and real gunicorn on the private Redis."""

from __future__ import annotations

from typing import Any

import redis
from flask.testing import FlaskClient

from gateway.openapi import document
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import validate_enqueue
from shared.read.directory import QueueDirectory
from tests.gateway import helpers
from tests.gateway.conftest import TOKEN, make_app
from tests.support.gunicorn import Gunicorn

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def _events(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(entry["event"], entry["actor"]) for entry in doc["history"]]


def test_a_completed_jobs_history_reads_oldest_first(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.completed(scripts)

    response = client.get(f"/jobs/{job_id}/history")

    assert response.status_code == 200
    doc = response.get_json()
    assert list(doc) == ["id", "queue", "history", "dropped"]
    assert (doc["id"], doc["queue"], doc["dropped"]) == (job_id, "default", 0)
    assert _events(doc) == [("enqueued", "api"), ("claimed", "worker"), ("completed", "worker")]
    assert doc["history"][2]["worker"] == f"worker-{job_id}" and doc["history"][2]["attempt"] == 1
    assert "host" not in doc["history"][2]  # a test worker id: not workerd's shape


def test_a_job_in_a_named_queue_is_found_there(client: FlaskClient, scripts: Scripts) -> None:
    job_id = client.post("/enqueue", json={"type": "t", "queue": "critical"}).get_json()["id"]

    doc = client.get(f"/jobs/{job_id}/history").get_json()

    assert doc["queue"] == "critical" and _events(doc) == [("enqueued", "api")]


def test_a_dead_jobs_history_names_the_error_type(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.dead(scripts)
    client.post(f"/dlq/{job_id}/retry")

    doc = client.get(f"/jobs/{job_id.upper()}/history").get_json()

    assert _events(doc)[-2:] == [("dead", "worker"), ("replayed", "api")]
    assert doc["history"][-2]["error"] == "boom"


def test_the_job_itself_stays_lean(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.completed(scripts)

    assert "history" not in client.get(f"/jobs/{job_id}").get_json()


def test_an_unknown_job_is_404_and_a_purged_one_too(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.dead(scripts)
    assert client.delete(f"/dlq/{job_id}").status_code == 204  # its tombstone stays a while

    for unknown in (UNKNOWN, job_id):
        response = client.get(f"/jobs/{unknown}/history")
        assert response.status_code == 404
        assert response.get_json() == {"error": "job not found"}


def test_a_malformed_id_is_400(client: FlaskClient) -> None:
    response = client.get("/jobs/not-a-uuid/history")

    assert response.status_code == 400
    assert "malformed job id" in response.get_json()["error"]


def test_history_needs_the_token(scripts: Scripts) -> None:
    locked = make_app(scripts, TASKFORGE_API_TOKEN=TOKEN).test_client()
    job_id = helpers.enqueue(scripts)

    assert locked.get(f"/jobs/{job_id}/history").status_code == 401
    opened = locked.get(f"/jobs/{job_id}/history", headers={"Authorization": f"Bearer {TOKEN}"})
    assert opened.status_code == 200


def test_the_document_describes_the_answer() -> None:
    doc = document(auth=True)
    operation = doc["paths"]["/jobs/{job_id}/history"]["get"]
    schema = doc["components"]["schemas"]["History"]
    # Each entry is a model of its own (gateway/contract), referenced from the list.
    ref = schema["properties"]["history"]["items"]["$ref"]
    entry = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]

    assert set(operation["responses"]) == {"200", "400", "401", "404", "429", "503"}
    assert schema["required"] == ["id", "queue", "history", "dropped"]
    assert set(entry["properties"]["event"]["enum"]) >= {"enqueued", "claimed", "completed"}
    assert entry["properties"]["actor"]["enum"] == ["api", "scheduler", "supervisor", "worker"]


def test_real_gunicorn_answers_from_the_engines_history(gw: Gunicorn, r: redis.Redis) -> None:
    """On a real Redis: what the scripts wrote, through gunicorn, as the document says."""
    scripts = Scripts(r, Keys())
    job_id = new_job_id("default")
    QueueDirectory(scripts).ensure("default")
    scripts.enqueue(validate_enqueue({"type": "t", "max_retries": 2}), job_id)
    job = scripts.claim("web-1-77-worker0-1")
    assert job is not None
    scripts.fail(job_id, job.token, "ValueError: bad")

    status, _, doc = gw.request("GET", f"/jobs/{job_id}/history")

    assert status == 200
    assert _events(doc) == [("enqueued", "api"), ("claimed", "worker"), ("retrying", "worker")]
    assert doc["history"][2] | {"at": None} == {
        "event": "retrying",
        "at": None,
        "attempt": 1,
        "worker": "web-1-77-worker0-1",
        "host": "web-1",
        "error": "ValueError",
        "actor": "worker",
    }
