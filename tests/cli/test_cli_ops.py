"""``taskforge dlq|stats|workers|queues``, human and --json, on the real gateway."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

from shared.engine.scripts import Scripts
from taskforge import Client
from taskforge.cli import Exit
from tests.cli.conftest import SUBPROCESS_TIMEOUT, Taskforge
from tests.support.engine_jobs import complete, fresh_queue, kill
from tests.support.gunicorn import Gunicorn
from tests.support.tools import ROOT, wait_until

CLEAR = b"\x1b[H\x1b[2J"


def dead_jobs(taskforge: Taskforge, engine: Scripts, queue: str, count: int) -> list[str]:
    """Enqueue `count` jobs into `queue` through the CLI and kill each; return their ids."""
    ids = []
    for n in range(count):
        job_id = taskforge("enqueue", "t", f'{{"n": {n}}}', "--queue", queue).out.strip()
        kill(engine, queue, job_id, f"E: number {n}")
        ids.append(job_id)
    return ids


def test_dlq_ls_shows_dead_jobs_with_their_error(taskforge: Taskforge, engine: Scripts) -> None:
    queue = fresh_queue()
    ids = dead_jobs(taskforge, engine, queue, 3)
    shown = taskforge("dlq", "ls")
    assert shown.code == Exit.OK
    header, *rows = shown.out.splitlines()
    assert header.split()[:4] == ["ID", "TYPE", "QUEUE", "ATTEMPTS"] and "LAST ERROR" in header
    assert sorted(row.split()[0] for row in rows) == sorted(ids)
    assert all("E: number" in row for row in rows)
    page = taskforge("--json", "dlq", "ls", "--limit", "2")
    assert len(json.loads(page.out)["jobs"]) == 2 and page.err == ""
    every = json.loads(taskforge("--json", "dlq", "ls", "--limit", "2", "--all").out)
    assert sorted(job["id"] for job in every["jobs"]) == sorted(ids)


def test_dlq_ls_filters_by_queue_and_type(taskforge: Taskforge, engine: Scripts) -> None:
    queue, other = fresh_queue(), fresh_queue()
    mine = dead_jobs(taskforge, engine, queue, 2)
    dead_jobs(taskforge, engine, other, 1)
    shown = json.loads(taskforge("dlq", "ls", "--queue", queue, "--all", "--json").out)
    assert sorted(job["id"] for job in shown["jobs"]) == sorted(mine)
    none = taskforge("dlq", "ls", "--queue", queue, "--type", "no_such_type")
    assert none.code == Exit.OK and none.out.strip() == "no jobs"


def test_dlq_retry_by_ids_and_by_queue_page_by_page(taskforge: Taskforge, engine: Scripts) -> None:
    queue, other = fresh_queue(), fresh_queue()
    ids = dead_jobs(taskforge, engine, queue, 5)
    theirs = dead_jobs(taskforge, engine, other, 1)
    unknown = str(uuid.uuid4())
    by_id = taskforge("dlq", "retry", ids[0], unknown)
    assert by_id.code == Exit.OK
    assert by_id.out.splitlines() == ["replayed 1, skipped 1", f"skipped {unknown}: not found"]
    by_queue = taskforge("--json", "dlq", "retry", "--queue", queue, "--page", "2")
    doc = json.loads(by_queue.out)
    assert (
        sorted(doc["done"]) == sorted(ids[1:])
        and doc["skipped"] == []
        and doc["next_cursor"] is None
    )
    shown = json.loads(taskforge("--json", "jobs", "ls", "--state", "dead").out)
    assert [job["id"] for job in shown["jobs"]] == theirs


def test_dlq_purge_asks_first_unless_yes(taskforge: Taskforge, engine: Scripts) -> None:
    queue = fresh_queue()
    ids = dead_jobs(taskforge, engine, queue, 3)
    declined = taskforge("dlq", "purge", "--queue", queue, input="n\n")
    assert declined.code == Exit.API_ERROR
    assert f"every dead job in queue {queue} (3 now)" in declined.err
    assert declined.err.splitlines()[-1].startswith("taskforge: error: not confirmed")
    assert len(json.loads(taskforge("--json", "dlq", "ls").out)["jobs"]) == 3
    no_answer = taskforge("dlq", "purge", ids[0], input="")
    assert no_answer.code == Exit.API_ERROR, "end of input is a no"
    assert "Purge the 1 job given (those dead) for good?" in no_answer.err
    accepted = taskforge("dlq", "purge", ids[0], input="y\n")
    assert accepted.code == Exit.OK and "purged 1, skipped 0" in accepted.out
    forced = taskforge("--json", "dlq", "purge", "--all", "--yes")
    assert forced.code == Exit.OK and sorted(json.loads(forced.out)["done"]) == sorted(ids[1:])
    assert json.loads(taskforge("--json", "dlq", "ls").out)["jobs"] == []


def test_stats_shows_counts_per_queue_and_workers(taskforge: Taskforge, engine: Scripts) -> None:
    queue = fresh_queue()
    first = taskforge("enqueue", "t", "--queue", queue).out.strip()
    taskforge("enqueue", "t", "--queue", queue)
    complete(engine, queue, first)
    shown = taskforge("stats")
    assert shown.code == Exit.OK
    lines = shown.out.splitlines()
    assert lines[0].split()[:9] == [
        "QUEUE",
        "PENDING",
        "SCHEDULED",
        "PROCESSING",
        "RETRYING",
        "COMPLETED",
        "DEAD",
        "CANCELED",
        "TOTAL",
    ]
    mine = next(line.split() for line in lines if line.startswith(queue))
    assert mine[1:9] == ["1", "0", "0", "0", "1", "0", "0", "2"]
    assert any(line.startswith("(all)") for line in lines)
    assert lines[-1].startswith("workers: 0 hosts")
    doc = json.loads(taskforge("--json", "stats").out)
    assert doc["queues"][queue]["jobs"]["completed"] == 1 and doc["queues"][queue]["total"] == 2


def watch(gw: Gunicorn, *flags: str, tty: bool) -> tuple[int, str, str]:
    """Run ``stats --watch 0.1`` as a process (stdout a terminal or a pipe), let it refresh
    twice, Ctrl-C it; return its exit status, stdout and stderr."""
    reader, writer = pty.openpty() if tty else os.pipe()
    process = subprocess.Popen(
        [sys.executable, "-m", "taskforge", "--url", gw.url, *flags, "stats", "--watch", "0.1"],
        cwd=ROOT,
        stdout=writer,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if not k.startswith("TASKFORGE_")},
        # A shell's background job inherits SIGINT ignored, and Python keeps it so: the
        # Ctrl-C this test sends would then be lost. A terminal's user has it at its default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(writer)
    os.set_blocking(reader, False)  # so the bounded waits below never hang in a read
    chunks: list[bytes] = []
    ended = False

    def read() -> bytes:
        """Return all output so far, after reading what is there without blocking."""
        nonlocal ended
        try:
            data = os.read(reader, 65536)
        except BlockingIOError:
            data = None
        except OSError:  # EIO: a terminal whose other side has closed
            data = b""
        if data is not None:
            ended = ended or data == b""
            chunks.append(data)
        return b"".join(chunks)

    try:
        marker = CLEAR if tty else b"}\n"
        wait_until(lambda: read().count(marker) >= 2, 10.0, "stats --watch to refresh twice")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=SUBPROCESS_TIMEOUT)
        wait_until(lambda: read() is not None and ended, 5.0, "the end of its output")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(reader)
    return process.returncode, b"".join(chunks).decode(), err.decode()


def test_stats_watch_redraws_in_place_until_ctrl_c(gw: Gunicorn) -> None:
    code, out, err = watch(gw, tty=True)
    assert code == 0 and err == ""
    frames = out.split(CLEAR.decode())[1:]
    assert len(frames) >= 2 and all("QUEUE" in frame for frame in frames[:2])


def test_stats_watch_json_prints_one_line_per_refresh(gw: Gunicorn) -> None:
    code, out, err = watch(gw, "--json", tty=False)
    assert code == 0 and err == "" and "Traceback" not in out
    lines = out.splitlines()
    assert len(lines) >= 2 and all("jobs" in json.loads(line) for line in lines)


def test_queues_ls_pause_resume(taskforge: Taskforge) -> None:
    queue = fresh_queue()
    taskforge("enqueue", "t", "--queue", queue)
    paused = taskforge("queues", "pause", queue)
    assert paused.code == Exit.OK and paused.out.strip() == f"{queue} paused"
    assert paused.err == ""  # a queue with jobs is known: no note
    listed = taskforge("queues", "ls")
    header, *rows = listed.out.splitlines()
    assert header.split()[:3] == ["NAME", "STATE", "PENDING"]
    mine = next(row.split() for row in rows if row.startswith(queue))
    assert mine[1:3] == ["paused", "1"]
    doc = json.loads(taskforge("--json", "queues", "resume", queue).out)
    assert doc["name"] == queue and doc["paused"] is False
    by_name = {q["name"]: q for q in json.loads(taskforge("--json", "queues", "ls").out)["queues"]}
    assert by_name[queue]["paused"] is False and by_name[queue]["jobs"]["pending"] == 1


def test_queues_ls_pages_past_its_limit_and_all_follows_the_pages(
    taskforge: Taskforge, engine: Scripts
) -> None:
    names = {f"page-{i:03d}" for i in range(60)}
    engine.redis.sadd(engine.keys.queues, *names)  # listed, as an enqueue lists them
    first = taskforge("queues", "ls", "--limit", "20")
    assert first.code == Exit.OK and 1 < len(first.out.splitlines()) < 61
    cursor = re.fullmatch(r"more: --cursor (\d+)\n", first.err)
    assert cursor is not None, first.err
    rest = json.loads(taskforge("--json", "queues", "ls", "--cursor", cursor.group(1)).out)
    assert rest["queues"]
    every = json.loads(taskforge("--json", "queues", "ls", "--all").out)
    assert {q["name"] for q in every["queues"]} == names | {"default"}
    assert every["next_cursor"] is None
    found = json.loads(taskforge("--json", "queues", "ls", "--search", "page-05").out)
    assert {q["name"] for q in found["queues"]} == {f"page-05{i}" for i in range(10)}


def test_pausing_a_queue_nobody_knows_says_so_on_stderr_and_still_pauses_it(
    taskforge: Taskforge,
) -> None:
    typo = fresh_queue()
    paused = taskforge("queues", "pause", typo)
    assert paused.code == Exit.OK and paused.out.strip() == f"{typo} paused"
    assert paused.err == f"taskforge: note: no queue {typo!r} was known; it is listed from now on\n"
    assert taskforge("queues", "pause", typo).err == ""  # listed now
    assert taskforge("queues", "resume", typo).err == ""
    other = fresh_queue()
    resumed = taskforge("queues", "resume", other)
    # No workerd host runs here: resumed, and said to be served by none.
    assert resumed.out.strip() == f"{other} unserved" and "no queue" in resumed.err


def test_queues_rm_deletes_an_empty_queue_after_asking_and_refuses_a_busy_one(
    taskforge: Taskforge, engine: Scripts
) -> None:
    queue = fresh_queue()
    job_id = taskforge("enqueue", "t", "--queue", queue).out.strip()

    busy = taskforge("queues", "rm", queue, "--yes")
    assert busy.code == Exit.API_ERROR and busy.out == ""
    assert busy.error_line() == (
        "taskforge: error: queue kept: the queue is not empty: 1 pending (HTTP 409)"
    )

    complete(engine, queue, job_id)
    unasked = taskforge("queues", "rm", queue, input="n\n")
    assert unasked.code == Exit.API_ERROR and "nothing deleted" in unasked.err
    assert f"Delete queue {queue!r}" in unasked.err
    removed = taskforge("queues", "rm", queue, input="y\n")
    assert removed.code == Exit.OK and removed.out.strip() == f"{queue} deleted"
    names = {q["name"] for q in json.loads(taskforge("--json", "queues", "ls").out)["queues"]}
    assert queue not in names

    gone = taskforge("--json", "queues", "rm", queue, "--yes")
    assert gone.code == Exit.API_ERROR
    assert gone.error_line() == "taskforge: error: queue not found (HTTP 404)"


def test_json_may_follow_the_command_too(taskforge: Taskforge) -> None:
    queue = fresh_queue()
    made = json.loads(taskforge("enqueue", "t", "--queue", queue, "--json").out)
    listed = taskforge("jobs", "ls", "--state", "pending", "--queue", queue, "--json")
    assert [job["id"] for job in json.loads(listed.out)["jobs"]] == [made["id"]]
    assert json.loads(taskforge("queues", "ls", "--json").out)["queues"]
    assert json.loads(taskforge("dlq", "ls", "--json").out)["jobs"] is not None


def test_workers_lists_hosts_and_their_processes(
    taskforge: Taskforge, gw: Gunicorn, start_workerd: Callable[..., Any]
) -> None:
    assert taskforge("workers").out.strip() == "no live workerd hosts"
    start_workerd()
    with Client(gw.url, "") as client:
        # The registry's first heartbeat may come before the children have reported.
        hosts = wait_until(
            lambda: [h for h in client.workers() if h.processes], 15.0, "workerd's workers"
        )
    shown = taskforge("workers")
    assert shown.code == Exit.OK
    header, first = shown.out.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "HOST", "PID"] and first.split()[0] == hosts[0].name
    assert f"{hosts[0].name}:" in shown.out and "BUSY SINCE" in shown.out
    # Times to the second, as everywhere in the CLI (the gateway's carry milliseconds).
    assert re.search(r"T\d\d:\d\d:\d\dZ", shown.out) and not re.search(r"\.\d{3}Z", shown.out)
    doc = json.loads(taskforge("--json", "workers").out)
    assert [h["name"] for h in doc["hosts"]] == [hosts[0].name]
    assert len(doc["hosts"][0]["processes"]) == doc["hosts"][0]["workers"]
