"""Enqueue warnings from the fleet registry, and unserved queues in GET /queues and the
dashboard: the real gateway app on a real redis-server, hosts registered by heartbeat.lua
as workerd's supervisors register them."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import pytest
import redis
from flask.testing import FlaskClient

from gateway.context import Gateway
from gateway.fleet_view import FleetView
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.read.fleet import Fleet, read_fleet
from tests.gateway.test_ui import text
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader

TYPES = "generate_pdf,send_email"


def register(engine: Scripts, name: str, queues: str, types: str = TYPES) -> None:
    """Write a workerd host's registry record, as its supervisor's heartbeat does."""
    fields: dict[str, str | int] = {"host": "h", "pid": 1, "queues": queues, "types": types}
    engine.heartbeat(name, fields, ttl_ms=60_000)


def view_of(web: FlaskClient) -> FleetView:
    """Return the app's fleet view, its thread stopped and the registry read once now (no
    thread may run commands while a test counts them)."""
    fleet = web.application.extensions[Gateway.EXTENSION].fleet
    fleet.stop()
    fleet.refresh()
    return fleet


def enqueue(web: FlaskClient, job_type: str, queue: str = "default", status: int = 201) -> dict:
    response = web.post("/enqueue", json={"type": job_type, "queue": queue})
    assert response.status_code == status, text(response)
    return response.get_json()


def commands(r: redis.Redis) -> Counter[str]:
    stats = r.info("commandstats")
    return Counter({name.removeprefix("cmdstat_"): v["calls"] for name, v in stats.items()})


# --- the warnings, from a fleet -------------------------------------------------------------


def test_a_fleet_warns_of_no_host_an_unserved_queue_and_an_unknown_type() -> None:
    fleet = Fleet(2, {"default": frozenset({"generate_pdf", "send_email"}), "mail": None})
    assert fleet.warnings("default", "generate_pdf") == []
    assert fleet.warnings("mail", "anything") == []  # an older host did not say its types
    (unserved,) = fleet.warnings("reports", "generate_pdf")
    assert "no workerd host serves queue 'reports'" in unserved
    assert "(queues served: default, mail)" in unserved
    (typo,) = fleet.warnings("default", "genrate_pdf")
    assert "runs job type 'genrate_pdf' (did you mean 'generate_pdf'?)" in typo
    assert "NoHandler" in typo and "dead-lettered" in typo
    assert typo.endswith("types run there: generate_pdf, send_email")
    (nobody,) = Fleet(0).warnings("default", "t")
    assert "no workerd host is registered" in nobody


def test_a_long_list_of_types_is_cut_short() -> None:
    types = frozenset(f"type{i:02}" for i in range(30))
    (warning,) = Fleet(1, {"default": types}).warnings("default", "zzz")
    assert warning.endswith("type07, …") and "type08" not in warning


def test_read_fleet_joins_the_hosts_and_leaves_out_an_expired_record(
    r: redis.Redis, engine: Scripts
) -> None:
    register(engine, "a-1", "default,mail", "send_email")
    register(engine, "b-2", "default", "generate_pdf")
    register(engine, "c-3", "video", "encode")
    r.delete(Keys().worker("c-3"))  # expired: its name is still in the registry's zset
    fleet = read_fleet(r, Keys())
    assert fleet.hosts == 2
    assert fleet.types_by_queue == {
        "default": frozenset({"send_email", "generate_pdf"}),
        "mail": frozenset({"send_email"}),
    }


# --- the cached view -------------------------------------------------------------------------


def test_the_view_gives_no_warnings_before_its_first_read_nor_once_it_is_old() -> None:
    release = threading.Event()

    def read() -> Fleet:
        assert release.wait(10), "the test never released the read"
        return Fleet(0)

    now = [100.0]
    view = FleetView(read, max_age=10.0, clock=lambda: now[0])
    try:
        assert view.warnings("default", "t") == []  # started its thread; its read is blocked
        release.set()
        view.stop()  # joins the thread: its read is in
        assert view.warnings("default", "t") != []
        now[0] += 10.5  # Redis unreadable since: the view is too old to trust
        assert view.warnings("default", "t") == []
    finally:
        release.set()
        view.stop()


def test_a_failing_read_leaves_the_thread_running_and_gives_no_warnings() -> None:
    calls = []
    second = threading.Event()

    def read() -> Fleet:
        calls.append(1)
        if len(calls) >= 2:
            second.set()
        raise redis.ConnectionError("down")

    view = FleetView(read, every=0.01)
    try:
        assert view.current() is None
        assert second.wait(10), "the thread stopped after a failed read"
        assert view.current() is None
    finally:
        view.stop()


def test_a_forked_child_starts_its_own_refresher_and_trusts_nothing_it_inherited() -> None:
    parent = os.getpid()
    read_in_parent = threading.Event()
    child_may_read = threading.Event()  # a child's read waits for this (its own copy)
    readers: list[int] = []

    def read() -> Fleet:
        if os.getpid() == parent:
            read_in_parent.set()
        else:
            assert child_may_read.wait(10)
        readers.append(os.getpid())
        return Fleet(0)

    view = FleetView(read, every=0.01)
    try:
        view.start()
        assert read_in_parent.wait(10) and view.current() is not None
        child = os.fork()
        if child == 0:
            code = 1
            try:
                # The parent's view came over with the fork; its thread did not.
                if view.current() is None:
                    child_may_read.set()
                    deadline = time.monotonic() + 10
                    while view.current() is None and time.monotonic() < deadline:
                        time.sleep(0.01)
                    code = 0 if view.current() is not None and os.getpid() in readers else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        view.stop()


# --- the API ---------------------------------------------------------------------------------


def test_an_enqueue_into_a_queue_no_host_serves_is_created_with_a_warning(
    engine: Scripts, web: FlaskClient
) -> None:
    register(engine, "a-1", "default")
    view_of(web)
    doc = enqueue(web, "generate_pdf", queue="reports")
    assert doc["status"] == "pending"
    assert doc["warnings"] == [
        "no workerd host serves queue 'reports'; the job waits until one does "
        "(queues served: default)"
    ]


def test_an_unknown_type_in_a_served_queue_is_warned_of(engine: Scripts, web: FlaskClient) -> None:
    register(engine, "a-1", "default")
    view_of(web)
    (warning,) = enqueue(web, "genrate_pdf")["warnings"]
    assert warning.startswith(
        "no workerd host serving queue 'default' runs job type 'genrate_pdf' "
        "(did you mean 'generate_pdf'?)"
    )


def test_a_served_queue_and_a_known_type_give_no_warnings(
    engine: Scripts, web: FlaskClient
) -> None:
    register(engine, "a-1", "default")
    register(engine, "b-2", "mail", "send_email")
    view_of(web)
    assert "warnings" not in enqueue(web, "generate_pdf")
    assert "warnings" not in enqueue(web, "send_email", queue="mail")
    # A repeat with the same Idempotency-Key (200) is told alike.
    headers = {"Idempotency-Key": "k1"}
    for status in (201, 200):
        body = {"type": "nope", "queue": "mail"}
        response = web.post("/enqueue", json=body, headers=headers)
        assert response.status_code == status and len(response.get_json()["warnings"]) == 1


def test_with_no_host_registered_the_warning_says_so(web: FlaskClient) -> None:
    view_of(web)
    (warning,) = enqueue(web, "t")["warnings"]
    assert warning.startswith("no workerd host is registered")


def test_a_batch_warns_per_job(engine: Scripts, web: FlaskClient) -> None:
    register(engine, "a-1", "default")
    view_of(web)
    jobs = [
        {"type": "generate_pdf"},
        {"type": "genrate_pdf"},
        {"type": "generate_pdf", "queue": "reports"},
    ]
    response = web.post("/enqueue/batch", json={"jobs": jobs})
    assert response.status_code == 201, text(response)
    ok, typo, unserved = response.get_json()["jobs"]
    assert "warnings" not in ok
    assert "did you mean 'generate_pdf'?" in typo["warnings"][0]
    assert "no workerd host serves queue 'reports'" in unserved["warnings"][0]


def test_an_enqueue_with_warnings_runs_no_more_redis_commands(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    register(engine, "a-1", "default")
    view = view_of(web)
    enqueue(web, "first")  # lists the queue and loads what a first enqueue loads
    spent = []
    for job_type, warned in (("generate_pdf", False), ("genrate_pdf", True)):
        before = commands(r)
        doc = enqueue(web, job_type)
        spent.append(commands(r) - before - Counter({"info": 1}))
        assert ("warnings" in doc) is warned
    # And the same with no view at all (never read: no warnings).
    view._last = None
    before = commands(r)
    assert "warnings" not in enqueue(web, "genrate_pdf")
    spent.append(commands(r) - before - Counter({"info": 1}))
    assert spent[0] == spent[1] == spent[2], spent
    assert "zrange" not in spent[1]  # the registry's names: read by the view's thread only


def test_a_batch_with_warnings_runs_no_more_redis_commands(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    register(engine, "a-1", "default")
    view = view_of(web)
    spent = []
    for job_type, fleet in (("first", view._last), ("genrate_pdf", view._last), ("x", None)):
        view._last = fleet
        before = commands(r)
        response = web.post("/enqueue/batch", json={"jobs": [{"type": job_type}] * 3})
        spent.append(commands(r) - before - Counter({"info": 1}))
        assert response.status_code == 201 and all(
            ("warnings" in job) is (fleet is not None) for job in response.get_json()["jobs"]
        )
    assert spent[1] == spent[2], spent


# --- which queues are served ---------------------------------------------------------------


@pytest.fixture
def two_queues(engine: Scripts, web: FlaskClient) -> None:
    """A host serving default; a job in reports, which no host serves."""
    register(engine, "a-1", "default")
    view_of(web)
    enqueue(web, "generate_pdf")
    enqueue(web, "generate_pdf", queue="reports")


@pytest.mark.usefixtures("two_queues")
def test_get_queues_says_which_queues_a_live_host_serves(
    r: redis.Redis, engine: Scripts, web: FlaskClient
) -> None:
    doc = web.get("/queues").get_json()
    assert {q["name"]: q["served"] for q in doc["queues"]} == {"default": True, "reports": False}
    paused = web.post("/queues/reports/pause").get_json()
    assert paused["served"] is False and paused["paused"] is True
    engine.heartbeat("a-1", {}, ttl_ms=1, leaving=True)  # the host leaves: served no more
    doc = web.get("/queues").get_json()
    assert {q["name"]: q["served"] for q in doc["queues"]} == {"default": False, "reports": False}


@pytest.mark.usefixtures("two_queues")
@pytest.mark.parametrize("page", ["/ui/queues", "/ui"])
def test_the_dashboard_marks_an_unserved_queue(web: FlaskClient, page: str) -> None:
    html = text(web.get(page))
    rows = {
        name: html.split(f'<a href="/ui/jobs?queue={name}">', 1)[1].split("</tr>", 1)[0]
        for name in ("default", "reports")
    }
    assert 'class="tag unserved"' in rows["reports"]
    assert "unserved" not in rows["default"]
