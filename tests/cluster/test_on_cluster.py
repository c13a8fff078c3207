"""TaskForge on a real Redis Cluster: a gunicorn gateway and a workerd, both on redis+cluster://.

Three queues whose hash tags land on three different masters; every job transition, the
listing, history, events, the dashboard pages, health and metrics, all over HTTP.
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from shared.engine.keys import Keys
from taskforge import new_job_id
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, start_workerd, stop_all

pytestmark = pytest.mark.slow  # a cluster, a gateway and a workerd: seconds per test

SETTLE = 20.0  # seconds any job here takes to reach its end on a 2-core machine
FINISHED = ("completed", "dead", "canceled")


@dataclass
class Stack:
    """The cluster, a gateway and a workerd serving three queues on three masters."""

    cluster: RedisCluster
    gateway: Gunicorn
    workerd: Workerd
    queues: list[str]

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        status, _, doc = self.gateway.request(method, path, body)
        return status, doc

    def enqueue(self, **fields: Any) -> str:
        status, doc = self.call("POST", "/enqueue", fields)
        assert status == 201, doc
        return doc["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        status, doc = self.call("GET", f"/jobs/{job_id}")
        assert status == 200, doc
        return doc

    def wait_status(self, job_id: str, *states: str, timeout: float = SETTLE) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            doc = self.job(job_id)
            return doc if doc["status"] in states else None

        return wait_until(reached, timeout, f"job {job_id} to be one of {states}", 0.05)

    def history(self, job_id: str) -> list[str]:
        status, doc = self.call("GET", f"/jobs/{job_id}/history")
        assert status == 200, doc
        return [entry["event"] for entry in doc["history"]]


@pytest.fixture(scope="module")
def stack(redis_cluster: RedisCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    redis_cluster.wait_ok()
    redis_cluster.flushall()
    url = f"redis+cluster://{redis_cluster.seeds}"
    queues = queue_names_on_distinct_masters(redis_cluster)
    tmp = tmp_path_factory.mktemp("on-cluster")
    schedules = tmp / "schedules.toml"
    schedules.write_text(
        f'[schedules.tick]\nevery = "1s"\njob = {{ type = "demo.noop", queue = "{queues[0]}" }}\n'
    )
    settings = {
        "REDIS_URL": url,
        "PORT_WORKER": str(free_port()),
        "TASKFORGE_HANDLERS": "workerd.demo",
        "WORKER_QUEUES": ",".join(queues),
        "WORKER_COUNT": "3",
        "TASK_VISIBILITY_TIMEOUT": "2s",
        "TASK_RETRY_BASE_DELAY": "100ms",
        "WORKER_DRAIN_GRACE": "2s",
        "WORKER_CANCEL_GRACE": "1s",
        "TASKFORGE_BIND_HOST": "127.0.0.1",
        "TASKFORGE_SCHEDULES": str(schedules),
    }
    supervisor = start_workerd(settings, tmp / "workerd.log", tmp / "workerd.err")
    try:
        with run_gunicorn(url, tmp) as gateway:
            yield Stack(redis_cluster, gateway, supervisor, queues)
    finally:
        problems = stop_all([supervisor])
        assert not problems, problems


def test_queues_land_on_three_masters(stack: Stack) -> None:
    owners = set()
    for queue in stack.queues:
        job_id = stack.enqueue(type="demo.noop", queue=queue)
        key = Keys().for_queue(queue).job(job_id)
        master = stack.cluster.master_of(key)
        direct = master.client()
        try:
            assert direct.exists(key)  # stored on that master itself: no MOVED
        finally:
            direct.close()
        owners.add(master.port)
        stack.wait_status(job_id, "completed")
    assert len(owners) == 3
    assert len(stack.cluster.masters()) == 3


def test_enqueue_claim_complete_and_history(stack: Stack) -> None:
    ids = [stack.enqueue(type="generate_pdf", queue=q, payload={"n": 1}) for q in stack.queues]
    for job_id in ids:
        done = stack.wait_status(job_id, "completed")
        assert done["result"]["pages"] == 1
        events = stack.history(job_id)
        assert events[:1] == ["enqueued"] and "completed" in events, events


def test_fail_retry_dead_dlq_replay_and_purge(stack: Stack) -> None:
    queue = stack.queues[1]
    job_id = stack.enqueue(type="demo.fail", queue=queue, max_retries=2)
    dead = stack.wait_status(job_id, "dead")
    assert dead["attempts"] == 2
    assert "retrying" in stack.history(job_id)
    status, page = stack.call("GET", "/dlq?limit=100")
    assert status == 200 and job_id in [job["id"] for job in page["jobs"]], page
    status, replayed = stack.call("POST", f"/dlq/{job_id}/retry")
    assert status == 200 and replayed["attempts"] == 0, replayed
    stack.wait_status(job_id, "dead")  # it fails again: two more attempts, dead again
    assert stack.history(job_id).count("replayed") == 1
    status, _ = stack.call("DELETE", f"/dlq/{job_id}")
    assert status == 204
    assert stack.call("GET", f"/jobs/{job_id}")[0] == 404


def test_flaky_job_retries_then_completes(stack: Stack) -> None:
    job_id = stack.enqueue(type="demo.flaky", queue=stack.queues[2], payload={"fail_times": 1})
    assert stack.wait_status(job_id, "completed")["attempts"] == 2


def test_cancel_a_scheduled_and_a_running_job(stack: Stack) -> None:
    later = stack.enqueue(type="demo.noop", queue=stack.queues[0], delay="1h")
    assert stack.job(later)["status"] == "scheduled"
    status, doc = stack.call("POST", f"/jobs/{later}/cancel")
    assert status == 200 and doc["status"] == "canceled", doc
    running = stack.enqueue(type="demo.sleep", queue=stack.queues[1], payload={"seconds": 30})
    stack.wait_status(running, "processing")
    status, doc = stack.call("POST", f"/jobs/{running}/cancel")
    assert status == 202, doc
    stack.wait_status(running, "canceled")


def test_a_delayed_job_is_promoted_then_runs(stack: Stack) -> None:
    job_id = stack.enqueue(type="demo.noop", queue=stack.queues[2], delay="300ms")
    assert stack.job(job_id)["status"] == "scheduled"
    stack.wait_status(job_id, "completed")
    assert "promoted" in stack.history(job_id)


def test_a_sigkilled_worker_s_job_is_recovered(stack: Stack) -> None:
    job_id = stack.enqueue(type="demo.sleep", queue=stack.queues[0], payload={"seconds": 3})
    stack.wait_status(job_id, "processing")
    worker_pid = _pid_of_worker(stack, _claimed_by(stack, job_id))
    os.kill(worker_pid, signal.SIGKILL)
    done = stack.wait_status(job_id, "completed", timeout=30)
    assert done["recoveries"] == 1 and done["attempts"] == 1, done


def _claimed_by(stack: Stack, job_id: str) -> str:
    """Return the worker id the job's history names for its claim."""
    status, doc = stack.call("GET", f"/jobs/{job_id}/history")
    assert status == 200, doc
    return next(e["worker"] for e in doc["history"] if e["event"] == "claimed")


