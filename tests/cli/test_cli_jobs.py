"""``taskforge enqueue|get|wait|history|cancel|jobs ls``, human and --json, on the real gateway."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path

import pytest

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from taskforge.cli import Exit
from tests.cli.conftest import Taskforge
from tests.support.engine_jobs import (
    claim,
    complete,
    fresh_queue,
    kill,
)
from tests.support.gunicorn import Gunicorn


def enqueue_json(taskforge: Taskforge, *args: str, input: str | None = None) -> dict:
    """Enqueue through the CLI with --json; return the job's JSON."""
    done = taskforge("--json", "enqueue", *args, input=input)
    assert done.code == Exit.OK and only_warnings(done.err), done.err
    return json.loads(done.out)


def only_warnings(err: str) -> bool:
    """Tell whether stderr holds enqueue warnings alone (no workerd host runs in these tests:
    the gateway says so), or nothing."""
    return all(line.startswith("taskforge: warning: ") for line in err.splitlines())


def test_enqueue_prints_the_id_and_get_shows_the_job(taskforge: Taskforge) -> None:
    done = taskforge("enqueue", "send_email", '{"to": "a@example.com"}')
    assert done.code == Exit.OK and only_warnings(done.err)
    job_id = done.out.strip()
    shown = taskforge("get", job_id)
    assert shown.code == Exit.OK
    lines = dict(line.split(None, 1) for line in shown.out.splitlines() if " " in line)
    assert lines["id"] == job_id and lines["status"] == "pending" and lines["type"] == "send_email"
    assert lines["payload"] == '{"to": "a@example.com"}'
    as_json = json.loads(taskforge("--json", "get", job_id).out)
    assert as_json["id"] == job_id and as_json["payload"] == {"to": "a@example.com"}


def test_enqueue_json_takes_every_option(taskforge: Taskforge) -> None:
    queue = fresh_queue()
    job = enqueue_json(
        taskforge,
        "report",
        "{}",
        "--queue", queue,
        "--priority", "9",
        "--max-retries", "2",
        "--at", "2099-01-01T00:00:00Z",
        "--timeout", "90s",
        "--idempotency-key", "cli-key",
    )  # fmt: skip
    assert (job["queue"], job["priority"], job["max_retries"]) == (queue, 9, 2)
    assert job["status"] == "scheduled" and job["scheduled_at"].startswith("2099-01-01T00:00:00")
    assert job["timeout"] == 90
    again = enqueue_json(taskforge, "report", "{}", "--queue", queue, "--priority", "9",
                         "--max-retries", "2", "--at", "2099-01-01T00:00:00Z", "--timeout", "90s",
                         "--idempotency-key", "cli-key")  # fmt: skip
    assert again["id"] == job["id"], "the same key and body: the same job"


def test_enqueue_reads_the_payload_from_a_file_or_stdin(
    taskforge: Taskforge, tmp_path: Path
) -> None:
    path = tmp_path / "job.json"
    path.write_text('{"from": "file"}')
    assert enqueue_json(taskforge, "t", f"@{path}")["payload"] == {"from": "file"}
    assert enqueue_json(taskforge, "t", "-", input='{"from": "stdin"}')["payload"] == {
        "from": "stdin"
    }
    assert enqueue_json(taskforge, "t")["payload"] == {}


def test_enqueue_with_delay(taskforge: Taskforge, gw: Gunicorn) -> None:
    job = enqueue_json(taskforge, "t", "--delay", "5m")
    assert job["status"] == "scheduled" and job["scheduled_at"] is not None
    assert enqueue_json(taskforge, "t", "--delay", "0")["status"] == "pending"


