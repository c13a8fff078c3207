"""The queues page, the DLQ, listings without a queue, GET /limits and the throughput
of all queues cost what they show, not what is listed (real redis-server: commands counted
with INFO commandstats, scripts' own included)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest
import redis
from flask.testing import FlaskClient

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.read import listing
from tests.gateway.test_queue_pages import commands, list_queues
from tests.gateway.test_throughput_api import run
from tests.gateway.test_ui import post, put, put_dead, text
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader

K = Keys()


def serve(r: redis.Redis, *queues: str) -> None:
    """List `queues` as served, as a workerd host's scheduler does every second."""
    now = int(time.time() * 1000)
    r.zadd(K.served, dict.fromkeys(queues, now))


def limit_queues(r: redis.Redis, names: list[str]) -> None:
    """Give each of `names` a concurrency limit, keyed as Scripts.set_limits keys it."""
    pipe = r.pipeline(transaction=False)
    for at in range(0, len(names), 1000):
        pipe.sadd(K.limited, *names[at : at + 1000])
    for name in names:
        pipe.set(K.for_queue(name).limits, '{"c":5}')
    pipe.execute()


def seed(r: redis.Redis, engine: Scripts, n: int) -> None:
    """List `n` empty queues, 30 busy ones (more than the queues page shows), jobs in the
    served queues, and limits on every listed queue."""
    r.flushall()
    names = list_queues(r, n)
    for i in range(30):
        put(engine, f"hot{i}")
    put_dead(engine, "mail")
    run(engine, "mail")
    put(engine, "mail", delay=60)
    serve(r, "default", "mail")
    limit_queues(r, names)


def cost(r: redis.Redis, call: Callable[[], object]) -> int:
    """Return the Redis commands `call` runs (after one call that may sweep the totals)."""
    call()
    before = commands(r)
    call()
    return commands(r) - before - 1  # the INFO of `before`


def ok(web: FlaskClient, path: str) -> Callable[[], object]:
    def call() -> object:
        response = web.get(path)
        assert response.status_code == 200, text(response)
        return response

    return call


PAGES = [
    "/ui/queues",
    "/ui/live/queues",
    "/ui/queues?q=q0001",
    "/ui/queues?cursor=0",
    "/ui/jobs",
    "/ui/jobs?state=scheduled",
    "/ui/dlq",
    "/jobs?state=pending",
    "/jobs?state=scheduled",
    "/jobs?state=dead&limit=10",
    "/limits",
    "/limits?q=q0001",
    "/stats/throughput",
    "/dlq",
]


@pytest.mark.parametrize("path", PAGES)
def test_a_read_costs_the_same_at_100_and_at_3000_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient, path: str
) -> None:
    found = {}
    for n in (100, 3000):
        seed(r, engine, n)
        found[n] = cost(r, ok(web, path))
    # The old reads took one script (or GET) per queue: 30 times more at 3,000 than at 100.
    assert 0 < found[3000] <= 1.5 * found[100] + 20, found


def test_a_page_after_the_first_costs_the_same_at_100_and_at_3000_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    found = {}
    for n in (100, 3000):
        seed(r, engine, n)
        first = web.get("/jobs?state=pending&limit=10").get_json()
        assert first["every_queue"] is False and first["next_cursor"]
        found[n] = cost(r, ok(web, f"/jobs?state=pending&limit=10&cursor={first['next_cursor']}"))
    assert 0 < found[3000] <= 1.5 * found[100] + 20, found


def test_the_dlq_confirmation_costs_the_same_at_100_and_at_3000_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    found = {}
    for n in (100, 3000):
        seed(r, engine, n)

        def confirm() -> object:
            body = text(post(web, "/ui/dlq/act", "/ui/dlq", op="replay-all"))
            assert "(1 dead there now)" in body, body
            return body

        found[n] = cost(r, confirm)
    assert 0 < found[3000] <= 1.5 * found[100] + 20, found


