"""GET /jobs/<id>?wait= through Flask's test client on the private redis-server.

Jobs move through the real scripts (claim, complete, fail, cancel, purge), so the events the
waits ride are the ones the transitions write. Each wait runs on a thread of its own and every
join is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from flask import Flask

from gateway import events_api as gateway_events
from gateway import waiting
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.gateway import helpers
from tests.support.gateway_app import app_without_fleet_thread
from tests.support.tools import wait_until

K = Keys()
DEADLINE = 5.0  # seconds any one expected answer may take
PROMPT = 2.0  # seconds: a wait ends this soon after its job finishes (events on); generous for
# a loaded 2-core CI machine, and still far below the 30-s waits a missed wake-up would sit out


def make_app(r: redis.Redis, **env: str) -> Flask:
    """Return a gateway app on the private Redis with settings from `env`."""
    settings = Settings.from_env({"REDIS_URL": "redis://unused", **env})
    application = app_without_fleet_thread(
        settings, scripts=Scripts(r, K, Policy.from_settings(settings))
    )
    application.testing = True
    return application


@pytest.fixture
def app(r: redis.Redis) -> Iterator[Flask]:
    application = make_app(r)
    yield application
    application.extensions[gateway_events.EXTENSION].tail.stop()


@pytest.fixture
def scripts(app: Flask) -> Scripts:
    return app.extensions["taskforge"].scripts


@dataclass
class Answer:
    """What a wait got, and when."""

    status: int
    doc: Any
    headers: dict[str, str]
    started: float  # time.monotonic() when it was sent
    ended: float  # time.monotonic() when it answered


def get(app: Flask, job_id: str, query: str = "") -> Answer:
    """GET /jobs/<id> with `query`; return the answer and its moment."""
    started = time.monotonic()
    response = app.test_client().get(f"/jobs/{job_id}{query}")
    doc, headers = response.get_json(), dict(response.headers)
    return Answer(response.status_code, doc, headers, started, time.monotonic())


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as executor:
        yield executor


def waiting_now(app: Flask, count: int = 1) -> None:
    """Wait until `count` requests hold a slot of `app`'s hub (waits, or streams)."""
    hub = app.extensions[gateway_events.EXTENSION]
    wait_until(lambda: hub.limit - hub.slots._value >= count, DEADLINE, f"{count} waits")


def start_wait(
    pool: ThreadPoolExecutor, app: Flask, job_id: str, query: str = "?wait=30s"
) -> Future[Answer]:
    """Start a wait on its thread; return once it holds its slot."""
    future = pool.submit(get, app, job_id, query)
    waiting_now(app)
    return future


@contextmanager
def wait_held_asleep(app: Flask) -> Iterator[None]:
    """Hold the tail's lock while the one wait sleeps on it: it cannot read the job until exit.

    Holding the slot (start_wait) is not enough: the wait may be reading the job at that
    moment, and a read between two transitions would see the first. A thread listed among the
    condition's waiters has released the lock and cannot return from its wait while we hold it.
    """
    cond = app.extensions[gateway_events.EXTENSION].tail._cond
    deadline = time.monotonic() + DEADLINE
    while True:
        with cond:
            if cond._waiters:  # type: ignore[attr-defined]
                yield
                return
        assert time.monotonic() < deadline, "the wait never slept on the tail"
        time.sleep(0.005)


def claim_job(scripts: Scripts, job_id: str) -> int:
    """Claim `job_id` (the only pending job); return its token."""
    job = scripts.claim(f"worker-{job_id}")
    assert job is not None and job.id == job_id
    return job.token


# --- finishing ends the wait -----------------------------------------------------------------


def finish_completed(scripts: Scripts, job_id: str) -> None:
    scripts.complete(job_id, claim_job(scripts, job_id), '{"pages": 3}')


def finish_dead(scripts: Scripts, job_id: str) -> None:
    scripts.fail(job_id, claim_job(scripts, job_id), "boom", permanent=True)


def finish_canceled(scripts: Scripts, job_id: str) -> None:
    scripts.cancel(job_id)


@pytest.mark.parametrize(
    ("finish", "status"),
    [(finish_completed, "completed"), (finish_dead, "dead"), (finish_canceled, "canceled")],
)
def test_a_wait_answers_as_soon_as_its_job_finishes(
    app: Flask,
    scripts: Scripts,
    pool: ThreadPoolExecutor,
    finish: Callable[[Scripts, str], None],
    status: str,
) -> None:
    job_id = helpers.enqueue(scripts)
    pending = start_wait(pool, app, job_id)
    finish(scripts, job_id)
    finished_at = time.monotonic()
    answer = pending.result(DEADLINE)
    assert answer.status == 200 and answer.doc["status"] == status
    assert answer.ended - finished_at < PROMPT
    if status == "completed":
        assert answer.doc["result"] == {"pages": 3}


def test_a_wait_that_ends_answers_the_job_unfinished(app: Flask, scripts: Scripts) -> None:
    job_id = helpers.enqueue(scripts)
    started = time.monotonic()
    answer = get(app, job_id, "?wait=500ms")
    assert answer.status == 200 and answer.doc["status"] == "pending"
    assert 0.5 <= answer.ended - started < 0.5 + DEADLINE


