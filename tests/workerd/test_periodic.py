"""Periodic schedules in real workerd processes: a bad file stops the start in one line, and
--check-config lists the schedules. Three hosts whose schedulers are SIGKILLed at random are
fault scenario 13 (tests/faults/test_scenarios.py); clock jumps are test_periodic_clock.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.engine.keys import Keys
from tests.support.tools import ROOT
from tests.support.workerd import Workerd, scrubbed_environment

K = Keys()
CLI_TIMEOUT = 30.0
# Every second, by an interval and by a six-field cron in a zone with DST: both paths.
SCHEDULES = """
[schedules.each-second]
every = "1s"
missed = "catch_up"
job = { type = "demo.noop", queue = "periodic" }

[schedules.cron-second]
cron = "* * * * * *"
timezone = "Europe/Berlin"
job = { type = "demo.noop", queue = "periodic" }
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
        '[schedules.fine]\nevery = "1m"\njob = { type = "demo.noop" }\n\n'
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
        "workerd: 2 periodic schedules: each-second (every 1s, demo.noop on periodic, "
        "missed=catch_up); cron-second (cron '* * * * * *' Europe/Berlin, demo.noop on periodic, "
        "missed=skip)"
    ) in result.stdout


@pytest.mark.slow
def test_a_reload_with_a_broken_file_keeps_the_running_schedules(
    start_workerd: Callable[..., Workerd], tmp_path: Path
) -> None:
    path = tmp_path / "schedules.toml"
    path.write_text(SCHEDULES)
    workerd = start_workerd(WORKER_COUNT="1", TASKFORGE_SCHEDULES=str(path))
    [started] = workerd.events("supervisor_started")
    assert started["schedules"] == ["each-second", "cron-second"]
    children = sorted(workerd.children())
    path.write_text(SCHEDULES.replace('every = "1s"', 'every = "soon"'))
    workerd.signal(signal.SIGHUP)
    [failed] = workerd.wait_for("reload_failed", timeout=30)
    assert 'schedule "each-second": bad interval' in failed["reason"], failed
    assert sorted(workerd.children()) == children  # nothing was stopped
