"""GET /jobs without ``state``: every state in lifecycle order, each job once across pages,
the cursors both listings share, and a page's Redis commands bounded (counted with INFO
commandstats on the private redis-server, scripts' own commands included)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.read import listing
from shared.read.listing import BadCursor
from shared.read.listing_states import LIFECYCLE, Within, within
from tests.engine.conftest import POLICY, T0, job_id
from tests.engine.listing_support import Seed, expected
from tests.gateway.conftest import make_app
from tests.gateway.test_bounded_reads import cost, ok, serve
from tests.gateway.test_listing_api import page_through, put
from tests.gateway.test_queue_pages import list_queues
from tests.gateway.test_ui import put as enqueue
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader

# Seeded first: each claims its own job, so its queue must hold no other pending job yet.
CLAIMED = (JobState.PROCESSING, JobState.RETRYING, JobState.COMPLETED, JobState.DEAD)
UNCLAIMED = (JobState.SCHEDULED, JobState.CANCELED, JobState.PENDING)


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    return Scripts(r, Keys(), POLICY)


@pytest.fixture
def api(engine: Scripts) -> FlaskClient:
    return make_app(engine).test_client()


def seed_every_state(engine: Scripts, queues: tuple[str, ...]) -> dict[JobState, list[Seed]]:
    """Put two jobs of each state in each queue, each at its own time (pending: its own
    priority); return the seeds by state."""
    seeds: dict[JobState, list[Seed]] = {state: [] for state in LIFECYCLE}
    n = 0
    for group in (CLAIMED, UNCLAIMED):
        for queue in queues:
            for state in group:
                for _ in range(2):
                    n += 1
                    at = T0 + 1_000 * n + (60_000 if state is JobState.SCHEDULED else 0)
                    priority = n if state is JobState.PENDING else 0
                    put(engine, state, job_id(n), at, queue=queue, priority=priority)
                    seeds[state].append(Seed(job_id(n), queue, at, priority, n))
    return seeds


def in_order(seeds: dict[JobState, list[Seed]], queue: str | None = None) -> list[tuple[str, str]]:
    """Return (id, state) of the seeds in the documented order: the lifecycle's, then each
    state's own (tests/engine/listing_support.expected)."""
    return [
        (jid, str(state))
        for state in LIFECYCLE
        for jid in expected(state, [s for s in seeds[state] if queue in (None, s.queue)])
    ]


@pytest.mark.parametrize("queue", [None, "a"])
def test_pages_of_two_list_each_job_once_in_lifecycle_order(
    api: FlaskClient, engine: Scripts, queue: str | None
) -> None:
    seeds = seed_every_state(engine, ("a", "b"))
    query = f"queue={queue}" if queue else "type=t"  # a type every seed has: filter, same jobs
    jobs = page_through(api, query, 2)
    listed = [(job["id"], job["status"]) for job in jobs]
    assert listed == in_order(seeds, queue)
    assert len(listed) == 7 * 2 * (1 if queue else 2)


def test_without_a_filter_too_and_every_page_is_at_most_the_limit(
    api: FlaskClient, engine: Scripts
) -> None:
    seeds = seed_every_state(engine, ("a", "b"))
    cursor, pages = None, []
    while True:
        body = api.get("/jobs?limit=3" + (f"&cursor={cursor}" if cursor else "")).get_json()
        assert len(body["jobs"]) <= 3 and body["every_queue"] is True
        pages.append([(job["id"], job["status"]) for job in body["jobs"]])
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert [pair for page in pages for pair in page] == in_order(seeds)
    assert all(len(page) == 3 for page in pages[:-1])  # nothing moved: every page is full


def test_an_empty_listing_is_one_empty_page(api: FlaskClient) -> None:
    body = api.get("/jobs").get_json()
    assert body == {"jobs": [], "next_cursor": None, "every_queue": True}


@pytest.mark.parametrize("query", ["", "&type=t", "&queue=a"])
def test_a_page_that_ends_the_listing_exactly_gives_no_cursor(
    api: FlaskClient, engine: Scripts, query: str
) -> None:
    put(engine, JobState.DEAD, job_id(3), T0, queue="a")  # claimed to die: before the pending
    put(engine, JobState.PENDING, job_id(1), T0, queue="a")
    put(engine, JobState.PENDING, job_id(2), T0, queue="a")
    whole = api.get(f"/jobs?limit=3{query}").get_json()
    assert [job["id"] for job in whole["jobs"]] == [job_id(1), job_id(2), job_id(3)]
    assert whole["next_cursor"] is None
    # Full at the end of pending: the cursor skips the empty states to the next with a job.
    first = api.get(f"/jobs?limit=2{query}").get_json()
    assert first["next_cursor"] == "dead"
    last = api.get(f"/jobs?limit=1&cursor=dead{query}").get_json()
    assert [job["id"] for job in last["jobs"]] == [job_id(3)] and last["next_cursor"] is None


def test_a_job_that_changes_state_between_pages_shows_in_its_new_state(
    api: FlaskClient, engine: Scripts
) -> None:
    put(engine, JobState.PENDING, job_id(1), T0, queue="a", priority=2)
    put(engine, JobState.PENDING, job_id(2), T0, queue="a", priority=1)
    first = api.get("/jobs?limit=1").get_json()
    assert [job["id"] for job in first["jobs"]] == [job_id(1)]
    claimed = engine.claim("w", queue="a", now_ms=T0)  # job 1 starts: processing lists first
    assert claimed is not None and claimed.id == job_id(1)
    rest = page_through(api, f"cursor={first['next_cursor']}", 5)
    assert [job["id"] for job in rest] == [job_id(2)]  # resumed in pending, after job 1


