"""Periodic schedules in real workerd processes: a bad file stops the start in one line, and
three hosts whose schedulers are SIGKILLed at random still make exactly one job per tick."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared import ticks
from shared.keys import Keys
from shared.schedule_state import read_states
from shared.schedules import load_file
from tests.support.tools import ROOT, wait_until
from tests.support.workerd import Workerd, scrubbed_environment

K = Keys()
CLI_TIMEOUT = 30.0
# Every second, by an interval and by a six-field cron in a zone with DST: both paths.
SCHEDULES = """
[schedules.each-second]
every = "1s"
missed = "catch_up"
job = { type = "noop", queue = "periodic" }

[schedules.cron-second]
cron = "* * * * * *"
timezone = "Europe/Berlin"
job = { type = "noop", queue = "periodic" }
"""


def _workerd(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = scrubbed_environment() | {"PYTHONPATH": str(ROOT)} | env
    return subprocess.run(
        [sys.executable, "-m", "workerd", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def test_a_bad_expression_stops_the_start_with_one_line_naming_the_schedule(
    tmp_path: Path,
) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(
        '[schedules.fine]\nevery = "1m"\njob = { type = "noop" }\n\n'
        '[schedules.nightly-report]\ncron = "0 3 * *"\njob = { type = "generate_pdf" }\n'
    )
    env = {"TASKFORGE_HANDLERS": "workerd.demo", "TASKFORGE_SCHEDULES": str(path)}
    # No Redis is reachable at this URL: the file is refused before anything connects.
    env["REDIS_URL"] = "redis://127.0.0.1:1/0"
    for args in ((), ("--check-config",)):
        result = _workerd(*args, **env)
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            'workerd: TASKFORGE_SCHEDULES: schedule "nightly-report": bad cron expression '
            '"0 3 * *": Wrong number of fields\n'
        )
        assert result.stdout == ""


def test_check_config_lists_the_schedules(tmp_path: Path) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(SCHEDULES)
    env = {"TASKFORGE_HANDLERS": "workerd.demo", "TASKFORGE_SCHEDULES": str(path)}
    result = _workerd("--check-config", **env)
    assert result.returncode == 0, result.stderr
    assert (
        "workerd: 2 periodic schedules: each-second (every 1s, noop on periodic, "
        "missed=catch_up); cron-second (cron '* * * * * *' Europe/Berlin, noop on periodic, "
        "missed=skip)"
    ) in result.stdout


def _enqueued(r: redis.Redis) -> Counter[str]:
    """Return how many `enqueued` events each job id of the periodic queue has."""
    entries = r.xrange(K.for_queue("periodic").events)
    return Counter(f[b"j"].decode() for _, f in entries if f.get(b"e") == b"enqueued")


@pytest.mark.slow
def test_three_hosts_with_schedulers_killed_at_random_make_one_job_per_tick(
    start_workerd: Callable[..., Workerd], r: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(SCHEDULES)
    schedules = load_file(str(path))
    names = [s.name for s in schedules]
    env = {"WORKER_COUNT": "1", "TASKFORGE_SCHEDULES": str(path)}
    hosts = [start_workerd(new_session=True, **env) for _ in range(3)]

    def lasts() -> list[int | None]:
        return [state.last_ms for state in read_states(r, K, names)[1]]

    wait_until(lambda: all(lasts()), 10, "every schedule to be seen")
    first = lasts()
    rng = random.Random(17)
    deadline = time.monotonic() + 10
    kills = restarts = 0
    while time.monotonic() < deadline:
        index = rng.randrange(len(hosts))
        host = hosts[index]
        if rng.random() < 0.25:
            # The whole host: supervisor and children at once (a machine lost), then a new one.
            host.signal_group(signal.SIGKILL)
            host.wait_exit(10)
            hosts[index] = start_workerd(new_session=True, wait_ready=False, **env)
            restarts += 1
        else:
            for pid in host.children("scheduler"):
                os.kill(pid, signal.SIGKILL)  # its supervisor forks a new one
                kills += 1
        time.sleep(rng.uniform(0.2, 0.8))  # the fault schedule's pace, not a synchronisation
    for host in hosts:
        host.wait_ready()
    settled = lasts()
    wait_until(lambda: all(a > b for a, b in zip(lasts(), settled, strict=True)), 10, "a tick")
    counts = _enqueued(r)
    last = lasts()  # read after the events: a job enqueued since has a tick within 5 s of it
    known: set[str] = set()
    for schedule, start, end in zip(schedules, first, last, strict=True):
        assert start is not None and end is not None
        window = []
        # The test reads `first` a little after the hosts start: a tick or two may have run.
        for tick in ticks.ticks_after(schedule, start - 5_000):
            if tick > end + 5_000:
                break
            window.append(tick)
        ids = [ticks.job_id(schedule.name, tick) for tick in window if start < tick <= end]
        assert len(ids) >= 10, (schedule.name, window)
        # Every tick in the window has its job, enqueued once.
        assert {job_id: counts[job_id] for job_id in ids} == dict.fromkeys(ids, 1), schedule.name
        known |= {ticks.job_id(schedule.name, tick) for tick in window}
    # No job of another tick, none doubled.
    assert set(counts) <= known
    assert max(counts.values()) == 1
    assert kills + restarts >= 10, (kills, restarts)
