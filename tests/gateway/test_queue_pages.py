"""The overview, /stats, GET /queues and /metrics cost what they show, not what is
listed (real redis-server: commands counted with INFO commandstats, scripts' own included)."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
import redis
from flask.testing import FlaskClient

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.read import state_gauges, summary
from shared.read.queue_view import listed_count, scan_names
from tests.gateway.test_ui import put, text
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader

K = Keys()


def list_queues(r: redis.Redis, n: int) -> list[str]:
    """List `n` empty queues besides the default one (as an enqueue would list them)."""
    names = [f"q{i:05d}" for i in range(n)]
    for at in range(0, n, 1000):
        r.sadd(K.queues, *names[at : at + 1000])
    return names


def commands(r: redis.Redis) -> int:
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


def cost(r: redis.Redis, web: FlaskClient, path: str) -> int:
    """Return the Redis commands one request of `path` runs (after one that may sweep)."""
    assert web.get(path).status_code == 200
    before = commands(r)
    assert web.get(path).status_code == 200
    return commands(r) - before - 1  # the INFO of `before`


@pytest.mark.parametrize("path", ["/ui", "/ui/live/overview", "/stats", "/queues", "/metrics"])
def test_a_page_costs_the_same_at_100_and_at_3000_queues(
    r: redis.Redis, engine: Scripts, web: FlaskClient, path: str
) -> None:
    found = {}
    for n in (100, 3000):
        r.flushall()
        list_queues(r, n)
        for i in range(30):  # more busy queues than the overview shows
            put(engine, f"hot{i}")
        found[n] = cost(r, web, path)
    # The old pages read every queue: 30 times more commands at 3,000 than at 100.
    assert 0 < found[3000] <= 1.5 * found[100] + 20, found


@pytest.mark.parametrize(("path", "shown"), [("/ui", 25), ("/stats?limit=20", 20)])
def test_past_a_page_a_page_costs_what_a_full_page_of_few_queues_costs(
    r: redis.Redis, engine: Scripts, web: FlaskClient, path: str, shown: int
) -> None:
    found = {}
    for n in (shown - 1, 2000):  # with the default queue: exactly one full page, then many
        r.flushall()
        list_queues(r, n)
        for i in range(min(n, 30)):
            put(engine, f"q{i:05d}")
        assert listed_count(engine) == n + 1
        found[n] = cost(r, web, path)
    assert 0 < found[2000] <= 1.5 * found[shown - 1] + 20, found


def test_the_overview_shows_every_queue_and_live_totals_while_they_fit(
    engine: Scripts, web: FlaskClient
) -> None:
    put(engine, "mail")
    put(engine, "pdf")
    body = text(web.get("/ui"))
    assert 'data-queue="mail"' in body and 'data-queue="pdf"' in body
    assert "totals-as-of" not in body and 'name="q"' not in body  # no search, exact totals
    assert re.search(r'data-total-state="pending">2<', body)


def test_past_a_page_the_overview_shows_the_busiest_and_offers_search(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    list_queues(r, 100)
    for _ in range(3):
        put(engine, "hot")
    put(engine, "warm")
    body = text(web.get("/ui"))
    rows = re.findall(r'<tr data-queue="([^"]+)"', body)
    assert rows[:2] == ["hot", "warm"] and len(rows) <= 25
    assert 'id="totals-as-of"' in body and "Totals of all 103 queues" in body
    assert re.search(r'data-total-state="pending">4<', body)  # from the sweep
    assert 'name="q"' in body
    found = text(web.get("/ui?q=q0004"))
    assert re.findall(r'<tr data-queue="([^"]+)"', found) == [f"q{i:05d}" for i in range(40, 50)]
    assert 'data-refresh="/ui/live/overview?q=q0004"' in found
    assert web.get("/ui?cursor=x").status_code == 400


def page_through(web: FlaskClient, path: str, limit: int) -> tuple[list[str], int]:
    """Follow next_cursor from the first page to the last; return the names and the pages."""
    names: list[str] = []
    cursor, pages = None, 0
    while True:
        query = f"?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        doc = web.get(path + query).get_json()
        batch = doc["queues"] if isinstance(doc["queues"], list) else list(doc["queues"])
        names += [q["name"] if isinstance(q, dict) else q for q in batch]
        pages += 1
        cursor = doc["next_cursor"]
        if cursor is None:
            return names, pages


@pytest.mark.parametrize("path", ["/stats", "/queues"])
def test_pages_of_queues_cover_every_queue(
    r: redis.Redis, engine: Scripts, web: FlaskClient, path: str
) -> None:
    names = list_queues(r, 300)
    put(engine, "hot")
    names, pages = page_through(web, path, 40)
    assert set(names) == {f"q{i:05d}" for i in range(300)} | {"default", "hot"}
    assert pages >= 5
    doc = web.get(path + "?limit=40").get_json()
    assert doc["queue_count"] == 302 and doc["next_cursor"] is not None
    if path == "/stats":
        assert doc["total"] == 1 and doc["totals_age_seconds"] is not None


def test_few_queues_are_one_page_with_live_totals(engine: Scripts, web: FlaskClient) -> None:
    put(engine, "mail")
    doc = web.get("/stats").get_json()
    assert doc["next_cursor"] is None and doc["totals_age_seconds"] is None
    assert set(doc["queues"]) == {"default", "mail"} and doc["total"] == 1
    assert doc["queue_count"] == 2
    searched = web.get("/queues?q=ai").get_json()
    assert [q["name"] for q in searched["queues"]] == ["mail"]


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=1001", "limit=x", "cursor=abc", "q=", "limit=5&limit=6"]
)
def test_a_bad_page_query_is_a_400_naming_it(web: FlaskClient, query: str) -> None:
    response = web.get(f"/stats?{query}")
    assert response.status_code == 400
    name = query.split("=")[0]
    assert response.get_json()["fields"][0]["field"] == name


def test_a_sweep_sums_every_queue_and_ranks_the_busiest(r: redis.Redis, engine: Scripts) -> None:
    list_queues(r, 30)
    for _ in range(2):
        put(engine, "b")
    put(engine, "a")
    found = summary.sweep(engine, chunk=7)
    assert found.queues == 33 and found.by_state[JobState.PENDING] == 3
    assert found.busiest == [("b", 2), ("a", 1)]
    assert summary.read(engine) == found


def make_stale(r: redis.Redis, engine: Scripts) -> None:
    """Move the stored summary's sweep back past MAX_AGE_MS."""
    found = summary.read(engine)
    assert found is not None
    old = dataclasses.replace(found, computed_at_ms=found.computed_at_ms - summary.MAX_AGE_MS)
    r.set(K.summary, old.to_json())


