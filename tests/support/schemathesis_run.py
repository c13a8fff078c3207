"""Run Schemathesis's CLI on a gateway with a live workerd fleet (the suite's test and bench/).

A fleet that runs jobs gives the run what an idle Redis never would: a host in GET /workers
with busy and idle processes, jobs that are running, completed and failed, and events flowing
on GET /events, so the stream's messages are checked against their schema too.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.contract.route_params import HOST_EXAMPLE, SCHEDULE_EXAMPLE
from shared.engine.scripts import Scripts
from shared.model.schedules import parse_entry
from tests.gateway import helpers
from tests.support.gunicorn import Gunicorn
from tests.support.tools import ROOT, free_port, wait_until
from tests.support.workerd import start_workerd, stop_all
from workerd.periodic import Periodic

ST = Path(sys.executable).with_name("st")
HOOKS = ROOT / "tests" / "gateway" / "schemathesis_hooks.py"
PHASES = ("examples", "coverage", "fuzzing", "stateful")
# A job that outlives the run keeps a process busy; the other processes run the short ones.
LONG_JOB_SECONDS = 600
SETTLE_TIMEOUT = 15.0  # seconds for the seeded jobs to complete, fail and start
# GET /events stays open: Schemathesis reads a stream until it has sent this many events or
# the operation's request timeout has passed, so a stream whose filters match nothing costs
# that timeout. Both are kept short for this one operation (the config file below).
STREAM_EVENTS = 3
STREAM_TIMEOUT = 1.0  # seconds
DEAD_JOBS = 20  # GET /dlq lists them, so replay and purge reach real dead jobs


def seed_examples(scripts: Scripts) -> list[str]:
    """Seed what the document's examples name, on an emptied Redis: dead jobs GET /dlq lists
    for replay and purge; a workerd host under the example name, so quiet and resume reach a
    live one; a schedule under its example name, so its pause and resume reach a published
    one. Return the dead jobs' ids."""
    schedule = parse_entry(SCHEDULE_EXAMPLE, {"cron": "0 3 * * *", "job": {"type": "report"}})
    Periodic(scripts, [schedule]).publish()
    host = {"host": "worker-1", "pid": 4242, "workers": 2, "busy": 0, "queues": "default"}
    scripts.heartbeat(HOST_EXAMPLE, host, ttl_ms=3_600_000)
    return [helpers.dead(scripts) for _ in range(DEAD_JOBS)]


@dataclass(frozen=True)
class Run:
    """What one `st run` said: its exit status and output."""

    returncode: int
    output: str

    def findings(self) -> dict[str, int]:
        """Return each failure kind of the summary ("ST108 SSE event violates schema") and
        how many there were; the tool's own errors are listed the same way."""
        found = re.findall(r"^ +❌ (.+?): (\d+)$", self.output, re.MULTILINE)
        return {kind: int(count) for kind, count in found}

    def requests(self) -> tuple[int, int | None]:
        """Return the cases generated and passed, as the summary counts them (passed: None
        when some failed, as the summary then counts failures instead)."""
        match = re.search(r"(\d+) generated(?:, (\d+) passed)?", self.output)
        if match is None:
            return 0, None
        return int(match[1]), None if match[2] is None else int(match[2])


def config_file(tmp: Path) -> Path:
    """Write the run's schemathesis.toml (the stream's bounds) in `tmp`; return its path."""
    path = tmp / "schemathesis.toml"
    path.write_text(
        "[[operations]]\n"
        'include-operation-id = "streamEvents"\n'
        f"request-timeout = {STREAM_TIMEOUT}\n"
        f"max-stream-events = {STREAM_EVENTS}\n"
    )
    return path


def run_schemathesis(
    url: str,
    tmp: Path,
    *headers: str,
    seed: int,
    examples: int,
    timeout: float,
    max_time: int | None = None,
) -> Run:
    """Run `st run --checks all`, every phase, against the gateway at `url`, and kill it
    after `timeout` seconds. `max_time` makes it repeat fuzzing and stateful chains until
    that many seconds are spent; without it, each phase runs once, `examples` per operation
    (the same requests on every run of a seed, however fast the machine)."""
    args = [str(ST), "--config-file", str(config_file(tmp)), "--no-color"]
    args += ["run", f"{url}/openapi.json", "--checks", "all", "--phases", ",".join(PHASES)]
    args += ["--workers", "1", "--seed", str(seed), "--max-examples", str(examples)]
    args += ["--generation-database", "none", "--request-timeout", "10"]
    if max_time is not None:
        args += ["--max-time", str(max_time)]
    for header in headers:
        args += ["--header", header]
    # Valid waits are shortened before they are sent (why: the hooks module's docstring).
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "PYTHONPATH": str(ROOT)}
    # cwd: a directory of its own, so no report lands in the checkout.
    run = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
    return Run(run.returncode, run.stdout + run.stderr)


@contextlib.contextmanager
def live_fleet(redis_url: str, gw: Gunicorn, tmp: Path, *headers: str) -> Iterator[None]:
    """Run one workerd host of three processes with a job running, one completed and one dead."""
    settings = {
        "REDIS_URL": redis_url,
        "WORKER_COUNT": "3",
        "PORT_WORKER": str(free_port()),
        "LOG_LEVEL": "WARNING",
        "TASKFORGE_HANDLERS": "workerd.demo",
        # Stop at once when the run ends: the long job is released, not waited for.
        "WORKER_DRAIN_GRACE": "0s",
    }
    host = start_workerd(settings, tmp / "workerd.log", tmp / "workerd.err")
    try:
        auth = dict(header.split(": ", 1) for header in headers)
        running = enqueue(
            gw, auth, {"type": "demo.sleep", "payload": {"seconds": LONG_JOB_SECONDS}}
        )
        done = enqueue(gw, auth, {"type": "demo.noop"})
        dead = enqueue(gw, auth, {"type": "demo.fail", "max_retries": 1})
        for job_id, state in ((running, "processing"), (done, "completed"), (dead, "dead")):
            wait_until(
                lambda job_id=job_id, state=state: job_state(gw, auth, job_id) == state,
                SETTLE_TIMEOUT,
                f"a {state} job",
            )
        yield
    finally:
        problems = stop_all([host])
        assert not problems, problems


def enqueue(gw: Gunicorn, auth: dict[str, str], body: dict[str, Any]) -> str:
    """Enqueue one job through the gateway; return its id."""
    status, _, doc = gw.request(
        "POST", "/enqueue", body, {**auth, "Content-Type": "application/json"}
    )
    assert status == 201, (status, doc)
    return doc["id"]


def job_state(gw: Gunicorn, auth: dict[str, str], job_id: str) -> str:
    """Return a job's status as GET /jobs/<id> reports it."""
    status, _, doc = gw.request("GET", f"/jobs/{job_id}", headers=auth)
    assert status == 200, (status, doc)
    return doc["status"]
