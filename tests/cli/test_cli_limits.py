"""``taskforge limits ls | set | clear`` and the HELD column of ``queues ls``, against the real
gateway (tests/engine/test_limits.py proves the limits themselves on a real Redis)."""

from __future__ import annotations

import json

from shared.engine.scripts import Scripts
from taskforge.cli.command_group import Exit
from tests.cli.conftest import Taskforge
from tests.support.engine_jobs import fresh_queue


def test_limits_set_ls_clear(taskforge: Taskforge, engine: Scripts) -> None:
    queue = fresh_queue()
    done = taskforge("limits", "set", "--queue", queue, "--concurrency", "10", "--rate", "100/1m")
    assert done.code == Exit.OK, done.err
    done = taskforge("limits", "set", "-q", queue, "-t", "generate_pdf", "-c", "1")
    assert done.code == Exit.OK, done.err
    taskforge("enqueue", "generate_pdf", "--queue", queue)
    taskforge("enqueue", "generate_pdf", "--queue", queue)
    assert engine.claim("w1", queue=queue) is not None
    assert engine.claim("w2", queue=queue) is None  # the second is held

    listed = taskforge("limits", "ls")
    header, *rows = listed.out.splitlines()
    assert header.split() == ["QUEUE", "SCOPE", "CONCURRENCY", "RATE", "RUNNING", "HELD"]
    mine = [row.split() for row in rows if row.startswith(queue)]
    assert mine == [
        [queue, "(queue)", "10", "100/m", "1", "1"],
        [queue, "generate_pdf", "1", "-", "1", "1"],
    ]
    queues = taskforge("queues", "ls").out.splitlines()
    assert queues[0].split()[-1] == "HELD"
    row = next(r.split() for r in queues if r.startswith(queue))
    assert row[2] == "1" and row[-1] == "1"  # PENDING counts the held job, HELD says it is

    pending = taskforge("--json", "jobs", "ls", "--queue", queue, "--state", "pending").out
    (held_id,) = [job["id"] for job in json.loads(pending)["jobs"]]
    history = taskforge("history", held_id).out
    assert "held" in history and "concurrency limit" in history  # DETAIL says which limit

    only_types = fresh_queue()
    taskforge("limits", "set", "-q", only_types, "-t", "generate_pdf", "-c", "1")
    rows = [
        r.split() for r in taskforge("limits", "ls").out.splitlines() if r.startswith(only_types)
    ]
    assert rows == [[only_types, "generate_pdf", "1", "-", "0", "0"]]  # no "(queue)" row

    doc = json.loads(taskforge("--json", "limits", "clear", "-q", queue, "-t", "generate_pdf").out)
    assert doc["types"] == {} and doc["concurrency"] == 10
    cleared = taskforge("limits", "clear", "--queue", queue)
    assert cleared.out.strip() == f"{queue}: no limits"


def test_a_bad_rate_is_one_error_line(taskforge: Taskforge) -> None:
    bad = taskforge("limits", "set", "--rate", "ten a second")
    assert bad.code != Exit.OK
    assert "N/PERIOD" in bad.error_line()
    nothing = taskforge("limits", "set")
    assert nothing.code == Exit.USAGE and "--concurrency" in nothing.err
