"""POST /jobs/<id>/cancel on a running job: 202 with the request shown, who asked, the body's
rules; and the dashboard's Stop button."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.engine import history
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.gateway import helpers
from tests.gateway.test_ui import (  # noqa: F401
    K,
    engine,
    post,
    text,
    ui,
)


def test_a_running_job_is_asked_to_stop_with_202(
    client: FlaskClient, scripts: Scripts, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = helpers.processing(scripts)

    first = client.post(f"/jobs/{job_id}/cancel")
    again = client.post(f"/jobs/{job_id}/cancel", json={"by": "someone else"})

    assert (first.status_code, again.status_code) == (202, 202)
    doc = first.get_json()
    assert doc["status"] == "processing" and doc["cancel_requested_at"]
    assert doc["cancel_requested_by"] == "api 127.0.0.1"  # the client's address
    assert again.get_json() == doc  # a repeat changes nothing, not even who asked
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    asked = [line for line in lines if line["event"] == "job_cancel_requested"]
    assert len(asked) == 1 and asked[0]["job_id"] == job_id  # the repeat is not recorded
    assert asked[0]["by"] == "api 127.0.0.1"


def test_the_body_names_who_asks(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.processing(scripts)
    doc = client.post(f"/jobs/{job_id}/cancel", json={"by": "deploy|bot\n7"}).get_json()
    assert doc["cancel_requested_by"] == "deploy bot 7"  # no history separator kept
    kept = history.read(scripts.redis, Keys(), job_id, "default")
    assert kept is not None and kept.entries[-1].by == "deploy bot 7"
    shown = client.get(f"/jobs/{job_id}/history").get_json()["history"][-1]
    assert (shown["event"], shown["by"], shown["actor"]) == (
        "cancel_requested",
        "deploy bot 7",
        "api",
    )


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'{"by": ""}',
        b'{"by": 7}',
        b'{"by": "x", "why": "y"}',
        b"{",
        json.dumps({"by": "x" * 65}).encode(),
    ],
)
def test_any_other_body_is_400_and_changes_nothing(
    client: FlaskClient, scripts: Scripts, body: bytes
) -> None:
    job_id = helpers.processing(scripts)
    response = client.post(f"/jobs/{job_id}/cancel", data=body)
    assert response.status_code == 400
    assert scripts.redis.hget(Keys().job(job_id), "cancel_requested_at") is None


def test_a_pending_job_takes_the_body_too_and_is_canceled_with_200(
    client: FlaskClient, scripts: Scripts
) -> None:
    job_id = helpers.enqueue(scripts)
    response = client.post(f"/jobs/{job_id}/cancel", json={"by": "me"})
    assert (response.status_code, response.get_json()["status"]) == (200, "canceled")
    running = helpers.processing(scripts)
    response = client.post(f"/jobs/{running}/cancel", json={})  # an empty object: nobody named
    assert response.get_json()["cancel_requested_by"] == "api 127.0.0.1"


def test_the_dashboard_stops_a_running_job_after_confirming(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
) -> None:
    job_id = helpers.processing(engine)
    page = text(ui.get(f"/ui/jobs/{job_id}"))
    assert '<form id="cancel"' in page and ">Stop</button>" in page

    first = post(ui, f"/ui/jobs/{job_id}/cancel", f"/ui/jobs/{job_id}")
    assert "Stop this running" in text(first)
    assert engine.redis.hget(K.job(job_id), "cancel_requested_at") is None

    post(ui, f"/ui/jobs/{job_id}/cancel", f"/ui/jobs/{job_id}", confirm="yes")

    stored: Any = engine.redis.hgetall(K.job(job_id))
    assert stored[b"status"] == b"processing"
    assert stored[b"cancel_requested_by"].startswith(b"dashboard")
    page = text(ui.get(f"/ui/jobs/{job_id}"))
    assert 'id="job-cancel-requested"' in page and "asked by dashboard" in page
    assert '<form id="cancel"' not in page  # asked once: no second button
