"""GET /workers lists each workerd host's processes and the job each runs, from a real
``python -m workerd`` (its registry heartbeat) read by the gateway on the private Redis."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import redis
from flask.testing import FlaskClient

from shared.engine.queries import get_job
from shared.model.jobs import JobState
from shared.settings.config import Settings
from tests.support.gateway_app import app_without_fleet_thread
from tests.support.redis_server import RedisServer
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import HANDLERS, Engine

WAIT = 15.0  # seconds: the registry heartbeats every 2 s


def workers(client: FlaskClient) -> list[dict[str, Any]]:
    response = client.get("/workers")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["hosts"]


def gateway_client(redis_server: RedisServer) -> FlaskClient:
    """Return a test client of a gateway on the private server (its fleet thread stopped)."""
    return app_without_fleet_thread(
        Settings.from_env({"REDIS_URL": redis_server.url})
    ).test_client()


def processes(client: FlaskClient) -> list[dict[str, Any]]:
    (host,) = workers(client)
    return host["processes"]


def test_workers_shows_the_job_each_process_runs_then_that_it_is_idle(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    start_workerd(
        WORKER_QUEUES="ops",
        WORKER_COUNT="2",
        TASKFORGE_HANDLERS=f"{HANDLERS},tests.workerd.handlers_hold",
        TASK_VISIBILITY_TIMEOUT="30s",
    )
    client = gateway_client(redis_server)
    release = tmp_path / "release"
    engine.scripts.register_queue("ops")
    job_id = engine.enqueue("hold", {"release": str(release), "max_seconds": WAIT * 2}, queue="ops")

    def running() -> dict[str, Any] | None:
        found = [p for p in processes(client) if p.get("job_id") == job_id]
        return found[0] if found else None

    wait_until(lambda: running() is not None, WAIT, "the held job shown on a process")
    shown = running()
    assert shown is not None
    assert (shown["type"], shown["queue"]) == ("hold", "ops")
    busy_since = datetime.fromisoformat(shown["busy_since"])
    beat = datetime.fromisoformat(shown["last_heartbeat"])
    job = get_job(r, engine.keys, job_id, ["ops"])
    assert job is not None and job.started_at is not None
    started = job.started_at
    # The worker marks its slot right after the claim: within a second of Redis's start time.
    assert abs(busy_since.timestamp() * 1000 - started) < 1000
    assert beat >= busy_since
    (host,) = workers(client)
    assert host["busy"] == 1 and len(host["processes"]) == 2
    assert shown["pid"] != host["pid"]
    idle = [p for p in host["processes"] if "job_id" not in p]
    assert len(idle) == 1
    assert set(idle[0]) == {"pid", "worker", "last_heartbeat"}  # no job, nor a null for one
    # The worker id the held job was claimed under (its claimed_by): the process's own name.
    assert shown["worker"] == job.worker_id and shown["worker"] != idle[0]["worker"]

    release.touch()
    wait_until(
        lambda: (j := get_job(r, engine.keys, job_id, ["ops"])) and j.status is JobState.COMPLETED,
        WAIT,
        "the released job completed",
    )
    wait_until(
        lambda: all("job_id" not in p for p in processes(client)) and running() is None,
        WAIT,
        "every process idle again",
    )
    assert len(processes(client)) == 2


def test_workers_lists_each_job_thread_of_a_threaded_process(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    start_workerd(
        WORKER_COUNT="1",
        WORKER_THREADS="3",
        TASKFORGE_HANDLERS=f"{HANDLERS},tests.workerd.handlers_hold",
        TASK_VISIBILITY_TIMEOUT="30s",
    )
    client = gateway_client(redis_server)
    release = tmp_path / "release"
    job_id = engine.enqueue("hold", {"release": str(release), "max_seconds": WAIT * 2})

    def busy() -> list[dict[str, Any]]:
        return [p for p in processes(client) if p.get("job_id") == job_id]

    wait_until(busy, WAIT, "the held job shown on a thread")
    (host,) = workers(client)
    listed = host["processes"]
    assert (host["workers"], host["busy"], len(listed)) == (3, 1, 3)
    assert len({p["pid"] for p in listed}) == 1  # one process, three threads
    names = sorted(p["worker"] for p in listed)
    assert [n.rsplit(".", 1)[1] for n in names] == ["t0", "t1", "t2"]
    job = get_job(r, engine.keys, job_id)
    assert job is not None and busy()[0]["worker"] == job.worker_id
    release.touch()
    engine.wait_for(job_id, JobState.COMPLETED)
