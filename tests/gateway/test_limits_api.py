"""GET /limits, GET|PUT|DELETE /queues/<name>/limits and .../limits/types/<type>.

Through app.test_client() on fakeredis (the scripts are proven on a real Redis in
tests/engine/test_limits.py; the fuzz run drives these endpoints on real gunicorn).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.engine.scripts import Scripts
from tests.gateway import helpers

EMPTY = {"concurrency": None, "rate": None, "running": 0, "held": 0, "types": {}}


def put(client: FlaskClient, path: str, body: Any) -> Any:
    return client.put(path, data=json.dumps(body))


def test_a_queue_without_limits_answers_nulls(client: FlaskClient) -> None:
    response = client.get("/queues/default/limits")
    assert response.status_code == 200
    assert response.get_json() == {"queue": "default", **EMPTY}
    assert client.get("/limits").get_json() == {"queues": [], "next_cursor": None}


def test_put_replaces_the_limits_and_every_listing_shows_them(
    client: FlaskClient, scripts: Scripts
) -> None:
    body = {"concurrency": 10, "rate": "100/1m", "types": {"generate_pdf": {"concurrency": 5}}}
    response = put(client, "/queues/reports/limits", body)
    assert response.status_code == 200, response.get_json()
    expected = {
        "queue": "reports",
        "concurrency": 10,
        "rate": "100/m",
        "running": 0,
        "held": 0,
        "types": {"generate_pdf": {"concurrency": 5, "rate": None, "running": 0, "held": 0}},
    }
    assert response.get_json() == expected
    assert client.get("/limits").get_json() == {"queues": [expected], "next_cursor": None}
    listed = {q["name"]: q for q in client.get("/queues").get_json()["queues"]}
    assert listed["reports"]["limits"] == expected  # the queue is listed from now on
    assert listed["default"]["limits"] is None


def test_one_type_is_set_and_removed_without_touching_the_others(client: FlaskClient) -> None:
    put(client, "/queues/default/limits", {"types": {"a": {"concurrency": 1}}})
    response = put(client, "/queues/default/limits/types/b", {"rate": "5/500ms"})
    assert response.status_code == 200
    assert set(response.get_json()["types"]) == {"a", "b"}
    assert response.get_json()["types"]["b"]["rate"] == "5/500ms"
    response = client.delete("/queues/default/limits/types/a")
    assert set(response.get_json()["types"]) == {"b"}
    response = client.delete("/queues/default/limits")
    assert response.status_code == 200
    assert response.get_json() == {"queue": "default", **EMPTY}


def test_a_held_job_counts_as_pending_and_shows_as_held(
    client: FlaskClient, scripts: Scripts
) -> None:
    put(client, "/queues/default/limits/types/seed", {"concurrency": 1})  # helpers' type
    helpers.enqueue(scripts)
    helpers.enqueue(scripts)
    assert scripts.claim("w1") is not None
    assert scripts.claim("w2") is None
    state = client.get("/queues/default/limits").get_json()
    assert state["types"]["seed"] == {"concurrency": 1, "rate": None, "running": 1, "held": 1}
    assert (state["running"], state["held"]) == (1, 1)
    default = client.get("/queues").get_json()["queues"][0]
    assert default["jobs"]["pending"] == 1


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/queues/default/limits", {"concurrency": 0}, "concurrency"),
        ("/queues/default/limits", {"rate": "10 per second"}, "N/PERIOD"),
        ("/queues/default/limits", {"types": {"a": {}}}, "types.a"),
        ("/queues/default/limits", {"colour": 1}, "unknown field"),
        ("/queues/default/limits", [1], "object"),
        ("/queues/default/limits/types/a", {}, "concurrency and/or rate"),
        ("/queues/default/limits/types/a", {"concurrency": 2.5}, "integer"),
        ("/queues/bad%20name/limits", {"concurrency": 1}, "queue name"),
        ("/queues/default/limits/types/a%7Cb", {"concurrency": 1}, "job type"),
    ],
)
def test_bad_limits_are_a_clear_400(client: FlaskClient, path: str, body: Any, needle: str) -> None:
    response = put(client, path, body)
    assert response.status_code == 400
    assert needle in response.get_json()["error"]


def test_put_without_types_keeps_the_types_limits(client: FlaskClient) -> None:
    put(client, "/queues/default/limits/types/a", {"concurrency": 2})
    response = put(client, "/queues/default/limits", {"concurrency": 9})
    doc = response.get_json()
    assert (doc["concurrency"], set(doc["types"])) == (9, {"a"})
    doc = put(client, "/queues/default/limits", {"rate": "1/h", "types": {}}).get_json()
    assert (doc["concurrency"], doc["rate"], doc["types"]) == (None, "1/h", {})


def test_metrics_show_each_limited_scope(client: FlaskClient, scripts: Scripts) -> None:
    put(client, "/queues/default/limits", {"concurrency": 4, "types": {"seed": {"rate": "1/s"}}})
    helpers.enqueue(scripts)
    helpers.enqueue(scripts)
    assert scripts.claim("w1") is not None
    assert scripts.claim("w2") is None  # out of tokens: held
    text = client.get("/metrics").get_data(as_text=True)
    assert 'taskforge_limit_running{queue="default",scope="(queue)"} 1.0' in text
    assert 'taskforge_limit_running{queue="default",scope="seed"} 1.0' in text
    assert 'taskforge_limit_held{queue="default",scope="seed"} 1.0' in text
    assert 'taskforge_limit_concurrency{queue="default",scope="(queue)"} 4.0' in text
    assert 'scope="seed"} ' not in text.split("taskforge_limit_concurrency")[-1]