def test_past_the_cap_a_listing_reads_the_served_busiest_and_soonest_due(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    list_queues(r, listing.EVERY_QUEUE_CAP)
    serve(r, "default", "mail")
    served_job = put(engine, "mail")
    busy_jobs = {put(engine, "busy") for _ in range(2)}
    soon = put(engine, "later", delay=30)
    quiet = put(engine, "q00007", delay=3600)  # listed, not served, not the soonest due...
    for i in range(listing.SOONEST_DUE):  # ...behind this many queues due sooner
        put(engine, f"soon{i}", delay=60)

    doc = web.get("/jobs?state=pending").get_json()
    assert doc["every_queue"] is False
    assert {job["id"] for job in doc["jobs"]} == {served_job, *busy_jobs}
    scheduled = web.get("/jobs?state=scheduled&limit=1000").get_json()
    ids = [job["id"] for job in scheduled["jobs"]]
    assert ids[0] == soon and quiet not in ids and len(ids) == listing.SOONEST_DUE
    # Naming a queue lists any queue.
    one = web.get("/jobs?state=scheduled&queue=q00007").get_json()
    assert [job["id"] for job in one["jobs"]] == [quiet] and one["every_queue"] is True


def test_past_the_cap_pages_list_each_job_of_the_set_once(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    list_queues(r, listing.EVERY_QUEUE_CAP)
    serve(r, "default", "mail")
    wanted = [put(engine, "mail", priority=p) for p in (5, 1, 3)]
    wanted += [put(engine, "busy", priority=p) for p in (4, 2, 2, 0)]
    seen: list[str] = []
    cursor = None
    while True:
        doc = web.get("/jobs?state=pending&limit=2" + (f"&cursor={cursor}" if cursor else ""))
        body = doc.get_json()
        assert body["every_queue"] is False
        seen += [job["id"] for job in body["jobs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(wanted) and len(seen) == len(wanted)
    assert seen[0] == wanted[0]  # claim order across queues: the highest priority first


def test_within_the_cap_a_listing_reads_every_queue(engine: Scripts, web: FlaskClient) -> None:
    ids = {put(engine, f"q{i}") for i in range(5)}
    doc = web.get("/jobs?state=pending").get_json()
    assert doc["every_queue"] is True and {job["id"] for job in doc["jobs"]} == ids


def test_the_dlq_api_filter_costs_the_same_at_100_and_at_3000_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    found = {}
    for n in (100, 3000):
        seed(r, engine, n)

        def purge_none() -> object:  # a type no job has: the walk costs, nothing changes
            response = web.post("/dlq/purge", json={"type": "none", "limit": 10})
            assert response.status_code == 200, text(response)
            return response

        found[n] = cost(r, purge_none)
    assert 0 < found[3000] <= 1.5 * found[100] + 20, found


def test_the_job_pages_say_when_not_every_queue_was_read(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    put(engine, "mail")
    assert 'id="some-queues"' not in text(web.get("/ui/jobs"))
    list_queues(r, listing.EVERY_QUEUE_CAP)
    for path in ("/ui/jobs", "/ui/dlq"):
        assert 'id="some-queues"' in text(web.get(path))
    assert 'id="some-queues"' not in text(web.get("/ui/jobs?queue=q00001"))


def test_the_dlq_acts_on_the_queues_it_lists(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    put_dead(engine, "mail")
    body = text(post(web, "/ui/dlq/act", "/ui/dlq", op="replay-all"))
    assert "every dead job in every queue (1 dead there now)" in body
    list_queues(r, listing.EVERY_QUEUE_CAP)
    serve(r, "default", "mail")
    put_dead(engine, "q00003")  # neither served nor busy: left to ?queue=
    body = text(post(web, "/ui/dlq/act", "/ui/dlq", op="replay-all"))
    assert "in the queues workers serve and the busiest" in body
    assert "(1 dead there now)" in body
    done = post(web, "/ui/dlq/act", "/ui/dlq", op="replay-all", confirm="yes")
    assert done.status_code == 303
    assert engine.stats(["mail", "q00003"])[0].by_state[JobState.DEAD] == 1  # q00003's


def test_limits_are_paged_from_the_limited_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    names = list_queues(r, 300)
    limit_queues(r, names[:250])
    found: list[str] = []
    cursor, pages = None, 0
    while True:
        doc = web.get("/limits?limit=40" + (f"&cursor={cursor}" if cursor else "")).get_json()
        found += [q["queue"] for q in doc["queues"]]
        pages += 1
        cursor = doc["next_cursor"]
        if cursor is None:
            break
    assert set(found) == set(names[:250]) and pages >= 4
    searched = web.get("/limits?q=q0010").get_json()
    assert [q["queue"] for q in searched["queues"]] == [f"q{i:05d}" for i in range(100, 110)]
    assert web.get("/limits?cursor=x").status_code == 400


def test_past_the_cap_the_throughput_of_all_sums_the_served_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    run(engine, "mail")
    doc = web.get("/stats/throughput").get_json()
    assert (doc["every_queue"], doc["completed"]) == (True, 1)
    list_queues(r, 200)
    serve(r, "mail")
    doc = web.get("/stats/throughput").get_json()
    assert (doc["every_queue"], doc["completed"]) == (False, 1)


def test_past_a_page_the_queues_page_shows_the_busiest_and_offers_search(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    list_queues(r, 100)
    for _ in range(3):
        put(engine, "hot")
    put(engine, "warm")
    body = text(web.get("/ui/queues"))
    rows = re.findall(r'<tr data-queue="([^"]+)"', body)
    assert rows[:2] == ["hot", "warm"] and len(rows) <= 50
    assert 'id="shown-queues"' in body and "shown of 103" in body and 'name="q"' in body
    found = text(web.get("/ui/queues?q=q0004"))
    assert re.findall(r'<tr data-queue="([^"]+)"', found) == [f"q{i:05d}" for i in range(40, 50)]
    assert 'data-refresh="/ui/live/queues?q=q0004"' in found
    paged = text(web.get("/ui/queues?cursor=0"))
    assert 'id="next-page"' in paged
    assert web.get("/ui/queues?cursor=x").status_code == 400


def test_few_queues_are_all_on_the_queues_page(engine: Scripts, web: FlaskClient) -> None:
    put(engine, "mail")
    body = text(web.get("/ui/queues"))
    assert re.findall(r'<tr data-queue="([^"]+)"', body) == ["default", "mail"]
    assert 'id="shown-queues"' not in body and 'name="q"' not in body
