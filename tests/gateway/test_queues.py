"""GET /queues, POST /queues/<name>/pause|resume, GET /workers, POST /workers/<name>/quiet|resume.

Through app.test_client() on fakeredis (the scripts themselves are proven on a real Redis in
tests/engine/test_pause.py and tests/engine/test_heartbeat.py; the fuzz run drives these
endpoints on real gunicorn).
"""

from __future__ import annotations

import json

import pytest
from flask.testing import FlaskClient

from shared.engine.engine_types import QueuePaused
from shared.engine.scripts import Scripts
from tests.gateway import helpers
from tests.gateway.conftest import TOKEN, make_app

STATES = ["pending", "scheduled", "processing", "retrying", "completed", "dead", "canceled"]


def queues(client: FlaskClient) -> dict[str, dict]:
    response = client.get("/queues")
    assert response.status_code == 200
    return {q["name"]: q for q in response.get_json()["queues"]}


def test_queues_lists_the_default_queue_with_its_counts(
    client: FlaskClient, scripts: Scripts
) -> None:
    helpers.enqueue(scripts)
    helpers.completed(scripts)
    helpers.dead(scripts)

    listed = queues(client)

    assert list(listed) == ["default"]
    default = listed["default"]
    assert set(default["jobs"]) == set(STATES)
    assert (default["jobs"]["pending"], default["jobs"]["dead"]) == (1, 1)
    assert (default["paused"], default["paused_since"]) == (False, None)
    assert default["oldest_pending_age_seconds"] >= 0
    assert (default["completed_last_minute"], default["failed_last_minute"]) == (1, 1)


def test_queues_lists_every_queue_by_name(client: FlaskClient, scripts: Scripts) -> None:
    client.post("/enqueue", data='{"type": "a", "queue": "low"}')
    client.post("/enqueue", data='{"type": "a", "queue": "critical"}')

    listed = queues(client)

    assert list(listed) == ["critical", "default", "low"]
    assert listed["low"]["jobs"]["pending"] == 1


def test_pause_answers_the_paused_queue_and_a_repeat_changes_nothing(
    client: FlaskClient, scripts: Scripts
) -> None:
    helpers.enqueue(scripts)

    first = client.post("/queues/default/pause")
    again = client.post("/queues/default/pause")

    assert (first.status_code, again.status_code) == (200, 200)
    doc = first.get_json()
    assert doc["name"] == "default" and doc["paused"] is True
    assert doc["paused_since"].endswith("Z")
    assert again.get_json()["paused_since"] == doc["paused_since"]
    assert doc["jobs"]["pending"] == 1  # held back, not refused
    assert queues(client)["default"]["paused"] is True


def test_a_paused_queue_still_accepts_jobs(client: FlaskClient, scripts: Scripts) -> None:
    client.post("/queues/default/pause")

    response = client.post("/enqueue", data='{"type": "a"}')

    assert response.status_code == 201 and response.get_json()["status"] == "pending"
    with pytest.raises(QueuePaused):
        scripts.claim("w1")


def test_pausing_a_queue_that_does_not_exist_yet_lists_it(client: FlaskClient) -> None:
    response = client.post("/queues/nightly/pause")

    assert response.status_code == 200 and response.get_json()["paused"] is True
    assert queues(client)["nightly"]["paused"] is True


def test_resume_answers_the_queue_and_a_repeat_changes_nothing(
    client: FlaskClient, scripts: Scripts
) -> None:
    client.post("/queues/default/pause")
    helpers.enqueue(scripts)

    first = client.post("/queues/default/resume")
    again = client.post("/queues/default/resume")

    assert (first.status_code, again.status_code) == (200, 200)
    assert first.get_json()["paused"] is False and first.get_json()["paused_since"] is None
    assert scripts.claim("w1") is not None


@pytest.mark.parametrize("name", ["a:b", "{x}", "x" * 65, "a b", "é"])
@pytest.mark.parametrize("action", ["pause", "resume"])
def test_a_bad_queue_name_is_400_naming_the_rule(
    client: FlaskClient, name: str, action: str
) -> None:
    response = client.post(f"/queues/{name}/{action}")

    assert response.status_code == 400
    assert "must be 1-64 characters" in response.get_json()["error"]
    assert list(queues(client)) == ["default"]  # nothing registered


