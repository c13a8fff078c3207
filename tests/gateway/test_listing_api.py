"""GET /jobs through the Flask app on the private redis-server: pages of every state, the
filters, each 400, the token, and the OpenAPI entry (the fuzz run is test_schemathesis.py)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from gateway.openapi import document
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import tagged_uuid
from shared.model.jobs import JobState
from shared.read import listing
from shared.read.listing import BadCursor, parse_cursor
from shared.read.listing_states import parse_place
from tests.engine.conftest import POLICY, T0, job_id
from tests.engine.listing_support import DEFAULT, seed
from tests.gateway.conftest import TOKEN, make_app
from tests.gateway.test_api import resolve

STATES = [str(state) for state in JobState]


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return the engine on the emptied private server."""
    return Scripts(r, Keys(), POLICY)


@pytest.fixture
def api(engine: Scripts) -> FlaskClient:
    """Return a test client of an open gateway on the private server."""
    return make_app(engine).test_client()


def put(engine: Scripts, state: JobState, jid: str, at: int, **fields: Any) -> None:
    """Seed a job in `state` in a listed queue (the gateway lists queues before enqueuing)."""
    engine.register_queue(fields.get("queue", DEFAULT))
    seed(engine, state, jid, at, **fields)


def page_through(api: FlaskClient, query: str, limit: int) -> list[dict[str, Any]]:
    """Follow next_cursor from the first page to the last; return every job listed."""
    jobs: list[dict[str, Any]] = []
    cursor = None
    for _ in range(1_000):
        extra = f"&cursor={cursor}" if cursor else ""
        response = api.get(f"/jobs?{query}&limit={limit}{extra}")
        assert response.status_code == 200, response.get_json()
        body = response.get_json()
        assert set(body) == {"jobs", "next_cursor", "every_queue"}
        jobs += body["jobs"]
        cursor = body["next_cursor"]
        if cursor is None:
            return jobs
    raise AssertionError("the listing did not end")


@pytest.mark.parametrize("state", list(JobState))
def test_every_state_pages_through_each_job_once_as_get_shows_it(
    api: FlaskClient, engine: Scripts, state: JobState
) -> None:
    at = T0 + 60_000 if state is JobState.SCHEDULED else T0
    # Ids that name their queue (as the gateway makes them), so GET /jobs/<id> finds each.
    ids = [tagged_uuid(("a", "b")[n % 2], uuid.UUID(job_id(n)).bytes) for n in range(7)]
    for n in range(7):
        put(engine, state, ids[n], at + n % 3, queue=("a", "b")[n % 2])

    jobs = page_through(api, f"state={state}", 2)

    assert sorted(job["id"] for job in jobs) == sorted(ids)
    for job in jobs:
        assert job == api.get(f"/jobs/{job['id']}").get_json()
        assert job["status"] == str(state) and job["queue"] == ("a", "b")[int(job["id"][-1]) % 2]


def test_newest_first_and_claim_order_over_http(api: FlaskClient, engine: Scripts) -> None:
    for n, priority in enumerate((0, 5, 0, 5)):
        put(engine, JobState.PENDING, job_id(n), T0, priority=priority)
        put(engine, JobState.COMPLETED, job_id(10 + n), T0 + n, queue="done")

    pending = page_through(api, "state=pending", 3)
    completed = page_through(api, "state=completed", 3)

    assert [j["id"] for j in pending] == [job_id(1), job_id(3), job_id(0), job_id(2)]
    assert [j["id"] for j in completed] == [job_id(13), job_id(12), job_id(11), job_id(10)]


def test_queue_and_type_filters(api: FlaskClient, engine: Scripts) -> None:
    for n in range(12):
        queue, job_type = ("a", "b", "c")[n % 3], ("mail", "pdf")[n % 2]
        put(engine, JobState.DEAD, job_id(n), T0 + n, queue=queue, job_type=job_type)

    in_b = page_through(api, "state=dead&queue=b", 2)
    mail = page_through(api, "state=dead&type=mail", 2)
    both = page_through(api, "state=dead&queue=a&type=pdf", 1)

    assert [j["id"] for j in in_b] == [job_id(n) for n in (10, 7, 4, 1)]
    assert [j["id"] for j in mail] == [job_id(n) for n in (10, 8, 6, 4, 2, 0)]
    assert [j["id"] for j in both] == [job_id(n) for n in (9, 3)]
    assert page_through(api, "state=dead&queue=empty", 5) == []


def test_limit_defaults_to_50_and_takes_1_to_1000(api: FlaskClient, engine: Scripts) -> None:
    for n in range(60):
        put(engine, JobState.CANCELED, job_id(n), T0 + n)

    first = api.get("/jobs?state=canceled").get_json()
    everything = api.get("/jobs?state=canceled&limit=1000").get_json()
    one = api.get("/jobs?state=canceled&limit=1").get_json()

    assert len(first["jobs"]) == listing.DEFAULT_LIMIT and first["next_cursor"] is not None
    assert len(everything["jobs"]) == 60 and everything["next_cursor"] is None
    assert [j["id"] for j in one["jobs"]] == [job_id(59)]
    assert parse_cursor(one["next_cursor"]).job_id == job_id(59)