def test_a_wait_answers_the_job_as_it_is_when_it_ends(
    app: Flask, scripts: Scripts, pool: ThreadPoolExecutor
) -> None:
    job_id = helpers.enqueue(scripts)
    pending = start_wait(pool, app, job_id, "?wait=1s")
    claim_job(scripts, job_id)  # not a finish: the wait goes on, then reads it again
    answer = pending.result(DEADLINE)
    assert answer.doc["status"] == "processing"


def test_without_wait_or_with_0_or_on_a_finished_job_the_answer_is_immediate_and_slotless(
    r: redis.Redis,
) -> None:
    application = make_app(r, TASKFORGE_EVENTS_STREAMS="1")
    hub = application.extensions[gateway_events.EXTENSION]
    scripts = application.extensions["taskforge"].scripts
    pending_id, done_id = helpers.enqueue(scripts), helpers.completed(scripts)
    assert hub.slots.acquire(blocking=False)  # every slot taken: none of these needs one
    try:
        for job_id, query, status in [
            (pending_id, "", "pending"),
            (pending_id, "?wait=0", "pending"),
            (pending_id, "?wait=0ms", "pending"),
            (done_id, "?wait=60", "completed"),
        ]:
            started = time.monotonic()
            answer = get(application, job_id, query)
            assert (answer.status, answer.doc["status"]) == (200, status), query
            assert answer.ended - started < PROMPT
        head = application.test_client().head(f"/jobs/{pending_id}?wait=30s")
        assert head.status_code == 200  # headers only: it does not wait
    finally:
        hub.slots.release()


@pytest.mark.parametrize(
    "query",
    [
        "?wait=-1",
        "?wait=61",
        "?wait=60.5s",
        "?wait=2m",
        "?wait=abc",
        "?wait=",
        "?wait=1e3",
        "?wait=1&wait=2",
    ],
)
def test_a_bad_wait_is_a_400_naming_it(app: Flask, scripts: Scripts, query: str) -> None:
    answer = get(app, helpers.enqueue(scripts), query)
    assert answer.status == 400
    assert answer.doc["error"].startswith("wait ")
    assert answer.doc["fields"][0]["field"] == "wait"


def test_the_cap_is_named_and_is_inclusive(app: Flask, scripts: Scripts) -> None:
    answer = get(app, helpers.enqueue(scripts), "?wait=61")
    assert "from 0 to 60s" in answer.doc["error"]
    job_id = helpers.completed(scripts)
    for query in ("?wait=60", "?wait=1m", "?wait=60000ms", "?wait=2.5"):
        assert get(app, job_id, query).status == 200, query


def test_an_unknown_job_is_404_at_once(app: Flask) -> None:
    started = time.monotonic()
    answer = get(app, "00000000-0000-4000-8000-000000000000", "?wait=30s")
    assert answer.status == 404 and answer.doc == {"error": "job not found"}
    assert answer.ended - started < PROMPT


def test_a_job_purged_while_waited_on_is_404(
    app: Flask, scripts: Scripts, pool: ThreadPoolExecutor
) -> None:
    job_id = helpers.enqueue(scripts)
    pending = start_wait(pool, app, job_id)
    # The wait stays asleep until the job is both dead and purged, so it reads the job only
    # after the purge (dead alone would be an answer).
    with wait_held_asleep(app):
        finish_dead(scripts, job_id)
        scripts.purge(job_id)
    answer = pending.result(DEADLINE)
    assert answer.status == 404 and answer.doc == {"error": "job not found"}


def test_a_job_replayed_before_the_wait_reads_it_is_waited_on_again(
    app: Flask, scripts: Scripts, pool: ThreadPoolExecutor
) -> None:
    job_id = helpers.enqueue(scripts)
    pending = start_wait(pool, app, job_id)
    with wait_held_asleep(app):  # the wait wakes only once the job is pending again
        finish_dead(scripts, job_id)
        scripts.replay(job_id)
    with pytest.raises(TimeoutError):  # replayed: pending again, so the wait goes on
        pending.result(0.3)
    finish_completed(scripts, job_id)
    assert pending.result(DEADLINE).doc["status"] == "completed"


# --- the bound, the worker, events off -------------------------------------------------------