def test_pause_and_resume_log_an_operator_line(
    client: FlaskClient, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    client.post("/queues/low/pause")
    client.post("/queues/low/pause")
    client.post("/queues/low/resume")

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    actions = [
        (line["event"], line["queue"], line["changed"])
        for line in lines
        if line["event"] in ("queue_paused", "queue_resumed")
    ]
    assert actions == [
        ("queue_paused", "low", True),
        ("queue_paused", "low", False),
        ("queue_resumed", "low", True),
    ]


# --- workerd hosts -----------------------------------------------------------------------------


def beat(scripts: Scripts, name: str, **fields: object) -> None:
    record = {"host": "box", "pid": 7, "workers": 3, "busy": 1, "queues": "critical,default"}
    scripts.heartbeat(name, {**record, **fields}, ttl_ms=10_000)


def test_workers_lists_every_live_host(client: FlaskClient, scripts: Scripts) -> None:
    assert client.get("/workers").get_json() == {"hosts": []}
    beat(scripts, "box-7")
    beat(scripts, "gone-9")
    scripts.heartbeat("gone-9", {}, ttl_ms=10_000, leaving=True)

    hosts = client.get("/workers").get_json()["hosts"]

    assert len(hosts) == 1
    host = hosts[0]
    assert {k: host[k] for k in ("name", "host", "pid", "workers", "busy", "quiet")} == {
        "name": "box-7",
        "host": "box",
        "pid": 7,
        "workers": 3,
        "busy": 1,
        "quiet": False,
    }
    assert host["queues"] == ["critical", "default"]
    assert host["worker_queues"] == "critical,default"
    assert host["quiet_requested"] is None and host["last_seen"].endswith("Z")


def test_quiet_is_202_with_the_request_shown_until_the_host_applies_it(
    client: FlaskClient, scripts: Scripts, capsys: pytest.CaptureFixture[str]
) -> None:
    beat(scripts, "box-7")
    capsys.readouterr()

    response = client.post("/workers/box-7/quiet")

    assert response.status_code == 202
    doc = response.get_json()
    assert (doc["quiet"], doc["quiet_requested"]) == (False, True)
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert any(
        line["event"] == "quiet_requested" and line["supervisor"] == "box-7" for line in logged
    )
    # The host's next heartbeat applies it (workerd/duties/fleet_heartbeat.py).
    assert scripts.heartbeat("box-7", {"workers": 3}, ttl_ms=10_000).quiet is True
    scripts.heartbeat("box-7", {"workers": 3}, ttl_ms=10_000, quiet=True)
    listed = client.get("/workers").get_json()["hosts"][0]
    assert (listed["quiet"], listed["quiet_requested"]) == (True, None)
    assert client.get("/stats").get_json()["workers"]["quiet"] == 1

    resumed = client.post("/workers/box-7/resume")
    assert resumed.status_code == 202 and resumed.get_json()["quiet_requested"] is False


def test_quiet_for_an_unknown_host_is_404(client: FlaskClient) -> None:
    for action in ("quiet", "resume"):
        response = client.post(f"/workers/nobody-1/{action}")
        assert response.status_code == 404
        assert response.get_json() == {"error": "workerd host not found"}


@pytest.mark.parametrize("name", ["a b", "x" * 256, "box:7", "é"])
def test_a_bad_host_name_is_400(client: FlaskClient, name: str) -> None:
    assert client.post(f"/workers/{name}/quiet").status_code == 400


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/queues"),
        ("POST", "/queues/default/pause"),
        ("POST", "/queues/default/resume"),
        ("GET", "/workers"),
        ("POST", "/workers/box-7/quiet"),
        ("POST", "/workers/box-7/resume"),
    ],
)
def test_every_new_endpoint_is_behind_the_token(scripts: Scripts, method: str, path: str) -> None:
    beat(scripts, "box-7")
    locked = make_app(scripts, TASKFORGE_API_TOKEN=TOKEN).test_client()

    assert locked.open(path, method=method).status_code == 401
    assert not scripts.redis.exists(scripts.keys.paused)  # refused before it acted
    opened = locked.open(path, method=method, headers={"Authorization": f"Bearer {TOKEN}"})
    assert opened.status_code in (200, 202)