# --- cursors both listings take -------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "cursor", "resumes"),
    [
        (JobState.DEAD, None, Within(False, None)),
        (JobState.DEAD, f"12:{job_id(1)}", Within(False, f"12:{job_id(1)}")),
        (JobState.DEAD, f"dead:12:{job_id(1)}", Within(False, f"12:{job_id(1)}")),
        (JobState.DEAD, "dead", Within(False, None)),
        (JobState.DEAD, f"pending:-1:{1:016d}:{job_id(1)}", Within(False, None)),
        (JobState.DEAD, "canceled", Within(True, None)),
        (JobState.PROCESSING, f"completed:12:{job_id(1)}", Within(True, None)),
    ],
)
def test_a_one_state_listing_reads_a_place_as_the_same_order_restricted(
    state: JobState, cursor: str | None, resumes: Within
) -> None:
    assert within(state, cursor) == resumes


@pytest.mark.parametrize("cursor", ["", "dead:", "running", f"dead:dead:12:{job_id(1)}", "x"])
def test_a_cursor_no_listing_made_is_refused(cursor: str) -> None:
    with pytest.raises(BadCursor):
        within(JobState.DEAD, cursor)


def test_the_api_takes_either_listings_cursor(api: FlaskClient, engine: Scripts) -> None:
    put(engine, JobState.DEAD, job_id(1), T0, queue="a")
    put(engine, JobState.PENDING, job_id(2), T0, queue="a")
    assert page_through(api, "state=pending&cursor=dead", 5) == []
    assert [job["id"] for job in page_through(api, "state=dead&cursor=pending", 5)] == [job_id(1)]
    everything = api.get("/jobs").get_json()
    assert [job["id"] for job in everything["jobs"]] == [job_id(2), job_id(1)]
    assert api.get("/jobs?cursor=processing").get_json() == everything  # processing's start
    # A bare position, as a one-state listing returns: a place within processing, the first.
    assert api.get(f"/jobs?cursor=12:{job_id(9)}").get_json() == everything
    for bad in ("dead:", "running", "12"):
        error = api.get(f"/jobs?cursor={bad}")
        assert error.status_code == 400 and error.get_json()["fields"][0]["field"] == "cursor"


# --- cost --------------------------------------------------------------------------------------


def seed_small_queues(r: redis.Redis, engine: Scripts, n: int) -> None:
    """List `n` small queues, each with a pending and a scheduled job, and the served queue
    "mail" with jobs in three states."""
    r.flushall()
    for i in range(n):
        enqueue(engine, f"s{i:04d}")
        enqueue(engine, f"s{i:04d}", delay=3600)
    serve(r, "default", "mail")
    for state, n_jobs in ((JobState.COMPLETED, 2), (JobState.DEAD, 2), (JobState.PENDING, 1)):
        for i in range(n_jobs):
            jid = job_id(10_000 + 10 * list(JobState).index(state) + i)
            put(engine, state, jid, T0 + i, queue="mail")


def costs(r: redis.Redis, engine: Scripts, web: FlaskClient, n: int) -> dict[str, int]:
    seed_small_queues(r, engine, n)
    later = web.get("/jobs?limit=2&cursor=pending").get_json()["next_cursor"]
    assert later and later.startswith("pending:")
    paths = {
        "first": "/jobs?limit=2",
        "later": f"/jobs?limit=2&cursor={later}",
        "across states": "/jobs?limit=1000",
        "processing alone": "/jobs?state=processing&limit=2",
        "pending alone": "/jobs?state=pending&limit=2",
    }
    return {name: cost(r, ok(web, path)) for name, path in paths.items()}


def test_a_page_costs_the_same_at_200_and_at_400_small_queues(
    r: redis.Redis, engine: Scripts, api: FlaskClient
) -> None:
    found = {n: costs(r, engine, api, n) for n in (200, 400)}
    body = api.get("/jobs?limit=1000").get_json()
    assert body["every_queue"] is False  # past the cap: a bounded set of queues
    for name in found[200]:
        assert 0 < found[400][name] <= 1.5 * found[200][name] + 20, (name, found)
    # The first page fills in pending: it reads processing and pending, no later state.
    at_400 = found[400]
    assert at_400["first"] <= at_400["processing alone"] + at_400["pending alone"], found
    # Every state, to the end: bounded by the seven one-state reads of a bounded set, whatever
    # the number of queues (one script per queue of the set per state, and one HGETALL a job).
    assert at_400["across states"] <= 8 * at_400["pending alone"] + len(body["jobs"]), found


def test_past_the_cap_every_state_reads_the_same_queues_as_one_state(
    r: redis.Redis, engine: Scripts, api: FlaskClient
) -> None:
    list_queues(r, listing.EVERY_QUEUE_CAP)
    serve(r, "default", "mail")
    mine = {enqueue(engine, "mail"), enqueue(engine, "mail", delay=60)}
    quiet = enqueue(engine, "q00007", delay=3600)  # listed, not served, not the soonest due...
    # ...behind this many queues due sooner
    soon = {enqueue(engine, f"soon{i}", delay=120) for i in range(listing.SOONEST_DUE)}
    every: list[dict[str, Any]] = page_through(api, "type=seed", 10)
    one_by_one = [job for state in LIFECYCLE for job in page_through(api, f"state={state}", 10)]
    assert every == one_by_one
    ids = {job["id"] for job in every}
    assert mine <= ids and len(ids & soon) >= listing.SOONEST_DUE - 1 and quiet not in ids
    named = page_through(api, "queue=q00007", 10)
    assert [job["id"] for job in named] == [quiet]
