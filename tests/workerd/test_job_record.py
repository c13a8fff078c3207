"""What a job's record and the worker's log lines say about a run.

- a failing handler's traceback is stored with the job (Redis only, never a log line);
- every last_error reads ``"Type: message"``, whichever path wrote it;
- ``job_started`` names the job's priority; ``job_retry_scheduled`` writes its time in RFC 3339.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable

import pytest

import tests.workerd.handlers_job_record  # noqa: F401  (registers the record.* handlers)
from shared.model.jobs import Job, JobState, format_ms, parse_rfc3339_ms
from tests.support.workerd import Workerd
from tests.workerd.conftest import HANDLERS, Engine
from workerd.execution import run_handler

RECORD_HANDLERS = f"{HANDLERS},tests.workerd.handlers_job_record"
# "Type: message": a Python-identifier-like type, a colon and a space, then the message.
LAST_ERROR = re.compile(r"[A-Z][A-Za-z0-9_]*: \S.*", re.DOTALL)
FRAMES = ("deep", "validate_order", "charge_card", "call_gateway")


def _job(job_type: str, payload: str = "{}") -> Job:
    return Job(
        id=str(uuid.uuid4()),
        type=job_type,
        status=JobState.PROCESSING,
        priority=0,
        max_retries=3,
        attempts=1,
        recoveries=0,
        payload_json=payload,
        created_at=0,
        updated_at=0,
    )


def _frames(traceback: str) -> list[str]:
    """Return the function names of a formatted traceback's frames, outermost first."""
    return re.findall(r'^  File ".*", line \d+, in (\S+)$', traceback, re.MULTILINE)


def test_a_handler_exception_carries_its_traceback_from_the_handler_down() -> None:
    outcome = run_handler(_job("record.deep", '{"message": "card declined"}'), 65536)

    assert (outcome.error, outcome.error_kind) == ("ValueError: card declined", "ValueError")
    # The worker's own frame (run_handler) is not the job owner's code: left out.
    assert _frames(outcome.traceback) == list(FRAMES)
    assert outcome.traceback.startswith("Traceback (most recent call last):\n")
    assert outcome.traceback.endswith("ValueError: card declined\n")


@pytest.mark.parametrize(
    ("job_type", "payload"),
    [("units.nobody_handles_this", "{}"), ("record.unserialisable", "{}")],
)
def test_a_failure_the_worker_decides_has_no_traceback(job_type: str, payload: str) -> None:
    outcome = run_handler(_job(job_type, payload), 65536)

    assert not outcome.ok and outcome.traceback == ""


@pytest.mark.slow
def test_a_real_worker_stores_the_traceback_three_calls_deep_and_logs_times_in_rfc3339(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", TASKFORGE_HANDLERS=RECORD_HANDLERS)
    job_id = engine.enqueue("record.deep", {"message": "card declined"}, max_retries=2, priority=7)

    dead = engine.wait_for(job_id, JobState.DEAD, timeout=15)

    doc = dead.to_json()  # what GET /jobs/<id> and GET /dlq return
    assert doc["last_error"] == "ValueError: card declined"
    assert _frames(doc["traceback"]) == list(FRAMES)
    assert doc["traceback"].endswith("ValueError: card declined\n")
    # Item 4: the start line names the priority, on both executions.
    starts = workerd.wait_for("job_started", job_id=job_id, count=2)
    assert [rec["priority"] for rec in starts] == [7, 7]
    # Item 16: the retry's time in the log is RFC 3339 UTC, as in the job's JSON.
    [retry] = workerd.events("job_retry_scheduled", job_id=job_id)
    assert retry["next_retry_at"] == format_ms(parse_rfc3339_ms(retry["next_retry_at"]))
    assert retry["next_retry_at"].endswith("Z")
    assert parse_rfc3339_ms(retry["next_retry_at"]) <= (dead.started_at or 0)
    # The traceback lives in Redis only: no log line carries a frame or the message.
    workerd.stop()
    out = workerd.log_path.read_text(errors="replace") + workerd.stderr()
    assert "card declined" not in out and "call_gateway" not in out


@pytest.mark.slow
def test_every_last_error_reads_type_colon_message_whichever_path_wrote_it(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    start_workerd(
        WORKER_COUNT="2",
        TASK_MAX_RECOVERIES="1",
        TASK_RESULT_MAX_BYTES="100",
        TASKFORGE_HANDLERS=RECORD_HANDLERS,
    )
    # path → (enqueued job, the last_error it must end with, whether a traceback is kept)
    once = {"max_retries": 1}
    jobs = {
        "handler exception": engine.enqueue("demo.fail", {"error": "disk full"}, **once),
        "permanent error": engine.enqueue("permanent", {"error": "card declined"}, max_retries=3),
        "no handler": engine.enqueue("no_such_type", **once),
        "result not JSON": engine.enqueue("record.unserialisable", **once),
        "result too large": engine.enqueue("record.big", {"size": 200}, **once),
        "timeout (supervisor)": engine.enqueue("demo.sleep", {"seconds": 30}, timeout=0.5, **once),
        "recovery cap (Lua)": engine.enqueue("demo.crash", **once),
    }
    expected = {
        "handler exception": ("RuntimeError: disk full", True),
        "permanent error": ("PermanentError: card declined", True),
        "no handler": ("NoHandler: no handler for job type 'no_such_type'", False),
        "result not JSON": (
            "ResultNotSerialisable: result is not JSON-serialisable "
            "(TypeError: Object of type set is not JSON serializable)",
            False,
        ),
        "result too large": ("ResultTooLarge: result is 202 bytes, over the 100 cap", False),
        "timeout (supervisor)": ("Timeout: timed out after 0.5s; its worker was killed", False),
        "recovery cap (Lua)": (
            "WorkerLost: worker lost 2 times (recovery cap 1): the job may be killing its worker",
            False,
        ),
    }

    dead = engine.wait_all(list(jobs.values()), [JobState.DEAD], timeout=30)

    recorded = {
        path: (dead[job_id].last_error, dead[job_id].traceback is not None)
        for path, job_id in jobs.items()
    }
    assert recorded == expected
    for path, (last_error, _) in recorded.items():
        assert last_error is not None and LAST_ERROR.fullmatch(last_error), path


@pytest.mark.slow
def test_job_started_shows_priorities_highest_first_as_the_readme_demo_says(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    # README demo step 6 with one worker, so the claim order is the log order: keep it busy,
    # enqueue priorities 1, 10, 5, and read job_started.
    workerd = start_workerd(WORKER_COUNT="1")
    busy = engine.enqueue("demo.sleep", {"seconds": 1})
    workerd.wait_for("job_started", job_id=busy)
    waiting = [engine.enqueue("send_email", priority=p) for p in (1, 10, 5)]

    claims = workerd.wait_for("job_started", type="send_email", count=3, timeout=15)

    assert [rec["priority"] for rec in claims] == [10, 5, 1]
    assert [rec["job_id"] for rec in claims] == [waiting[1], waiting[2], waiting[0]]