def test_a_stale_summary_is_swept_again_by_one_process(r: redis.Redis, engine: Scripts) -> None:
    summary.sweep(engine)
    put(engine, "a")
    assert summary.current(engine).by_state[JobState.PENDING] == 0  # fresh: not swept
    make_stale(r, engine)
    ran: list[object] = []
    r.set(K.summary_lock, "1")  # another process sweeps now: this one does not
    assert summary.current(engine, run=ran.append) is not None and not ran
    r.delete(K.summary_lock)
    again = summary.current(engine, run=summary.in_place)
    assert again is not None and again.by_state[JobState.PENDING] == 1
    assert not r.exists(K.summary_lock)  # released once swept


def test_sweeps_are_spaced_by_their_own_duration(r: redis.Redis, engine: Scripts) -> None:
    slow = dataclasses.replace(summary.sweep(engine), took_ms=summary.MAX_AGE_MS)
    r.set(K.summary, slow.to_json())
    make_stale(r, engine)  # 30 s old: stale for a quick sweep, not for a 30 s one
    ran: list[object] = []
    assert summary.current(engine, run=ran.append) is not None and not ran


def test_listed_count_and_scan_names(r: redis.Redis, engine: Scripts) -> None:
    assert listed_count(engine) == 1  # the default queue, listed before its first job
    list_queues(r, 10)
    assert listed_count(engine) == 11
    names, cursor = scan_names(engine, None, 100, "q0000")
    assert names == [f"q{i:05d}" for i in range(10)] and cursor is None


def series(body: bytes, name: str) -> list[str]:
    return [line for line in body.decode().splitlines() if line.startswith(name + "{")]


def test_metrics_label_only_served_queues_past_the_cap(r: redis.Redis, engine: Scripts) -> None:
    list_queues(r, 500)
    put(engine, "hot")
    now = int(time.time() * 1000)
    r.zadd(K.workers, {"h-1": now})
    r.hset(
        K.worker("h-1"), mapping={"host": "h", "pid": 1, "plan": "default,hot", "last_seen": now}
    )
    body, _ = state_gauges.scrape(engine)
    queues = {re.search(r'queue="([^"]+)"', s).group(1) for s in series(body, "taskforge_jobs")}
    assert queues == {"default", "hot"}
    assert "taskforge_queues_listed 502.0" in body.decode()
    assert 'taskforge_jobs_all_queues{state="pending"} 1.0' in body.decode()


def test_metrics_label_every_queue_while_few(engine: Scripts) -> None:
    put(engine, "mail")
    body, _ = state_gauges.scrape(engine)
    queues = {re.search(r'queue="([^"]+)"', s).group(1) for s in series(body, "taskforge_jobs")}
    assert queues == {"default", "mail"}
    assert "taskforge_jobs_all_queues_age_seconds 0.0" in body.decode()