def _pid_of_worker(stack: Stack, worker_id: str) -> int:
    """Return the pid of the workerd child whose worker id is `worker_id` (its logs say)."""
    started = stack.workerd.events("worker_started", worker_id=worker_id)
    assert started, worker_id
    pid = int(started[-1]["pid"])
    assert pid in _children(stack.workerd.pid), (worker_id, _children(stack.workerd.pid))
    return pid


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


def test_pause_holds_a_queue_and_resume_releases_it(stack: Stack) -> None:
    queue = stack.queues[1]
    assert stack.call("POST", f"/queues/{queue}/pause")[0] == 200
    try:
        job_id = stack.enqueue(type="demo.noop", queue=queue)
        other = stack.enqueue(type="demo.noop", queue=stack.queues[2])
        stack.wait_status(other, "completed")  # the other queues keep flowing meanwhile
        assert stack.job(job_id)["status"] == "pending"
    finally:
        assert stack.call("POST", f"/queues/{queue}/resume")[0] == 200
    stack.wait_status(job_id, "completed")


def test_delete_an_empty_queue_then_enqueue_there_again(stack: Stack) -> None:
    # Its keys and the list's are in two slots: the delete is two calls (docs/QUEUES.md).
    global_master = stack.cluster.master_of(Keys().queues).port
    spare = next(
        name
        for name in (f"spare{n}" for n in itertools.count())
        if stack.cluster.master_of(Keys().for_queue(name).pending).port != global_master
    )
    first = stack.enqueue(type="demo.noop", queue=spare)  # served by no host: it stays pending
    assert stack.call("DELETE", f"/queues/{spare}")[1]["jobs"]["pending"] == 1
    assert stack.call("POST", f"/jobs/{first}/cancel")[0] == 200

    assert stack.call("DELETE", f"/queues/{spare}")[0] == 204

    assert stack.call("GET", f"/jobs/{first}")[0] == 404
    again = stack.enqueue(type="demo.noop", queue=spare)
    assert stack.job(again)["queue"] == spare
    assert spare in [q["name"] for q in stack.call("GET", "/queues")[1]["queues"]]
    served = stack.call("DELETE", f"/queues/{stack.queues[0]}")
    assert served[0] == 409 and served[1]["served_by"], served