def test_head_answers_where_get_does(api: FlaskClient) -> None:
    assert api.head("/jobs?state=pending").status_code == 200


# --- 400s ----------------------------------------------------------------------------------


def error_of(api: FlaskClient, query: str) -> dict[str, Any]:
    response = api.get(f"/jobs?{query}")
    assert response.status_code == 400, query
    return response.get_json()


def test_an_unknown_state_is_a_400_naming_every_state(api: FlaskClient) -> None:
    for query in ("state=", "state=running", "state=PENDING"):
        error = error_of(api, query)
        assert error["fields"][0]["field"] == "state"
        assert all(state in error["error"] for state in STATES), error


@pytest.mark.parametrize("limit", ["0", "1001", "abc", "1.5", "+5", " 5", "", "-1", "٥", "10000"])
def test_a_bad_limit_is_a_400(api: FlaskClient, limit: str) -> None:
    error = error_of(api, f"state=dead&limit={limit}")
    assert "limit must be an integer from 1 to 1000" in error["error"]


@pytest.mark.parametrize(
    "cursor", ["", "x", "12", f"12:{job_id(1)}x", f"12:1:{job_id(1)}", "%00", f"1.5:{job_id(1)}"]
)
def test_a_bad_cursor_is_a_400_saying_so(api: FlaskClient, cursor: str) -> None:
    error = error_of(api, f"state=dead&cursor={cursor}")
    assert error["error"].startswith("bad cursor")
    assert error["fields"][0]["field"] == "cursor"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=dead&queue=", "queue"),
        ("state=dead&queue=a:b", "queue"),
        ("state=dead&queue=" + "q" * 65, "queue"),
        ("state=dead&type=", "type"),
        ("state=dead&type=a b", "type"),
        ("state=dead&state=pending", "state"),
        ("state=dead&limit=1&limit=2", "limit"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(api: FlaskClient, query: str, field: str) -> None:
    error = error_of(api, query)
    assert error["fields"][0]["field"] == field
    assert error["error"].startswith(field)


def test_an_unknown_parameter_is_a_400_naming_each(api: FlaskClient) -> None:
    error = error_of(api, "state=dead&status=dead&sort=new")
    assert "parameters 'sort', 'status'" in error["error"]
    assert "takes only cursor, limit, queue, state, type" in error["error"]


# --- the token and the document ------------------------------------------------------------


def test_with_a_token_the_listing_needs_it(engine: Scripts) -> None:
    locked = make_app(engine, TASKFORGE_API_TOKEN=TOKEN).test_client()
    assert locked.get("/jobs?state=pending").status_code == 401
    assert locked.get("/jobs?state=nonsense").status_code == 401  # before any 400
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert locked.get("/jobs?state=pending", headers=headers).status_code == 200


def test_the_document_describes_the_listing() -> None:
    doc = document(auth=True)
    operation = doc["paths"]["/jobs"]["get"]
    params = {p["name"]: p for p in (resolve(doc, ref) for ref in operation["parameters"])}

    assert operation["operationId"] == "listJobs"
    assert set(params) == {"state", "queue", "type", "limit", "cursor"}
    assert not params["state"].get("required") and params["state"]["schema"]["enum"] == STATES
    assert params["limit"]["schema"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "default": 50,
    }
    assert set(operation["responses"]) == {"200", "400", "401", "429", "503"}
    page = resolve(doc, operation["responses"]["200"]["content"]["application/json"]["schema"])
    assert page["required"] == ["jobs", "next_cursor", "every_queue"]


@pytest.mark.parametrize(
    "cursor",
    [
        f"1767225600000:{job_id(1)}",
        f"-5:{5:016d}:{job_id(1)}",
        f"-0:{job_id(1)}",
        f"{'9' * 16}:{job_id(1)}",
        f"{'9' * 17}:{job_id(1)}",
        f"12:{job_id(1).replace('-4000-', '-1000-')}",
        f"12:{5:015d}:{job_id(1)}",
        "٣:" + job_id(1),
        f"12:{job_id(1)}",
        f"1e3:{job_id(1)}",
        "dead",
        f"dead:12:{job_id(1)}",
        f"pending:-5:{5:016d}:{job_id(1)}",
        "dead:",
        "running",
        f"running:12:{job_id(1)}",
        f"dead:dead:12:{job_id(1)}",
        f"Dead:12:{job_id(1)}",
    ],
)
def test_the_documented_cursor_pattern_is_what_the_server_accepts(cursor: str) -> None:
    doc = document(auth=False)
    pattern = resolve(doc, {"$ref": "#/components/parameters/ListCursor"})["schema"]["pattern"]
    try:
        parse_place(cursor)
        accepted = True
    except BadCursor:
        accepted = False
    assert bool(re.search(pattern, cursor)) == accepted
