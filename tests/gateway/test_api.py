"""Every other endpoint, the error handlers and authentication, through app.test_client()."""

from __future__ import annotations

import json
import re
import time
from decimal import Decimal
from typing import Any

import jsonschema_rs
import pytest
import redis
from flask.testing import FlaskClient

from gateway.app import AUTH_DISABLED, POOL_SIZE, gateway_client
from gateway.openapi import document
from shared.engine.keys import Keys
from shared.engine.queries import BadCursor, dead_page
from shared.engine.scripts import Scripts
from shared.model.jobs import SCHEDULED_AT_PATTERN, ValidationError, validate_enqueue
from shared.settings.config import Settings
from tests.gateway import helpers
from tests.gateway.conftest import TOKEN, make_app
from tests.support.tools import free_port

UNKNOWN = "00000000-0000-4000-8000-000000000000"


def api_rules(app: Any) -> list[Any]:
    """Return the API's URL rules: not Flask's static files, not the dashboard's pages.

    The dashboard (/ui, blueprint ``ui``) is HTML for browsers, with its own login and CSRF
    checks, not part of the JSON API that /openapi.json describes (tests/gateway/test_ui.py
    covers it).
    """
    return [
        rule
        for rule in app.url_map.iter_rules()
        if rule.endpoint != "static" and not rule.endpoint.startswith("ui.")
    ]