def test_waits_and_streams_share_the_bound_and_beyond_it_get_503(
    r: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    application = make_app(r, TASKFORGE_EVENTS_STREAMS="1")
    scripts = application.extensions["taskforge"].scripts
    first, second = helpers.enqueue(scripts), helpers.enqueue(scripts)
    try:
        pending = start_wait(pool, application, first)
        refused = get(application, second, "?wait=30s")
        assert refused.status == 503 and refused.headers["Retry-After"] == "1"
        assert "TASKFORGE_EVENTS_STREAMS" in refused.doc["error"]
        assert application.test_client().get("/events").status_code == 503
        scripts.cancel(first)
        assert pending.result(DEADLINE).doc["status"] == "canceled"
        # An open stream holds the slot just the same.
        stream = application.test_client().get("/events", buffered=False)
        try:
            assert stream.status_code == 200
            assert get(application, second, "?wait=30s").status == 503
        finally:
            stream.close()
        assert get(application, second, "?wait=10ms").status == 200  # the slot is free again
    finally:
        application.extensions[gateway_events.EXTENSION].tail.stop()


def test_a_stopping_worker_ends_every_wait_at_once(
    app: Flask, scripts: Scripts, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    alive = [True]
    monkeypatch.setattr(gateway_events, "_worker_alive", lambda: alive[0])
    job_id = helpers.enqueue(scripts)
    pending = start_wait(pool, app, job_id, "?wait=60")
    alive[0] = False  # gunicorn's worker.alive after SIGTERM or at its max_requests
    stopped = time.monotonic()
    answer = pending.result(DEADLINE)
    assert answer.doc["status"] == "pending"
    assert answer.ended - stopped < 2.0  # the tail looks at alive every BLOCK_MS (1 s)


def test_with_events_off_a_wait_reads_the_job_again_until_it_finishes(
    r: redis.Redis, pool: ThreadPoolExecutor
) -> None:
    application = make_app(r, TASKFORGE_EVENTS="off")
    scripts = application.extensions["taskforge"].scripts
    job_id = helpers.enqueue(scripts)
    pending = start_wait(pool, application, job_id)
    finish_completed(scripts, job_id)
    finished_at = time.monotonic()
    answer = pending.result(DEADLINE)
    assert answer.doc["status"] == "completed"
    assert answer.ended - finished_at < waiting.POLL_SECONDS + PROMPT
    assert not r.exists(K.fleet_events)  # it rode no event: none was written
    hub = application.extensions[gateway_events.EXTENSION]
    assert not hub.tail.running


# --- no lost wake-up -------------------------------------------------------------------------


def test_a_finish_right_after_the_wait_reads_the_job_still_wakes_it(
    app: Flask, scripts: Scripts, pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the position is taken for: the job finishes between the read and the wait."""
    job_id = helpers.enqueue(scripts)
    read_job = waiting.read_job
    reads: list[str] = []

    def read_then_finish(gw: Any, wanted: str, queue: str) -> Any:
        job = read_job(gw, wanted, queue)
        reads.append(job.status)
        if len(reads) == 1:
            finish_completed(scripts, job_id)  # after the read, before the wait begins
        return job

    monkeypatch.setattr(waiting, "read_job", read_then_finish)
    started = time.monotonic()
    answer = get(app, job_id, "?wait=30s")
    assert answer.doc["status"] == "completed"
    assert answer.ended - started < PROMPT * 2
    assert reads == ["pending", "completed"]


def test_200_waits_racing_their_jobs_finish_none_sleeps_to_its_timeout(r: redis.Redis) -> None:
    jobs = 200
    timeout = 10.0
    application = make_app(r, TASKFORGE_EVENTS_STREAMS=str(jobs))
    scripts = application.extensions["taskforge"].scripts
    ids = [helpers.enqueue(scripts) for _ in range(jobs)]
    go = threading.Event()

    def complete_all() -> None:
        go.wait(DEADLINE)
        for job_id in ids:  # claims take the oldest first: ids are in claim order
            finish_completed(scripts, job_id)

    try:
        with ThreadPoolExecutor(max_workers=50) as executor:
            completer = threading.Thread(target=complete_all, daemon=True)
            completer.start()
            futures = []
            for index, job_id in enumerate(ids):
                futures.append(executor.submit(get, application, job_id, f"?wait={timeout:g}"))
                if index == 20:
                    go.set()  # the rest start while their jobs are being finished
            go.set()
            answers = [future.result(timeout + DEADLINE) for future in futures]
            completer.join(DEADLINE)
        assert {a.doc["status"] for a in answers} == {"completed"}
        longest = max(a.ended - a.started for a in answers)
        print(f"\n200 racing waits: longest {longest:.3f} s (timeout {timeout:g} s)")
        assert longest < timeout / 2, "a wait slept past its job's finish"
    finally:
        application.extensions[gateway_events.EXTENSION].tail.stop()


def test_the_wait_pattern_allows_exactly_the_durations_from_0_to_60_s() -> None:
    """The OpenAPI document states the pattern: it must be the cap, not an approximation."""
    numbers = [f"{n}" for n in range(0, 70)] + ["0.5", "59.999", "60.0", "60.001", "00060"]
    numbers += [f"{n}" for n in (999, 9999, 10000, 59999, 60000, 60001, 60000.5, 99999)]
    numbers += ["0.25", "1.0", "1.01", "0001", "2"]
    for number in numbers:
        for unit, scale in (("", 1), ("s", 1), ("ms", 0.001), ("m", 60)):
            text = f"{number}{unit}"
            expected = float(number) * scale <= waiting.MAX_WAIT_SECONDS
            assert (waiting.parse_wait(text) is not None) == expected, text
    for text in ("0.001h", "0d", "1e1", ".5", "5.", "+5", "\u0665", "5 s", "5S"):
        assert waiting.parse_wait(text) is None, text
