"""Named queues through the HTTP API, under real gunicorn on the private Redis.

The session's gateway outlives each test's FLUSHALL, so every test names queues of its own
(a queue name per test): a gateway lists a queue once per process and name.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import JobState, validate_enqueue
from shared.model.queues import QUEUE_RULE
from shared.read.directory import QueueDirectory
from shared.read.queue_removal import delete_queue
from tests.support.gunicorn import Gunicorn

K = Keys()


def fresh(name: str) -> str:
    """Return a queue name no earlier test used."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def jobs_in(r: redis.Redis, queue: str) -> int:
    """Return how many jobs one queue holds in any state."""
    keys = K.for_queue(queue)
    return sum(r.zcard(keys.state_index(state)) for state in JobState)


def put(scripts: Scripts, queue: str, **fields: Any) -> str:
    """Enqueue a job as another producer process would: list the queue, then enqueue."""
    QueueDirectory(scripts).ensure(queue)
    job_id = new_job_id(queue)
    request = validate_enqueue({"type": "seed", "queue": queue, **fields})
    assert scripts.enqueue(request, job_id).created
    return job_id


def put_dead(scripts: Scripts, queue: str) -> str:
    """Enqueue a job into `queue` and fail its only execution."""
    job_id = put(scripts, queue, max_retries=1, priority=10**6)
    job = scripts.claim("w-test", queue=queue)
    assert job is not None and job.id == job_id
    assert scripts.fail(job_id, job.token, "E: boom", queue=queue).code is Code.DEAD
    return job_id


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return engine scripts on the private server (emptied by `r`)."""
    return Scripts(r, K)


def test_enqueue_with_a_queue_is_201_and_the_job_lives_in_that_queue(
    gw: Gunicorn, r: redis.Redis
) -> None:
    queue = fresh("critical")

    status, hdrs, doc = gw.request("POST", "/enqueue", {"type": "pdf", "queue": queue})

    assert status == 201 and doc["queue"] == queue
    assert hdrs["location"] == f"/jobs/{doc['id']}"
    assert r.hget(K.for_queue(queue).job(doc["id"]), "type") == b"pdf"
    assert not r.exists(K.job(doc["id"]))
    assert r.sismember(K.queues, queue)  # listed, so the scheduler and lookups see it
    doc.pop("warnings", None)  # the enqueue's own (no workerd host runs here)
    assert gw.request("GET", hdrs["location"])[2] == doc


def test_enqueue_without_a_queue_goes_to_default(gw: Gunicorn, r: redis.Redis) -> None:
    status, _, doc = gw.request("POST", "/enqueue", {"type": "pdf"})

    assert (status, doc["queue"]) == (201, "default")
    assert r.exists(K.job(doc["id"]))


@pytest.mark.parametrize("bad", ["a:b", "", "x" * 65, "{tag}", "with space", "é", 5, None])
def test_a_bad_queue_name_is_400_naming_the_rule(gw: Gunicorn, r: redis.Redis, bad: Any) -> None:
    status, _, doc = gw.request("POST", "/enqueue", {"type": "pdf", "queue": bad})

    assert status == 400
    assert [f["field"] for f in doc["fields"]] == ["queue"]
    assert QUEUE_RULE in doc["fields"][0]["message"]
    assert r.dbsize() == 0  # no job, and no queue listed


def test_a_batch_across_queues_puts_each_job_in_its_queue_in_order(
    gw: Gunicorn, r: redis.Redis
) -> None:
    a, b = fresh("a"), fresh("b")
    jobs = [{"type": "t0", "queue": a}, {"type": "t1"}, {"type": "t2", "queue": b}]
    jobs.append({"type": "t3", "queue": a})

    status, _, doc = gw.request("POST", "/enqueue/batch", {"jobs": jobs})

    assert status == 201
    assert [(j["type"], j["queue"]) for j in doc["jobs"]] == [
        ("t0", a),
        ("t1", "default"),
        ("t2", b),
        ("t3", a),
    ]
    assert (jobs_in(r, a), jobs_in(r, "default"), jobs_in(r, b)) == (2, 1, 1)
    for job in doc["jobs"]:
        assert gw.request("GET", f"/jobs/{job['id']}")[2]["queue"] == job["queue"]


def test_a_batch_with_one_bad_queue_enqueues_nothing_in_any_queue(
    gw: Gunicorn, r: redis.Redis
) -> None:
    a = fresh("a")
    jobs = [{"type": "t0", "queue": a}, {"type": "t1"}, {"type": "t2", "queue": "no:colons"}]

    status, _, doc = gw.request("POST", "/enqueue/batch", {"jobs": jobs})

    assert status == 400
    assert [(e["index"], e["field"]) for e in doc["errors"]] == [(2, "queue")]
    assert r.dbsize() == 0


def test_an_idempotency_key_reused_for_another_queue_is_409(gw: Gunicorn, r: redis.Redis) -> None:
    a, b = fresh("a"), fresh("b")
    key = {"Idempotency-Key": f"k-{uuid.uuid4().hex}"}
    first = gw.request("POST", "/enqueue", {"type": "t", "queue": a}, key)
    assert first[0] == 201

    status, _, doc = gw.request("POST", "/enqueue", {"type": "t", "queue": b}, key)

    assert (status, doc["job_id"]) == (409, first[2]["id"])
    assert jobs_in(r, b) == 0
    again = gw.request("POST", "/enqueue", {"type": "t", "queue": a}, key)
    assert (again[0], again[2]["id"], again[2]["queue"]) == (200, first[2]["id"], a)


def test_a_job_is_found_in_a_queue_listed_after_the_gateway_read_the_list(
    start_gateway: Any, engine: Scripts
) -> None:
    known = put(engine, "default")
    # One gunicorn worker, so the process that read the list is the one asked afterwards.
    with start_gateway(WEB_CONCURRENCY="1") as gw:
        assert gw.request("GET", f"/jobs/{known}")[0] == 200  # the list read: [default]
        late = put(engine, fresh("late"))  # listed by another process, after that read
        canceled = put(engine, fresh("later"))
        dead = put_dead(engine, fresh("dlq"))

        status, _, doc = gw.request("GET", f"/jobs/{late}")
        assert (status, doc["id"], doc["status"]) == (200, late, "pending")

        status, _, doc = gw.request("POST", f"/jobs/{canceled}/cancel")
        assert (status, doc["status"]) == (200, "canceled")

        listed = gw.request("GET", "/dlq")[2]["jobs"]
        assert [(j["id"], j["queue"]) for j in listed] == [(dead, doc_queue(engine, dead))]
        status, _, doc = gw.request("POST", f"/dlq/{dead}/retry")
        assert (status, doc["status"]) == (200, "pending")


def test_replay_and_purge_find_a_dead_job_in_its_queue(gw: Gunicorn, engine: Scripts) -> None:
    queue = fresh("dlq")
    first, second = put_dead(engine, queue), put_dead(engine, queue)

    assert gw.request("POST", f"/dlq/{first}/retry")[2]["queue"] == queue
    assert gw.request("DELETE", f"/dlq/{second}")[0] == 204
    assert gw.request("GET", f"/jobs/{second}")[0] == 404
    # A second request is another purge (its own request id): the job is gone, 404.
    assert gw.request("DELETE", f"/dlq/{second}")[0] == 404
    claimed = engine.claim("w-test", queue=queue)
    assert claimed is not None and claimed.id == first


def doc_queue(engine: Scripts, job_id: str) -> str | None:
    """Return the queue that holds a job, found as the gateway finds it."""
    return QueueDirectory(engine).locator.locate(job_id)


def test_the_openapi_document_lists_queue_on_enqueue_and_on_the_job(gw: Gunicorn) -> None:
    schemas = gw.request("GET", "/openapi.json")[2]["components"]["schemas"]

    enqueue = schemas["EnqueueRequest"]["properties"]["queue"]
    assert enqueue["pattern"] == "^[A-Za-z0-9_.-]{1,64}$" and enqueue["default"] == "default"
    assert "queue" in schemas["Job"]["required"]


# --- DELETE /queues/<name> -------------------------------------------------------------------


def test_delete_of_an_empty_queue_is_204_and_it_is_no_longer_listed(
    gw: Gunicorn, engine: Scripts, r: redis.Redis
) -> None:
    queue = fresh("gone")
    done = put(engine, queue)
    job = engine.claim("w-test", queue=queue)
    assert job is not None and engine.complete(done, job.token, queue=queue).code is Code.DONE

    status, _, body = gw.request("DELETE", f"/queues/{queue}")

    assert (status, body) == (204, b"")
    names = [q["name"] for q in gw.request("GET", "/queues")[2]["queues"]]
    assert queue not in names
    assert gw.request("GET", f"/jobs/{done}")[0] == 404  # its history went with it
    assert not r.exists(K.for_queue(queue).completed, K.for_queue(queue).events)
    assert gw.request("DELETE", f"/queues/{queue}")[:3:2] == (404, {"error": "queue not found"})


def test_delete_of_a_queue_holding_jobs_is_409_with_the_counts(
    gw: Gunicorn, engine: Scripts
) -> None:
    queue = fresh("busy")
    put(engine, queue), put(engine, queue, delay="1h")

    status, _, body = gw.request("DELETE", f"/queues/{queue}")

    assert status == 409
    assert body["jobs"] == {
        "pending": 1,
        "held": 0,
        "scheduled": 1,
        "retrying": 0,
        "processing": 0,
        "dead": 0,
    }
    assert (body["paused"], body["limited"], body["served_by"]) == (False, False, [])
    assert body["error"] == "queue kept: the queue is not empty: 1 pending, 1 scheduled"


def test_delete_of_a_paused_queue_is_409_saying_so(gw: Gunicorn) -> None:
    queue = fresh("held")
    assert gw.request("POST", f"/queues/{queue}/pause")[0] == 200
    status, _, body = gw.request("DELETE", f"/queues/{queue}")
    assert (status, body["paused"]) == (409, True) and "paused" in body["error"]
    assert gw.request("POST", f"/queues/{queue}/resume")[0] == 200
    assert gw.request("DELETE", f"/queues/{queue}")[0] == 204


def test_delete_with_a_bad_name_is_400_and_of_the_default_queue_409(gw: Gunicorn) -> None:
    assert gw.request("DELETE", "/queues/a%20b")[0] == 400
    status, _, body = gw.request("DELETE", "/queues/default")
    assert status == 409 and "default" in body["error"]


def test_an_enqueue_by_a_process_that_listed_a_queue_before_its_delete_lists_it_again(
    start_gateway: Any, engine: Scripts
) -> None:
    queue = fresh("back")
    # One gunicorn worker: the process that listed the queue is the one that enqueues again.
    with start_gateway(WEB_CONCURRENCY="1") as gw:
        status, _, first = gw.request("POST", "/enqueue", {"type": "t", "queue": queue})
        assert status == 201
        assert engine.cancel(first["id"], queue=queue).job.status is JobState.CANCELED
        assert delete_queue(QueueDirectory(engine), queue) is None  # another process deletes

        status, _, again = gw.request("POST", "/enqueue", {"type": "t", "queue": queue})

        assert status == 201
        assert queue in [q["name"] for q in gw.request("GET", "/queues")[2]["queues"]]
        assert gw.request("GET", f"/jobs/{again['id']}")[2]["status"] == "pending"