def test_a_concurrency_limit_holds_jobs_back(stack: Stack) -> None:
    queue = stack.queues[2]
    path = f"/queues/{queue}/limits/types/demo.sleep"
    status, doc = stack.call("PUT", path, {"concurrency": 1})
    assert status == 200, doc
    try:
        ids = [
            stack.enqueue(type="demo.sleep", queue=queue, payload={"seconds": 0.5})
            for _ in range(3)
        ]
        for job_id in ids:
            stack.wait_status(job_id, "completed")
        # One at a time, on Redis's clock: each run starts once the one before finished.
        # (Sampling the three statuses took three requests, not one moment: a loaded machine
        # saw one job still running and, a request later, the next one started.)
        jobs = sorted((stack.job(job_id) for job_id in ids), key=lambda job: job["started_at"])
        for before, after in itertools.pairwise(jobs):
            assert after["started_at"] >= before["finished_at"], (before, after)
    finally:
        stack.call("DELETE", f"/queues/{queue}/limits")


def test_a_batch_across_three_masters(stack: Stack) -> None:
    jobs = [{"type": "demo.noop", "queue": q} for q in stack.queues for _ in range(3)]
    status, _, doc = stack.gateway.request(
        "POST", "/enqueue/batch", {"jobs": jobs}, headers={"Idempotency-Key": "batch-1"}
    )
    assert status == 201, doc
    ids = [job["id"] for job in doc["jobs"]]
    assert [job["queue"] for job in doc["jobs"]] == [job["queue"] for job in jobs]
    again = stack.gateway.request(
        "POST", "/enqueue/batch", {"jobs": jobs}, headers={"Idempotency-Key": "batch-1"}
    )
    assert again[0] == 200 and [job["id"] for job in again[2]["jobs"]] == ids
    for job_id in ids:
        stack.wait_status(job_id, "completed")


def test_a_batch_of_client_ids_across_three_masters_is_made_once(stack: Stack) -> None:
    # Each id carries its queue's tag: the repeat finds each job on its own master, and a
    # lookup by id finds it with no Idempotency-Key in the global slot.
    jobs = [
        {"type": "demo.noop", "queue": q, "id": new_job_id(q)} for q in stack.queues for _ in (0, 1)
    ]
    status, _, doc = stack.gateway.request("POST", "/enqueue/batch", {"jobs": jobs})
    assert status == 201, doc
    again = stack.gateway.request("POST", "/enqueue/batch", {"jobs": jobs})
    assert again[0] == 200 and [job["id"] for job in again[2]["jobs"]] == [j["id"] for j in jobs]
    single = {"type": "demo.noop", "queue": stack.queues[1], "id": new_job_id(stack.queues[1])}
    assert stack.gateway.request("POST", "/enqueue", single)[0] == 201
    assert stack.gateway.request("POST", "/enqueue", single)[0] == 200
    changed = stack.gateway.request("POST", "/enqueue", {**single, "type": "other"})
    assert changed[0] == 409, changed
    for job_id in [*(j["id"] for j in jobs), single["id"]]:
        stack.wait_status(job_id, "completed")


def test_listing_stats_queues_workers_health_and_metrics(stack: Stack) -> None:
    ids = {stack.enqueue(type="demo.noop", queue=q) for q in stack.queues}
    for job_id in ids:
        stack.wait_status(job_id, "completed")
    status, page = stack.call("GET", "/jobs?state=completed&limit=100")
    assert status == 200 and ids <= {job["id"] for job in page["jobs"]}, page
    status, stats = stack.call("GET", "/stats")
    assert status == 200 and stats["jobs"]["completed"] >= 3, stats
    status, queues = stack.call("GET", "/queues")
    assert status == 200 and set(stack.queues) <= {q["name"] for q in queues["queues"]}, queues
    status, workers = stack.call("GET", "/workers")
    assert status == 200 and workers["hosts"], workers
    assert stack.call("GET", "/health")[1]["redis"] == "ok"
    assert stack.call("GET", "/ready")[0] == 200
    status, metrics = stack.call("GET", "/metrics")
    text = metrics.decode() if isinstance(metrics, bytes) else metrics
    assert status == 200 and f'queue="{stack.queues[0]}"' in text
    conn = http.client.HTTPConnection("127.0.0.1", stack.workerd.port, timeout=5)
    try:
        conn.request("GET", "/ready")
        assert conn.getresponse().status == 200
    finally:
        conn.close()


