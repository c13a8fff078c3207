"""Fixtures for the workerd process tests: a real ``python -m workerd`` on the private Redis.

`start_workerd(**env)` starts a supervisor (tests.support.workerd) with short timeouts and
waits for ``/ready``. At teardown every supervisor started is stopped (SIGTERM, SIGKILL after
a bound) and no process it forked may be left.

`engine` enqueues through shared.engine.scripts.Scripts and waits for jobs to reach a state by
polling Redis against a deadline. `journal` reads the executions the test handlers record.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import Job, JobState, validate_enqueue
from tests.support.redis_server import RedisServer
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, stop_all
from tests.support.workerd import start_workerd as launch

T = TypeVar("T")

HANDLERS = "workerd.demo,tests.workerd.handlers_for_tests"
# Short timeouts so every rule is reached in a second or two.
BASE_ENV = {
    "WORKER_COUNT": "2",
    "TASK_VISIBILITY_TIMEOUT": "1s",
    "TASK_RETRY_BASE_DELAY": "100ms",
    "WORKER_DRAIN_GRACE": "2s",
    "LOG_LEVEL": "INFO",
    # Loopback: nothing here is for other machines (the default 0.0.0.0 has its own test).
    "TASKFORGE_BIND_HOST": "127.0.0.1",
}


@pytest.fixture
def start_workerd(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> Iterator[Callable[..., Workerd]]:
    """Return a factory that starts ``python -m workerd`` on the private Redis.

    Keyword arguments are environment variables (None unsets one of the defaults; a
    PYTHONPATH is searched after the repository); ``wait_ready=False`` returns at once,
    ``new_session=True`` gives it its own process group.
    """
    started: list[Workerd] = []

    def start(*, wait_ready: bool = True, new_session: bool = False, **env: str | None) -> Workerd:
        index = len(started)
        settings = {
            **BASE_ENV,
            "REDIS_URL": redis_server.url,
            "PORT_WORKER": str(free_port()),
            "TASKFORGE_HANDLERS": HANDLERS,
            **env,
        }
        log_path, err_path = tmp_path / f"workerd{index}.log", tmp_path / f"workerd{index}.err"
        workerd = launch(settings, log_path, err_path, wait_ready=False, new_session=new_session)
        started.append(workerd)
        if wait_ready:
            workerd.wait_ready()
        return workerd

    try:
        yield start
    finally:
        problems = stop_all(started)
        if problems:
            pytest.fail("; ".join(problems))


class Engine:
    """Enqueue through the engine's scripts and watch jobs in Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.keys = Keys()
        self.scripts = Scripts(client, self.keys)

    def enqueue(self, job_type: str, payload: Any = None, **fields: Any) -> str:
        """Enqueue one job (body fields as POST /enqueue takes them); return its id."""
        body = {"type": job_type, **fields}
        if payload is not None:
            body["payload"] = payload
        job_id = str(uuid.uuid4())
        result = self.scripts.enqueue(validate_enqueue(body), job_id)
        assert result.created, result
        return job_id

    def job(self, job_id: str) -> Job:
        """Return a job that must exist."""
        found = get_job(self.redis, self.keys, job_id)
        assert found is not None, f"job {job_id} does not exist"
        return found

    def wait_for(
        self, job_id: str, states: Collection[JobState] | JobState, timeout: float = 10.0
    ) -> Job:
        """Poll until the job is in one of `states`; return it."""
        wanted = {states} if isinstance(states, JobState) else set(states)

        def reached() -> Job | None:
            job = get_job(self.redis, self.keys, job_id)
            return job if job is not None and job.status in wanted else None

        return wait_until(reached, timeout, f"job {job_id} to be {sorted(wanted)}")

    def wait_all(
        self, job_ids: Collection[str], states: Collection[JobState], timeout: float
    ) -> dict[str, Job]:
        """Poll until every job is in one of `states`; return them by id."""
        wanted = set(states)

        def reached() -> dict[str, Job] | None:
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id))
            jobs = {
                i: Job.from_hash(raw) for i, raw in zip(job_ids, pipe.execute(), strict=True) if raw
            }
            done = len(jobs) == len(job_ids) and all(j.status in wanted for j in jobs.values())
            return jobs if done else None

        return wait_until(reached, timeout, f"{len(job_ids)} jobs to be {sorted(wanted)}")


@pytest.fixture
def engine(r: redis.Redis) -> Engine:
    """Return the enqueue-and-watch helper on the private (emptied) Redis."""
    return Engine(r)


class Journal:
    """The executions the test handlers recorded (tests/workerd/handlers_for_tests.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def file(self) -> str:
        """Return the path to put in a job's payload."""
        return str(self.path)

    def entries(self, event: str | None = None, job_id: str | None = None) -> list[dict[str, Any]]:
        """Return the recorded lines, filtered by event ("start"/"end") and job id."""
        if not self.path.exists():
            return []
        lines = self.path.read_text().split("\n")[:-1]  # complete lines only
        records = [json.loads(line) for line in lines if line.strip()]
        return [
            rec
            for rec in records
            if (event is None or rec["event"] == event) and (job_id is None or rec["id"] == job_id)
        ]

    def wait_for(
        self, event: str, job_id: str | None = None, *, count: int = 1, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until `count` lines of `event` (for `job_id`) were recorded; return them."""

        def seen() -> list[dict[str, Any]]:
            found = self.entries(event, job_id)
            return found if len(found) >= count else []

        return wait_until(seen, timeout, f"{count}× journal {event} of {job_id or 'any job'}")


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    """Return an empty journal in the test's temporary directory."""
    return Journal(tmp_path / "journal.jsonl")
