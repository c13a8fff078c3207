"""POST /dlq/retry and POST /dlq/purge: bulk DLQ actions under real gunicorn on the private Redis.

The session's gateway outlives each test's FLUSHALL, so every test names queues of its own.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from shared.engine import history
from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import validate_enqueue
from shared.read.directory import QueueDirectory
from tests.support.gunicorn import Gunicorn

K = Keys()


def fresh(name: str) -> str:
    """Return a queue name no earlier test used."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return engine scripts on the private server (emptied by `r`)."""
    return Scripts(r, K)


def put_dead(scripts: Scripts, queue: str, job_type: str = "seed") -> str:
    """Enqueue a job into `queue` as a producer would, and fail its only execution."""
    QueueDirectory(scripts).ensure(queue)
    job_id = new_job_id(queue)
    request = validate_enqueue({"type": job_type, "queue": queue, "max_retries": 1})
    assert scripts.enqueue(request, job_id).created
    job = scripts.claim("w-test", queue=queue)
    assert job is not None and job.id == job_id
    assert scripts.fail(job_id, job.token, "E: boom", queue=queue).code is Code.DEAD
    return job_id


def status(r: redis.Redis, queue: str, job_id: str) -> str | None:
    value = r.hget(K.for_queue(queue).job(job_id), "status")
    return None if value is None else value.decode()


def post(gw: Gunicorn, path: str, body: Any) -> tuple[int, Any]:
    code, _, doc = gw.request("POST", path, body)
    return code, doc


def test_retry_by_ids_replays_them_and_says_what_it_skipped(
    gw: Gunicorn, engine: Scripts, r: redis.Redis
) -> None:
    queue = fresh("bulk")
    a, b = put_dead(engine, queue), put_dead(engine, queue)
    unknown = str(uuid.uuid4())

    code, doc = post(gw, "/dlq/retry", {"ids": [a.upper(), unknown]})

    assert code == 200
    assert doc == {
        "done": [a],
        "skipped": [{"id": unknown, "reason": "not found"}],
        "next_cursor": None,
    }
    assert status(r, queue, a) == "pending" and status(r, queue, b) == "dead"
    again = post(gw, "/dlq/retry", {"ids": [a]})[1]
    assert again["done"] == [] and again["skipped"] == [{"id": a, "reason": "not dead: pending"}]
    kept = history.read(r, K, a, queue)
    assert kept is not None and [e.event for e in kept.entries].count("replayed") == 1


def test_purge_by_filter_pages_through_one_queue_and_type_to_the_end(
    gw: Gunicorn, engine: Scripts, r: redis.Redis
) -> None:
    queue, other = fresh("bulk"), fresh("other")
    wanted = [put_dead(engine, queue, "pdf") for _ in range(5)]
    kept = [put_dead(engine, queue, "csv"), put_dead(engine, other, "pdf")]

    done: list[str] = []
    body: dict[str, Any] = {"queue": queue, "type": "pdf", "limit": 2}
    for _ in range(10):
        code, doc = post(gw, "/dlq/purge", body)
        assert code == 200 and doc["skipped"] == []
        done += doc["done"]
        if doc["next_cursor"] is None:
            break
        body["cursor"] = doc["next_cursor"]

    assert sorted(done) == sorted(wanted) and len(done) == len(wanted)
    assert all(status(r, queue, job_id) is None for job_id in wanted)
    assert status(r, queue, kept[0]) == "dead" and status(r, other, kept[1]) == "dead"


def test_all_without_a_queue_takes_every_queue(
    gw: Gunicorn, engine: Scripts, r: redis.Redis
) -> None:
    one, two = fresh("one"), fresh("two")
    jobs = {put_dead(engine, one): one, put_dead(engine, two): two}

    code, doc = post(gw, "/dlq/retry", {"all": True})

    assert code == 200 and sorted(doc["done"]) == sorted(jobs) and doc["next_cursor"] is None
    assert all(status(r, queue, job_id) == "pending" for job_id, queue in jobs.items())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ids": []}, "ids"),
        ({"ids": ["nope"]}, "ids"),
        ({"ids": [1]}, "ids"),
        ({"ids": [str(uuid.uuid4())] * 1001}, "ids"),
        ({"ids": [str(uuid.uuid4())], "queue": "a"}, "queue"),
        ({"queue": "bad name!"}, "queue"),
        ({"type": ""}, "type"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": None}, "cursor"),
        ({"queue": None}, "queue"),
        ({"state": "dead"}, "state"),
        ({"all": False}, "all"),
        ({"all": "yes"}, "all"),
    ],
)
def test_a_bad_bulk_body_is_400_naming_the_field(
    gw: Gunicorn, body: dict[str, Any], field: str
) -> None:
    code, doc = post(gw, "/dlq/retry", body)

    assert code == 400, doc
    assert doc["fields"][0]["field"] == field, doc


@pytest.mark.parametrize(
    "body", [{}, {"limit": 5}, {"cursor": "1796187428892:3909656c-7f6f-49d5-9287-3ed7409bb242"}]
)
@pytest.mark.parametrize("path", ["/dlq/retry", "/dlq/purge"])
def test_a_body_that_names_no_jobs_is_400_and_touches_none(
    gw: Gunicorn, engine: Scripts, r: redis.Redis, path: str, body: dict[str, Any]
) -> None:
    queue = fresh("kept")
    job_id = put_dead(engine, queue)

    code, doc = post(gw, path, body)

    assert code == 400 and '"all": true' in doc["error"], doc
    assert status(r, queue, job_id) == "dead"


def test_a_bad_all_is_shown_as_json_spells_it(gw: Gunicorn) -> None:
    code, doc = post(gw, "/dlq/purge", {"all": False})

    assert code == 400 and doc["error"] == "all must be true (or left out), got false", doc


def test_a_body_that_is_not_an_object_is_400(gw: Gunicorn) -> None:
    code, doc = post(gw, "/dlq/purge", "[1]")

    assert code == 400 and "JSON object" in doc["error"]


def test_an_integral_float_limit_is_an_integer(gw: Gunicorn, engine: Scripts) -> None:
    put_dead(engine, fresh("bulk"))

    code, doc = post(gw, "/dlq/retry", '{"all": true, "limit": 1.0}')

    assert code == 200 and len(doc["done"]) == 1


@pytest.mark.parametrize("path", ["/dlq/retry", "/dlq/purge"])
def test_the_bulk_paths_allow_post_only(gw: Gunicorn, path: str) -> None:
    # Not taken for DELETE /dlq/<id> with "purge" as the id (a 400 advertised as allowed).
    for method in ("DELETE", "GET", "OPTIONS"):
        code, headers, _ = gw.request(method, path)
        assert (code, headers.get("allow")) == (405, "POST"), method