def test_events_stream_every_queue(stack: Stack) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", stack.gateway.port, timeout=10)
    try:
        conn.request("GET", "/events")
        response = conn.getresponse()
        assert response.status == 200
        wanted = {stack.enqueue(type="demo.noop", queue=q) for q in stack.queues}
        completed: set[str] = set()
        deadline = time.monotonic() + SETTLE
        while not wanted <= completed and time.monotonic() < deadline:
            line = response.fp.readline().decode()
            if line.startswith("data:"):
                event = json.loads(line[5:])
                if event.get("event") == "completed":
                    completed.add(event.get("job_id"))
        assert wanted <= completed, (wanted, completed)
    finally:
        conn.close()


def _sse(port: int, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/events", headers=headers or {})
    response = conn.getresponse()
    assert response.status == 200
    return response


def test_a_cluster_cursor_stays_small_and_resumes_every_queue(stack: Stack) -> None:
    """On a cluster each queue has its own stream; the id is t<ms> plus the streams of that
    millisecond (docs/EVENTS.md), whatever the number of queues, and a resume from it gets
    what every queue's stream wrote since, nothing from before."""
    idle = [f"idle-{i}" for i in range(300)]
    client = stack.cluster.client()
    client.sadd(Keys().queues, *idle)
    try:
        _resume_on_cluster(stack)
    finally:
        client.srem(Keys().queues, *idle)  # the module's other tests count the queues
        client.close()


def _resume_on_cluster(stack: Stack) -> None:
    before = stack.enqueue(type="demo.noop", queue=stack.queues[0])
    stack.wait_status(before, "completed")
    first = _sse(stack.gateway.port)
    cursor = None
    while cursor is None:
        line = first.fp.readline().decode()
        assert line, "the stream ended"
        if line.startswith("id: "):
            cursor = line[4:].strip()
    first.close()
    assert cursor.startswith("t") and len(cursor) < 400, cursor
    wanted = {stack.enqueue(type="demo.noop", queue=q) for q in stack.queues}
    for job_id in wanted:
        stack.wait_status(job_id, "completed")
    resumed = _sse(stack.gateway.port, {"Last-Event-ID": cursor})
    seen: dict[str, list[str]] = {}
    deadline = time.monotonic() + SETTLE
    try:
        while not all("completed" in seen.get(j, []) for j in wanted):
            assert time.monotonic() < deadline, seen
            line = resumed.fp.readline().decode()
            if line.startswith("id: "):
                assert len(line) < 400, line
            if line.startswith("data:"):
                event = json.loads(line[5:])
                seen.setdefault(event.get("job_id"), []).append(event["event"])
    finally:
        resumed.close()
    assert before not in seen  # written before the cursor: not sent again
    for job_id in wanted:
        assert seen[job_id] == ["enqueued", "claimed", "completed"], seen[job_id]


def test_a_wait_rides_the_queue_s_own_stream_on_a_cluster(stack: Stack) -> None:
    for queue in stack.queues:
        job_id = stack.enqueue(type="demo.noop", queue=queue)
        started = time.monotonic()
        status, doc = stack.call("GET", f"/jobs/{job_id}?wait=15s")
        assert status == 200 and doc["status"] == "completed", doc
        assert time.monotonic() - started < 5.0  # woken by its event, not the end of the wait


def test_a_periodic_schedule_enqueues_one_job_per_tick(stack: Stack) -> None:
    def ran_twice() -> dict[str, Any] | None:
        status, doc = stack.call("GET", "/schedules/tick")
        assert status == 200, doc
        return doc if doc["jobs"] >= 2 and doc["last_job_id"] else None

    doc = wait_until(ran_twice, SETTLE, "two ticks of the schedule", 0.1)
    job = stack.wait_status(doc["last_job_id"], "completed")
    assert job["queue"] == stack.queues[0]
    assert "enqueued" in stack.history(job["id"])


def test_dashboard_pages(stack: Stack) -> None:
    for page in ("/ui", "/ui/queues", "/ui/workers", "/ui/schedules", "/ui/jobs", "/ui/dlq"):
        status, _, body = stack.gateway.request("GET", page)
        assert status == 200, (page, body[:300])