def test_get_job_returns_it(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.enqueue(scripts, payload={"n": 1})
    doc = client.get(f"/jobs/{job_id}").get_json()
    assert doc["id"] == job_id and doc["payload"] == {"n": 1}


def test_get_job_accepts_an_upper_case_id(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.enqueue(scripts)
    assert client.get(f"/jobs/{job_id.upper()}").get_json()["id"] == job_id


def test_get_unknown_job_is_404_job_not_found(client: FlaskClient) -> None:
    response = client.get(f"/jobs/{UNKNOWN}")
    assert response.status_code == 404
    assert response.get_json() == {"error": "job not found"}


@pytest.mark.parametrize(
    "job_id", ["42", "not-a-uuid", UNKNOWN.replace("-4000-", "-1000-"), "%00", "x" * 500]
)
@pytest.mark.parametrize("route", ["GET /jobs/{}", "POST /jobs/{}/cancel", "POST /dlq/{}/retry"])
def test_a_malformed_job_id_is_400(client: FlaskClient, job_id: str, route: str) -> None:
    method, path = route.split()
    response = client.open(path.format(job_id), method=method)
    assert response.status_code == 400
    assert "malformed job id" in response.get_json()["error"]


def test_delete_with_a_malformed_id_is_400(client: FlaskClient) -> None:
    assert client.delete("/dlq/nope").status_code == 400


# --- cancel ------------------------------------------------------------------------------


def test_cancel_a_pending_job_then_again(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.enqueue(scripts)
    first = client.post(f"/jobs/{job_id}/cancel")
    again = client.post(f"/jobs/{job_id}/cancel")
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.get_json()["status"] == again.get_json()["status"] == "canceled"


@pytest.mark.parametrize(
    ("seed", "status"), [(helpers.completed, "completed"), (helpers.dead, "dead")]
)
def test_cancel_a_finished_job_is_409_with_its_status(
    client: FlaskClient, scripts: Scripts, seed: Any, status: str
) -> None:
    response = client.post(f"/jobs/{seed(scripts)}/cancel")
    assert response.status_code == 409
    assert response.get_json()["status"] == status
    assert status in response.get_json()["error"]


def test_cancel_an_unknown_job_is_404(client: FlaskClient) -> None:
    assert client.post(f"/jobs/{UNKNOWN}/cancel").get_json() == {"error": "job not found"}


# --- DLQ ---------------------------------------------------------------------------------


def test_dlq_pages_newest_first_with_a_cursor(client: FlaskClient, scripts: Scripts) -> None:
    ids = [helpers.dead(scripts, now_ms=1_767_225_600_000 + n) for n in range(5)]
    first = client.get("/dlq?limit=2").get_json()
    assert [j["id"] for j in first["jobs"]] == ids[::-1][:2]
    second = client.get(f"/dlq?limit=2&cursor={first['next_cursor']}").get_json()
    third = client.get(f"/dlq?limit=2&cursor={second['next_cursor']}").get_json()
    assert [j["id"] for j in second["jobs"] + third["jobs"]] == ids[::-1][2:]
    assert third["next_cursor"] is None
    assert all(j["status"] == "dead" and j["last_error"] == "boom" for j in first["jobs"])


def test_dlq_defaults_to_100(client: FlaskClient, scripts: Scripts) -> None:
    assert client.get("/dlq").get_json() == {"jobs": [], "next_cursor": None, "every_queue": True}


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=101", "limit=-1", "limit=1.5", "limit=ten", "limit=", "limit=1&limit=2"],
)
def test_a_bad_dlq_limit_is_400(client: FlaskClient, query: str) -> None:
    response = client.get(f"/dlq?{query}")
    assert response.status_code == 400
    assert "limit" in response.get_json()["error"]


@pytest.mark.parametrize("cursor", ["x", "", "12-zz", "1-" + "g" * 36, "1" * 17 + "-" + "a" * 36])
def test_a_bad_dlq_cursor_is_400(client: FlaskClient, cursor: str) -> None:
    response = client.get(f"/dlq?cursor={cursor}")
    assert response.status_code == 400
    assert "cursor" in response.get_json()["error"]


def test_retry_replays_a_dead_job(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.dead(scripts)
    response = client.post(f"/dlq/{job_id}/retry")
    assert response.status_code == 200
    doc = response.get_json()
    assert (doc["status"], doc["attempts"]) == ("pending", 0)
    assert "last_error" not in doc
    assert client.post(f"/dlq/{job_id}/retry").status_code == 409


def test_retry_a_pending_job_is_409_and_unknown_is_404(
    client: FlaskClient, scripts: Scripts
) -> None:
    response = client.post(f"/dlq/{helpers.enqueue(scripts)}/retry")
    assert response.status_code == 409
    assert response.get_json()["status"] == "pending"
    assert client.post(f"/dlq/{UNKNOWN}/retry").status_code == 404


def test_delete_purges_a_dead_job(client: FlaskClient, scripts: Scripts) -> None:
    job_id = helpers.dead(scripts)
    response = client.delete(f"/dlq/{job_id}")
    assert response.status_code == 204
    assert response.data == b""
    assert client.get(f"/jobs/{job_id}").status_code == 404
    assert client.get("/dlq").get_json()["jobs"] == []


def test_delete_refuses_a_live_job_and_an_unknown_one(
    client: FlaskClient, scripts: Scripts
) -> None:
    job_id = helpers.enqueue(scripts)
    assert client.delete(f"/dlq/{job_id}").status_code == 409
    assert client.get(f"/jobs/{job_id}").status_code == 200
    assert client.delete(f"/dlq/{UNKNOWN}").get_json() == {"error": "job not found"}


def test_lifecycle_logs_carry_ids_and_types_only(
    client: FlaskClient, scripts: Scripts, capsys: pytest.CaptureFixture[str]
) -> None:
    canceled = helpers.enqueue(scripts, payload={"secret": "hunter2"})
    client.post(f"/jobs/{canceled}/cancel")
    replayed, purged = helpers.dead(scripts), helpers.dead(scripts)
    client.post(f"/dlq/{replayed}/retry")
    client.delete(f"/dlq/{purged}")
    out = capsys.readouterr().out
    assert "hunter2" not in out
    events = {json.loads(line)["event"]: json.loads(line) for line in out.splitlines()}
    assert events["job_canceled"]["job_id"] == canceled
    assert events["job_replayed"]["job_id"] == replayed
    assert (events["job_purged"]["job_id"], events["job_purged"]["type"]) == (purged, "seed")


# --- ops ---------------------------------------------------------------------------------


def test_stats_counts_jobs_per_state(client: FlaskClient, scripts: Scripts) -> None:
    helpers.enqueue(scripts)
    helpers.enqueue(scripts)
    helpers.dead(scripts)
    doc = client.get("/stats").get_json()
    assert doc["jobs"]["pending"] == 2 and doc["jobs"]["dead"] == 1
    assert doc["total"] == 3
    assert doc["oldest_pending_age_seconds"] >= 0


def test_stats_has_no_age_and_no_workers_when_idle(client: FlaskClient) -> None:
    doc = client.get("/stats").get_json()
    assert doc["oldest_pending_age_seconds"] is None
    assert doc["workers"] == {"hosts": 0, "live": 0, "busy": 0, "quiet": 0}


def test_stats_sums_the_worker_registry(client: FlaskClient, scripts: Scripts) -> None:
    scripts.heartbeat("host-a", {"host": "a", "pid": 1, "workers": 3, "busy": 1}, ttl_ms=10_000)
    scripts.heartbeat("host-b", {"host": "b", "pid": 2, "workers": 2, "busy": 2}, ttl_ms=10_000)
    scripts.heartbeat("host-c", {"workers": 4, "busy": 0}, ttl_ms=10_000, leaving=True)
    assert client.get("/stats").get_json()["workers"] == {
        "hosts": 2,
        "live": 5,
        "busy": 3,
        "quiet": 0,
    }


def test_metrics_exports_counters_and_queue_gauges(client: FlaskClient, scripts: Scripts) -> None:
    client.post("/enqueue", data='{"type": "metered"}')
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    text = response.get_data(as_text=True)
    assert 'taskforge_jobs{queue="default",state="pending"} 1.0' in text
    assert 'taskforge_jobs_enqueued_total{queue="default",type="metered"}' in text
    assert "taskforge_enqueue_request_duration_seconds_count" in text


def test_health_and_ready_answer_ok(client: FlaskClient) -> None:
    assert client.get("/health").get_json() == {"status": "ok", "redis": "ok"}
    assert client.get("/ready").get_json() == {"status": "ready", "redis": "ok"}


# A rule's converter (``<dead_job_id:job_id>``) is not part of its path's name.
CONVERTER = re.compile(r"<\w+:")


def openapi_path(rule: str) -> str:
    """Return the OpenAPI path of a Flask rule: ``/dlq/<job_id>`` -> ``/dlq/{job_id}``."""
    return CONVERTER.sub("<", rule).replace("<", "{").replace(">", "}")


def test_every_route_is_in_the_openapi_document(client: FlaskClient) -> None:
    document = client.get("/openapi.json").get_json()
    assert document["openapi"].startswith("3.")
    app = client.application
    for rule in api_rules(app):
        path = openapi_path(rule.rule)
        assert path in document["paths"], path
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            assert method.lower() in document["paths"][path], (method, path)
    routes = {openapi_path(r.rule) for r in api_rules(app)}
    assert set(document["paths"]) <= routes


def test_every_route_takes_the_query_parameters_its_document_names(client: FlaskClient) -> None:
    doc = document(auth=True)
    app = client.application
    for rule in api_rules(app):
        path = openapi_path(rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            operation = doc["paths"][path][method.lower()]
            params = [resolve(doc, p) for p in operation.get("parameters", [])]
            named = {p["name"] for p in params if p["in"] == "query"}
            assert app.view_functions[rule.endpoint].query == named, (method, path)


def resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Return the node a local $ref points to (or the node itself)."""
    if "$ref" not in node:
        return node
    target: Any = doc
    for part in node["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return target


def test_an_open_gateway_documents_no_security_and_no_401(client: FlaskClient) -> None:
    doc = client.get("/openapi.json").get_json()
    text = json.dumps(doc)
    assert "security" not in text and "bearer" not in text
    assert all(
        "401" not in op["responses"] for item in doc["paths"].values() for op in item.values()
    )


def test_a_locked_gateway_documents_its_bearer_scheme_and_401s(locked: FlaskClient) -> None:
    doc = locked.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).get_json()
    assert doc["security"] == [{"bearer": []}]
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    for path, item in doc["paths"].items():
        for op in item.values():
            is_open = path in ("/health", "/ready")
            assert op.get("security") == ([] if is_open else None), path
            assert ("401" in op["responses"]) is not is_open, path


# The documented pattern of scheduled_at against what validate_enqueue accepts, edge by edge.
SCHEDULED_AT_CASES = [
    "1970-01-01T00:00:00Z",
    "1970-01-01T00:00:00+00:00",
    "1970-01-01T00:00:00-05:00",
    "1970-01-02T00:00:00+05:00",
    "1970-02-01t00:00:00.123456789z",
    "2026-08-19T15:30:00.5+02:00",
    "9998-12-31T23:59:59-23:59",
    "9999-12-31T23:59:59.999+01:00",
    "9999-12-31T23:59:59.999-00:00",
    "1969-12-31T23:59:59.999Z",
    "1970-01-01T00:00:00+05:00",
    "0000-01-01T00:00:00Z",
    "2026-08-19T15:30:00.1234567890Z",
    "2026-12-31T23:59:60Z",
    "9999-12-31T23:59:59-00:01",
    "2026-08-19T15:30:00",
]


def accepts_scheduled_at(text: str) -> bool:
    """Return whether validate_enqueue takes `text` as scheduled_at."""
    try:
        validate_enqueue({"type": "t", "scheduled_at": text})
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize("text", SCHEDULED_AT_CASES)
def test_the_documented_scheduled_at_pattern_is_what_the_server_accepts(text: str) -> None:
    assert bool(re.search(SCHEDULED_AT_PATTERN, text)) == accepts_scheduled_at(text)


# What the document says of delay (its forms, bounds, and never beside scheduled_at) against
# what validate_enqueue does.
AT = "2099-01-01T00:00:00Z"
DELAY_CASES: list[dict[str, Any]] = [
    {"delay": 0},
    {"delay": "0ms"},
    {"delay": 2.5},
    {"delay": "5m"},
    {"delay": "366d"},
    {"delay": 31_622_400},
    {"delay": None},
    {"delay": None, "scheduled_at": AT},
    {"delay": "5m", "scheduled_at": None},
    {"delay": -1},
    {"delay": "-1s"},
    {"delay": "367d"},
    {"delay": 31_622_401},
    {"delay": "1w"},
    {"delay": True},
    {"delay": [5]},
    {"delay": "5m", "scheduled_at": AT},
    {"delay": 0, "scheduled_at": AT},
]


@pytest.mark.parametrize("fields", DELAY_CASES, ids=repr)
def test_the_documented_delay_is_what_the_server_accepts(fields: dict[str, Any]) -> None:
    components = document(False)["components"]
    schema = {"$ref": "#/components/schemas/EnqueueRequest", "components": components}
    body = {"type": "t", **fields}
    try:
        validate_enqueue(body)
    except ValidationError:
        accepted = False
    else:
        accepted = True

    documented = jsonschema_rs.validator_for(schema).is_valid(body) and within_bound(
        components["schemas"]["EnqueueRequest"]["properties"]["delay"], fields.get("delay")
    )
    assert documented == accepted


def within_bound(field: dict[str, Any], value: Any) -> bool:
    """Tell whether a duration text is within its schema's x-maximum-seconds (a document's
    pattern states only a duration's shape: its bound is weighed, not matched)."""
    if not isinstance(value, str):
        return True
    (text,) = [branch for branch in field["anyOf"] if branch.get("type") == "string"]
    number, unit = re.fullmatch(r"([0-9.]+)(ms|s|m|h|d)?", value).groups()  # type: ignore[union-attr]
    scale = {"ms": Decimal("0.001"), "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return Decimal(number) * scale <= text["x-maximum-seconds"]


def test_a_scheduled_at_past_year_9999_in_utc_is_a_400_not_a_job_nobody_can_read(
    client: FlaskClient, scripts: Scripts
) -> None:
    # 9999-12-31T23:59:59-00:01 is 10000-01-01T00:00:59Z: it was stored, then every read of
    # the job (and the enqueue's own answer) failed to format it with a 500.
    body = '{"type": "a", "scheduled_at": "9999-12-31T23:59:59-00:01"}'
    response = client.post("/enqueue", data=body)
    assert response.status_code == 400
    assert response.get_json()["fields"][0]["field"] == "scheduled_at"
    assert helpers.count_jobs(scripts) == 0


@pytest.mark.parametrize(
    "cursor", ["1-" + "a" * 36, "12-zz", "", "x", "1" * 17 + "-" + "a" * 36, "1-" + "a" * 37]
)
def test_the_documented_cursor_pattern_is_what_the_server_accepts(
    cursor: str, scripts: Scripts
) -> None:
    pattern = resolve(document(auth=False), {"$ref": "#/components/parameters/Cursor"})
    try:
        dead_page(scripts.redis, scripts.keys, 1, cursor)
        accepted = True
    except BadCursor:
        accepted = False
    assert bool(re.search(pattern["schema"]["pattern"], cursor)) == accepted


# --- query parameters --------------------------------------------------------------------


ROUTES = [
    ("POST", "/enqueue"),
    ("POST", "/enqueue/batch"),
    ("GET", "/jobs"),
    ("GET", f"/jobs/{UNKNOWN}"),
    ("POST", f"/jobs/{UNKNOWN}/cancel"),
    ("GET", f"/jobs/{UNKNOWN}/history"),
    ("GET", "/dlq"),
    ("POST", f"/dlq/{UNKNOWN}/retry"),
    ("DELETE", f"/dlq/{UNKNOWN}"),
    ("POST", "/dlq/retry"),
    ("POST", "/dlq/purge"),
    ("GET", "/stats"),
    ("GET", "/stats/throughput"),
    ("GET", "/metrics"),
    ("GET", "/health"),
    ("GET", "/ready"),
    ("GET", "/openapi.json"),
    ("GET", "/queues"),
    ("DELETE", "/queues/critical"),
    ("POST", "/queues/critical/pause"),
    ("POST", "/queues/critical/resume"),
    ("GET", "/limits"),
    ("GET", "/queues/critical/limits"),
    ("PUT", "/queues/critical/limits"),
    ("DELETE", "/queues/critical/limits"),
    ("PUT", "/queues/critical/limits/types/pdf"),
    ("DELETE", "/queues/critical/limits/types/pdf"),
    ("GET", "/workers"),
    ("POST", "/workers/host-1/quiet"),
    ("POST", "/workers/host-1/resume"),
    ("GET", "/schedules"),
    ("GET", "/schedules/nightly"),
    ("POST", "/schedules/nightly/pause"),
    ("POST", "/schedules/nightly/resume"),
    ("GET", "/events"),
]


def test_routes_lists_every_route(client: FlaskClient) -> None:
    rules = {
        (method, CONVERTER.sub("<", rule.rule))
        for rule in api_rules(client.application)
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    named = {
        UNKNOWN: "<job_id>",
        "/critical/": "/<name>/",
        "/host-1/": "/<name>/",
        "/types/pdf": "/types/<job_type>",
    }
    named["/schedules/nightly"] = "/schedules/<name>"
    named["/queues/critical"] = "/queues/<name>"

    def rule_of(path: str) -> str:
        for value, placeholder in named.items():
            path = path.replace(value, placeholder)
        return path

    assert {(m, rule_of(p)) for m, p in ROUTES} == rules


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_an_unknown_query_parameter_is_a_400_naming_it(
    client: FlaskClient, scripts: Scripts, method: str, path: str
) -> None:
    body = '{"jobs": [{"type": "a"}]}' if path.endswith("batch") else '{"type": "a"}'
    body = "" if path.endswith("/cancel") else body  # a cancel's body names who asks, if any
    # GET /jobs and GET /events take type (a filter): there the unknown one is another.
    name = "status" if path in ("/jobs", "/events") else "type"
    response = client.open(
        f"{path}?{name}=x", method=method, data=body if method == "POST" else None
    )
    assert response.status_code == 400
    doc = response.get_json()
    assert f"unknown query parameter '{name}'" in doc["error"]
    assert doc["fields"] == [{"field": name, "message": "unknown query parameter"}]
    assert helpers.count_jobs(scripts) == 0  # POST /enqueue's fast path handed it to Flask


def test_the_dlq_names_what_it_takes_and_every_unknown_parameter(client: FlaskClient) -> None:
    response = client.get("/dlq?limit=5&type=x&status=dead")
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert "parameters 'status', 'type'" in error and "takes only cursor, limit" in error


def test_without_a_token_an_unknown_query_parameter_is_still_401(locked: FlaskClient) -> None:
    assert locked.get("/dlq?type=x").status_code == 401


# --- integers written with a fraction of zero ----------------------------------------------


def test_integers_written_as_8_0_are_accepted_on_both_enqueue_paths(
    client: FlaskClient, scripts: Scripts
) -> None:
    one = client.post("/enqueue", data='{"type": "a", "priority": -7595.0, "max_retries": 8.0}')
    assert one.status_code == 201
    assert (one.get_json()["priority"], one.get_json()["max_retries"]) == (-7595, 8)
    stored = client.get(f"/jobs/{one.get_json()['id']}").get_json()
    assert (stored["priority"], stored["max_retries"]) == (-7595, 8)
    batch = client.post("/enqueue/batch", data='{"jobs": [{"type": "a", "priority": 1e2}]}')
    assert batch.status_code == 201 and batch.get_json()["jobs"][0]["priority"] == 100


def test_an_idempotency_key_sees_5_and_5_0_as_the_same_body(client: FlaskClient) -> None:
    key = {"Idempotency-Key": "same-number"}
    first = client.post("/enqueue", data='{"type": "a", "priority": 5}', headers=key)
    again = client.post("/enqueue", data='{"type": "a", "priority": 5.0}', headers=key)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.get_json()["id"] == first.get_json()["id"]


# --- errors ------------------------------------------------------------------------------


def test_an_unknown_path_is_a_json_404(client: FlaskClient) -> None:
    response = client.get("/nowhere")
    assert response.status_code == 404
    assert "no such endpoint" in response.get_json()["error"]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/enqueue", "POST"),
        ("PUT", "/jobs/" + UNKNOWN, "GET, HEAD"),
        ("DELETE", "/stats", "GET, HEAD"),
        ("OPTIONS", "/health", "GET, HEAD"),
        ("GET", "/dlq/" + UNKNOWN, "DELETE"),
    ],
)
def test_a_wrong_method_is_a_json_405_with_allow(
    client: FlaskClient, method: str, path: str, allow: str
) -> None:
    response = client.open(path, method=method)
    assert response.status_code == 405
    assert response.headers["Allow"] == allow
    assert response.get_json()["error"]


def test_head_answers_wherever_get_does(client: FlaskClient) -> None:
    response = client.head("/stats")
    assert response.status_code == 200
    assert response.data == b""


class BrokenScripts(Scripts):
    """Scripts whose enqueue has a bug."""

    def enqueue(self, *args: Any, **kwargs: Any) -> Any:
        raise KeyError("secret internal detail")


def test_a_bug_is_a_500_logged_with_its_traceback_and_not_shown(
    scripts: Scripts, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = BrokenScripts(scripts.redis, scripts.keys, scripts.policy)
    client = make_app(broken).test_client()
    capsys.readouterr()
    response = client.post("/enqueue", data='{"type": "a"}')
    assert response.status_code == 500
    assert "secret internal detail" not in response.get_data(as_text=True)
    assert response.get_json() == {"error": "internal error; it has been logged"}
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    error = next(line for line in logged if line["event"] == "unhandled_error")
    assert "Traceback" in error["exc_info"] and "secret internal detail" in error["exc_info"]


def test_the_gateway_client_is_bounded_and_quick_to_give_up() -> None:
    settings = Settings.from_env({"REDIS_URL": "redis://127.0.0.1:1/0"})
    client = gateway_client(settings)
    pool = client.connection_pool
    assert isinstance(pool, redis.BlockingConnectionPool)
    assert (pool.max_connections, pool.timeout) == (POOL_SIZE, 0.2)
    kwargs = pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.75, 0.5)
    assert kwargs["client_name"].startswith("taskforge-gateway-")
    assert client.get_retry() is not None and client.get_retry().get_retries() == 1


@pytest.fixture
def down_client() -> FlaskClient:
    """Return a gateway whose Redis port has nothing listening."""
    settings = Settings.from_env({"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    scripts = Scripts(gateway_client(settings), Keys())
    return make_app(scripts).test_client()


# Every route that touches Redis (the OpenAPI document does not).
@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[1] != "/openapi.json"])
def test_redis_down_is_503_with_retry_after(
    down_client: FlaskClient, method: str, path: str
) -> None:
    body = '{"jobs": [{"type": "a"}]}' if path.endswith("batch") else '{"type": "a"}'
    body = "" if path.endswith("/cancel") else body  # a cancel's body names who asks, if any
    body = '{"concurrency": 1}' if method == "PUT" else body  # a limit: valid, so 503
    path = f"{path}?state=pending" if path == "/jobs" else path  # without it: 400 first
    started = time.monotonic()
    sent = body if method in ("POST", "PUT") else None
    response = down_client.open(path, method=method, data=sent)
    assert time.monotonic() - started < 1.5
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "unavailable" in response.get_json()["error"]


def test_a_redis_reply_error_that_is_a_bug_stays_500(scripts: Scripts) -> None:
    class Refusing(Scripts):
        def cancel(self, *args: Any, **kwargs: Any) -> Any:
            raise redis.exceptions.ResponseError("WRONGTYPE Operation against a key")

    job_id = helpers.enqueue(scripts, type="t")  # found, so cancel is called
    client = make_app(Refusing(scripts.redis, scripts.keys, scripts.policy)).test_client()
    assert client.post(f"/jobs/{job_id}/cancel").status_code == 500


# --- authentication ----------------------------------------------------------------------


@pytest.fixture
def locked(scripts: Scripts) -> FlaskClient:
    """Return a test client of a gateway that requires TOKEN."""
    return make_app(scripts, TASKFORGE_API_TOKEN=TOKEN).test_client()


@pytest.mark.parametrize(
    "path", ["/stats", "/metrics", "/openapi.json", "/dlq", f"/jobs/{UNKNOWN}", "/nowhere"]
)
def test_without_a_token_every_endpoint_is_401(locked: FlaskClient, path: str) -> None:
    response = locked.get(path)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="taskforge"'
    assert "Authorization: Bearer" in response.get_json()["error"]


@pytest.mark.parametrize(
    "header", [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", f"Basic {TOKEN}", TOKEN]
)
def test_a_wrong_token_is_401(locked: FlaskClient, scripts: Scripts, header: str) -> None:
    response = locked.post("/enqueue", data='{"type": "a"}', headers={"Authorization": header})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith('Bearer realm="taskforge"')
    assert helpers.count_jobs(scripts) == 0


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_right_token_opens_every_endpoint(locked: FlaskClient, scheme: str) -> None:
    headers = {"Authorization": f"{scheme} {TOKEN}"}
    assert locked.post("/enqueue", data='{"type": "a"}', headers=headers).status_code == 201
    assert locked.get("/stats", headers=headers).status_code == 200


def test_health_and_ready_need_no_token(locked: FlaskClient) -> None:
    assert locked.get("/health").status_code == 200
    assert locked.get("/ready").status_code == 200


def test_an_unset_token_leaves_the_gateway_open_and_warns(
    scripts: Scripts, capsys: pytest.CaptureFixture[str]
) -> None:
    client = make_app(scripts).test_client()
    assert client.get("/stats").status_code == 200
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert any(
        line["event"] == "config_warning" and line["warning"] == AUTH_DISABLED for line in lines
    )


def test_a_set_token_does_not_warn(scripts: Scripts, capsys: pytest.CaptureFixture[str]) -> None:
    make_app(scripts, TASKFORGE_API_TOKEN=TOKEN)
    assert AUTH_DISABLED not in capsys.readouterr().out