def test_history_and_cancel(taskforge: Taskforge, engine: Scripts) -> None:
    queue = fresh_queue()
    job_id = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    canceled = taskforge("cancel", job_id)
    assert canceled.code == Exit.OK and canceled.out.strip() == f"{job_id} canceled"
    assert json.loads(taskforge("--json", "cancel", job_id).out)["status"] == "canceled"
    shown = taskforge("history", job_id)
    assert shown.code == Exit.OK
    header, *rows = shown.out.splitlines()
    assert header.split()[:4] == ["AT", "EVENT", "ATTEMPT", "ACTOR"]
    assert [row.split()[1] for row in rows] == ["enqueued", "canceled"]
    doc = json.loads(taskforge("--json", "history", job_id).out)
    assert [entry["event"] for entry in doc["history"]] == ["enqueued", "canceled"]
    # A finished job cannot be canceled: a conflict, exit 1, one line.
    done = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    token = engine.claim("w", queue=queue).token
    engine.complete(done, token, queue=queue)
    refused = taskforge("cancel", done)
    assert refused.code == Exit.API_ERROR and "409" in refused.error_line()


@pytest.mark.parametrize("ends", ["canceled", "completed"])
def test_cancel_of_a_running_job_says_requested_and_waits_for_its_end(
    taskforge: Taskforge, engine: Scripts, ends: str
) -> None:
    queue = fresh_queue()
    running = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    token = engine.claim("w", queue=queue).token
    asked = taskforge("cancel", running, "--by", "ops")
    assert asked.code == Exit.OK
    assert asked.out.strip() == f"{running} cancel requested (still processing)"
    assert (
        "cancel asked" in taskforge("get", running).out
        and "by ops" in taskforge("get", running).out
    )

    def worker_ends() -> None:  # what the worker does once its supervisor tells it
        if ends == "canceled":
            engine.cancel_running(running, token, "sigterm", queue=queue)
        else:
            engine.complete(running, token, queue=queue)

    timer = threading.Timer(0.3, worker_ends)
    timer.start()
    try:
        waited = taskforge("cancel", running, "--wait", "--timeout", "10")
    finally:
        timer.join(timeout=10)
    if ends == "canceled":
        assert waited.code == Exit.OK and "canceled" in waited.out
    else:
        assert waited.code == Exit.API_ERROR and "completed before" in waited.error_line()
    shown = taskforge("history", running).out
    assert "asked by ops" in shown
    if ends == "canceled":
        assert "stopped: sigterm" in shown


def test_jobs_ls_pages_with_a_cursor_or_follows_them_all(taskforge: Taskforge) -> None:
    queue = fresh_queue()
    ids = [enqueue_json(taskforge, "t", "--queue", queue)["id"] for _ in range(5)]
    first = taskforge("jobs", "ls", "--state", "pending", "--queue", queue, "--limit", "2")
    assert first.code == Exit.OK
    header, *rows = first.out.splitlines()
    assert header.split() == ["ID", "TYPE", "QUEUE", "STATUS", "PRIORITY", "ATTEMPTS", "CREATED"]
    assert [row.split()[0] for row in rows] == ids[:2]
    assert first.err.startswith("more: --cursor ")
    cursor = first.err.split()[-1]
    rest = taskforge(
        "--json", "jobs", "ls", "--state", "pending", "--queue", queue, "--cursor", cursor
    )
    assert [job["id"] for job in json.loads(rest.out)["jobs"]] == ids[2:]
    every = taskforge(
        "--json", "jobs", "ls", "--state", "pending", "--queue", queue, "--limit", "2", "--all"
    )
    doc = json.loads(every.out)
    assert [job["id"] for job in doc["jobs"]] == ids and doc["next_cursor"] is None
    assert every.err == ""
    empty = taskforge("jobs", "ls", "--state", "dead", "--queue", queue)
    assert empty.code == Exit.OK and empty.out.strip() == "no jobs"


