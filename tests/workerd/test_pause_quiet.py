"""A real ``python -m workerd``: a paused queue is left alone without spinning, and a host is
quieted by SIGTSTP (to the supervisor or its whole process group) or through the API's request,
and resumed by SIGCONT or the API.

Idle cost is counted by Redis itself: MONITOR attributes each command to the connection that
sent it, and CLIENT LIST names the connections (taskforge-worker-<pid>).
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
import redis

from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import Job, JobState, validate_enqueue
from tests.support.monitor import commands_by_connection
from tests.support.redis_server import RedisServer
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal

WATCH = 3.0  # seconds of MONITOR for an idle rate
QUIET_WINDOW = 1.0  # seconds a quiet host is watched for a claim it must not make
WORKERS = 3  # each worker of a quiet host once could slip one claim through


def enqueue(
    scripts: Scripts, queue: str, job_type: str = "demo.noop", payload: object = None
) -> str:
    scripts.register_queue(queue)
    job_id = str(uuid.uuid4())
    body: dict[str, object] = {"type": job_type, "queue": queue}
    if payload is not None:
        body["payload"] = payload
    scripts.enqueue(validate_enqueue(body), job_id)
    return job_id


def job(scripts: Scripts, job_id: str, queues: Iterable[str] = ("a", "b", "default")) -> Job:
    found = get_job(scripts.redis, scripts.keys, job_id, list(queues))
    assert found is not None, job_id
    return found


def wait_status(
    scripts: Scripts, job_ids: Iterable[str], status: JobState, timeout: float = 10.0
) -> float:
    """Wait until every job has `status`; return when that was seen (monotonic)."""
    ids = list(job_ids)
    wait_until(
        lambda: all(job(scripts, i).status is status for i in ids),
        timeout,
        f"{len(ids)} jobs {status}",
    )
    return time.monotonic()


def stays(scripts: Scripts, job_id: str, status: JobState, seconds: float) -> None:
    """Assert the job keeps `status` for `seconds` (a claim it must not make would end it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert job(scripts, job_id).status is status
        time.sleep(0.05)


def test_a_paused_queue_is_left_alone_without_spinning_and_served_again_on_resume(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    r: redis.Redis,
    redis_server: RedisServer,
) -> None:
    scripts = engine.scripts
    # The default lease: a short one shortens an idle worker's wait (workerd.worker).
    workerd = start_workerd(WORKER_QUEUES="a,b", WORKER_COUNT="2", TASK_VISIBILITY_TIMEOUT="30s")
    scripts.pause_queue("b")
    held = [enqueue(scripts, "b") for _ in range(5)]
    served = [enqueue(scripts, "a") for _ in range(5)]

    wait_status(scripts, served, JobState.COMPLETED)
    # Each worker asked b once a's list was empty, got PAUSED and dropped it: idle now.
    wait_until(lambda: len(workerd.events("job_completed")) == 5, 5, "5 completions logged")

    per_worker = commands_by_connection(redis_server.url, "taskforge-worker-", WATCH)

    assert len(per_worker) == 2, per_worker
    claim_sha = scripts.transport.shas["claim"]
    for name, counts in per_worker.items():
        total = sum(counts.values())
        # BLPOP on a's wake list (1 s) with a's claim behind it (a alone is waited on), and
        # one EXISTS of b's flag, each about once a second. A spin would be thousands.
        assert total <= 4 * WATCH, (name, counts)
        assert set(counts) <= {"blpop", "exists", f"evalsha {claim_sha}"}, (name, counts)
    assert all(job(scripts, i).status is JobState.PENDING for i in held)

    resumed_at = time.monotonic()
    assert scripts.resume_queue("b") is True
    done_at = wait_status(scripts, held, JobState.COMPLETED, timeout=5)
    # A worker that dropped b asks again within PAUSED_RECHECK (1 s) of the resume.
    assert done_at - resumed_at < 2.5


@pytest.mark.parametrize("whole_group", [False, True], ids=["supervisor", "process_group"])
def test_sigtstp_lets_the_running_job_finish_claims_nothing_more_and_sigcont_resumes(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    whole_group: bool,
) -> None:
    scripts = engine.scripts
    workerd = start_workerd(new_session=whole_group, WORKER_COUNT=str(WORKERS))
    send = workerd.signal_group if whole_group else workerd.signal
    running = engine.enqueue("journal", {"file": journal.file, "sleep": 1.0})
    journal.wait_for("start", running)

    send(signal.SIGTSTP)

    workerd.wait_for("supervisor_quiet", cause="SIGTSTP")
    wait_until(lambda: _health(workerd).get("quiet") is True, 5, "/health quiet")
    # One job per worker: each could have slipped one claim through.
    waiting = [engine.enqueue("demo.noop") for _ in range(WORKERS)]
    engine.wait_for(running, JobState.COMPLETED)  # the running job finished
    deadline = time.monotonic() + QUIET_WINDOW
    while time.monotonic() < deadline:  # zero claims once /health said quiet
        assert all(job(scripts, job_id).status is JobState.PENDING for job_id in waiting)
        time.sleep(0.05)
    # job_started: the INFO line of a job a worker claimed to run (job_claimed is DEBUG).
    started = [e for e in workerd.events("job_started") if e.get("job_id") in waiting]
    assert started == []  # not even one claimed and given back
    # Not one process of the host was stopped by the signal (its default action).
    assert all(_state(pid) != "T" for pid in workerd.processes())
    name = _host_name(scripts)
    assert scripts.redis.hget(scripts.keys.worker(name), "quiet") == b"1"
    assert scripts.stats()[1].quiet == 1

    send(signal.SIGCONT)

    workerd.wait_for("supervisor_resumed", cause="SIGCONT")
    for job_id in waiting:
        engine.wait_for(job_id, JobState.COMPLETED, timeout=5)
    assert _health(workerd)["quiet"] is False
    # The claims the check above looked for are logged so: now, after the resume, they are.
    wait_until(
        lambda: {e.get("job_id") for e in workerd.events("job_started")} >= set(waiting),
        5,
        "claims logged",
    )


def test_the_api_request_quiets_the_host_within_a_heartbeat_and_resumes_it(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    scripts = engine.scripts
    workerd = start_workerd()
    name = _host_name(scripts)

    asked = time.monotonic()
    scripts.quiet_host(name, True)  # what POST /workers/<name>/quiet calls

    workerd.wait_for("supervisor_quiet", cause="api", timeout=5)
    applied = time.monotonic() - asked
    assert applied < 2.0 + 1.0  # the registry's interval, and a loop tick
    # Claims that read "not quiet" just before may still answer until /health says quiet.
    wait_until(lambda: _health(workerd).get("quiet") is True, 5, "/health quiet")
    waiting = engine.enqueue("demo.noop")
    stays(scripts, waiting, JobState.PENDING, QUIET_WINDOW)
    wait_until(
        lambda: scripts.redis.hget(scripts.keys.worker(name), "quiet") == b"1", 5, "record quiet"
    )

    scripts.quiet_host(name, False)

    engine.wait_for(waiting, JobState.COMPLETED, timeout=5)
    workerd.wait_for("supervisor_resumed", cause="api")


@pytest.mark.slow
def test_a_reload_keeps_a_quiet_host_quiet(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    workerd = start_workerd()
    workerd.signal(signal.SIGTSTP)
    workerd.wait_for("supervisor_quiet")

    workerd.signal(signal.SIGHUP)

    workerd.wait_for("supervisor_ready", reloaded=True, timeout=20)
    waiting = engine.enqueue("demo.noop")
    stays(engine.scripts, waiting, JobState.PENDING, QUIET_WINDOW)
    assert _health(workerd)["quiet"] is True
    workerd.signal(signal.SIGCONT)
    engine.wait_for(waiting, JobState.COMPLETED, timeout=5)


def _health(workerd: Workerd) -> dict[str, object]:
    return json.loads(workerd.http("/health")[2])


def _host_name(scripts: Scripts) -> str:
    (name,) = wait_until(
        lambda: scripts.redis.zrange(scripts.keys.workers, 0, -1), 5, "the host in the registry"
    )
    return name.decode()


def _state(pid: int) -> str:
    """Return a process's state letter from /proc (T: stopped), or "" once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def test_a_host_quieted_under_load_takes_no_job_from_pending_once_health_says_quiet(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    # Workers busy completing and claiming the next job in the same call: the claims a quiet
    # can meet mid-flight. Once /health says quiet, pending only grows (a
    # next job claimed before it is handed back), never shrinks. End to end only: the race it
    # guards against is too rare to show here in a few runs (5 of 5 passed on the code before
    # the fix); tests/workerd/test_quiet_fence.py forces it.
    scripts = engine.scripts
    workerd = start_workerd(WORKER_COUNT=str(WORKERS))
    scripts.pause_queue("default")  # the jobs wait for all to be in: a backlog to work through
    jobs = [engine.enqueue("demo.noop") for _ in range(3000)]
    scripts.resume_queue("default")
    wait_until(lambda: scripts.redis.zcard(scripts.keys.pending) < len(jobs) - 100, 10, "flow")

    workerd.signal(signal.SIGTSTP)
    wait_until(lambda: _health(workerd).get("quiet") is True, 5, "/health quiet")
    floor = scripts.redis.zcard(scripts.keys.pending)
    assert floor > 0, "every job ran before the quiet: nothing was measured"
    deadline = time.monotonic() + QUIET_WINDOW
    while time.monotonic() < deadline:
        pending = scripts.redis.zcard(scripts.keys.pending)
        assert pending >= floor, f"{floor - pending} claimed after /health said quiet"
        floor = pending
        time.sleep(0.01)
    workerd.signal(signal.SIGCONT)