def test_jobs_ls_without_a_state_lists_every_state_in_lifecycle_order(
    taskforge: Taskforge, engine: Scripts
) -> None:
    queue = fresh_queue()
    # Each run to its end before the next is enqueued: a claim takes the queue's best job.
    dead = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    kill(engine, queue, dead)
    done = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    complete(engine, queue, done)
    later = enqueue_json(taskforge, "t", "--queue", queue, "--delay", "1h")["id"]
    waiting = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    wanted = [(waiting, "pending"), (later, "scheduled"), (done, "completed"), (dead, "dead")]

    shown = taskforge("jobs", "ls", "--queue", queue, "--limit", "3")
    assert shown.code == Exit.OK, shown.err
    header, *rows = shown.out.splitlines()
    assert "STATUS" in header.split()
    column = header.split().index("STATUS")
    assert [(row.split()[0], row.split()[column]) for row in rows] == wanted[:3]
    assert shown.err.startswith("more: --cursor ")
    rest = taskforge("--json", "jobs", "ls", "--queue", queue, "--cursor", shown.err.split()[-1])
    assert [(job["id"], job["status"]) for job in json.loads(rest.out)["jobs"]] == wanted[3:]
    every = taskforge("--json", "jobs", "ls", "--queue", queue, "--limit", "1", "--all")
    doc = json.loads(every.out)
    assert [(job["id"], job["status"]) for job in doc["jobs"]] == wanted
    assert doc["next_cursor"] is None
    # Exactly a page of jobs: one page, and no "more" leading to an empty one.
    exact = taskforge("jobs", "ls", "--queue", queue, "--limit", str(len(wanted)))
    assert exact.code == Exit.OK and len(exact.out.splitlines()) == 1 + len(wanted)
    assert "more:" not in exact.err, exact.err


def test_jobs_ls_of_scheduled_or_retrying_jobs_shows_when_each_runs(
    taskforge: Taskforge, engine: Scripts
) -> None:
    queue = fresh_queue()
    failing = enqueue_json(taskforge, "t", "--queue", queue)["id"]
    result = engine.fail(failing, claim(engine, queue, failing), "E: again", queue=queue)
    assert result.code is Code.RETRYING, result
    later = enqueue_json(taskforge, "t", "--queue", queue, "--delay", "1h")

    for state, job_id, field in (
        ("scheduled", later["id"], "scheduled_at"),
        ("retrying", failing, "next_retry_at"),
    ):
        shown = taskforge("jobs", "ls", "--state", state, "--queue", queue)
        assert shown.code == Exit.OK, shown.err
        header, row = shown.out.splitlines()
        assert header.split()[-3:] == ["CREATED", "RUNS", "AT"], header
        doc = json.loads(taskforge("--json", "get", job_id).out)
        runs_at = datetime.fromisoformat(doc[field].replace("Z", "+00:00"))
        assert row.split()[0] == job_id
        assert row.split()[-1] == runs_at.strftime("%Y-%m-%dT%H:%M:%SZ"), (row, doc[field])
    enqueue_json(taskforge, "t", "--queue", queue)
    pending = taskforge("jobs", "ls", "--state", "pending", "--queue", queue)
    assert pending.out.splitlines()[0].split()[-1] == "CREATED"  # runs as soon as claimed


# --- wait (GET /jobs/<id>?wait=) ----------------------------------------


def test_wait_exits_by_outcome(taskforge: Taskforge, engine: Scripts) -> None:
    queue = fresh_queue()
    done, dead, canceled, pending = (
        enqueue_json(taskforge, "t", "--queue", queue)["id"] for _ in range(4)
    )
    complete(engine, queue, done, '{"ok": true}')
    kill(engine, queue, dead, "E: broken")
    taskforge("cancel", canceled)

    completed = taskforge("--json", "wait", done, "--timeout", "5")
    assert completed.code == Exit.OK and json.loads(completed.out)["result"] == {"ok": True}
    died = taskforge("wait", dead, "--timeout", "5")
    assert died.code == Exit.DEAD and "E: broken" in died.error_line()
    assert "status" in died.out and "dead" in died.out
    gone = taskforge("wait", canceled, "--timeout", "5")
    assert gone.code == Exit.CANCELED and "canceled" in gone.error_line()
    late = taskforge("--json", "wait", pending, "--timeout", "0.3")
    assert late.code == Exit.WAIT_TIMEOUT and "still pending" in late.error_line()
    assert f"queue '{queue}'" in late.error_line() and "taskforge queues ls" in late.error_line()
    assert json.loads(late.out)["status"] == "pending"
