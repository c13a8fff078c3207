"""Schemathesis against real gunicorn: the OpenAPI document and the server agree, both ways.

`st run --checks all` over every phase: examples, coverage (boundary and just-outside values
of every parameter and field), fuzzing (valid and invalid inputs), and stateful (call chains,
with links it also learns from Location headers). A check fails when the server answers 5xx,
answers a status, header, content type or body the document does not list, refuses a request
the document allows, or accepts one it forbids (a missing or wrong token included).

Why the CLI and not the pytest plugin: it is the command the API's first fuzzing findings came from, and
it runs all four phases and every check under one seed in one process; the plugin would need
a test per operation plus a separate state machine, configured apart, to do the same.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from gateway.openapi import HOST_EXAMPLE
from gateway.openapi_schedules import SCHEDULE_EXAMPLE
from shared.keys import Keys
from shared.schedules import parse_entry
from shared.scripts import Scripts
from tests.gateway import helpers
from tests.gateway.conftest import TOKEN
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT
from workerd.periodic import Periodic

ST = Path(sys.executable).with_name("st")
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
# Every operation in the OpenAPI document: a new route must be fuzzed too.
OPERATIONS = 33
# A fixed seed, one worker and no example database: every run draws the same inputs, so the
# test cannot flake on a rare draw and a failure reproduces with the command it prints.
SEED = 12
# Per operation, for fuzzing; coverage and stateful go their own length. 50 sends some 800
# requests per gateway in about 25 s on a 2-core machine shared with other test runs.
MAX_EXAMPLES = 50
MIN_REQUESTS = 600
# The run with a token checks what a token changes (every operation answers 401 without it or
# with a wrong one, and the same as the open run with it): fewer examples find that, and the
# suite's time budget is better spent on the open run's thorough one.
TOKEN_MAX_EXAMPLES = 20
TOKEN_MIN_REQUESTS = 300
RUN_TIMEOUT = 240.0  # seconds; a hung server must fail the test, not stall the suite
PHASES = ("Examples", "Coverage", "Fuzzing", "Stateful")
DEAD_JOBS = 20


@pytest.fixture
def dead_jobs(r: redis.Redis) -> list[str]:
    """Seed dead jobs on the emptied Redis: GET /dlq lists their ids for replay and purge; a
    workerd host under the document's example name, so quiet and resume reach a live one; and
    a schedule under its example name, so its pause and resume reach a published one."""
    scripts = Scripts(r, Keys())
    schedule = parse_entry(SCHEDULE_EXAMPLE, {"cron": "0 3 * * *", "job": {"type": "report"}})
    Periodic(scripts, [schedule]).publish()
    host = {"host": "worker-1", "pid": 4242, "workers": 2, "busy": 0, "queues": "default"}
    scripts.heartbeat(HOST_EXAMPLE, host, ttl_ms=3_600_000)
    return [helpers.dead(scripts) for _ in range(DEAD_JOBS)]


def schemathesis(gw: Gunicorn, tmp: Path, *headers: str, examples: int = MAX_EXAMPLES) -> str:
    """Run `st run --checks all`, every phase, on `gw`; return its output, failing on any finding."""
    args = [str(ST), "run", f"http://127.0.0.1:{gw.port}/openapi.json", "--checks", "all"]
    args += ["--phases", "examples,coverage,fuzzing,stateful", "--workers", "1"]
    args += ["--seed", str(SEED), "--max-examples", str(examples)]
    args += ["--generation-database", "none", "--request-timeout", "10", "--no-color"]
    # GET /events answers with a stream that stays open: every fuzzed call would hang until
    # the request timeout and then count as a failure. tests/gateway/test_events.py and
    # test_api.py check its inputs, errors and document instead.
    args += ["--exclude-operation-id", "streamEvents"]
    for header in headers:
        args += ["--header", header]
    # Valid waits are shortened before they are sent (why: the hooks module's docstring).
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "PYTHONPATH": str(ROOT)}
    # cwd: a directory of its own, so no schemathesis.toml or report lands in the checkout.
    run = subprocess.run(
        args, cwd=tmp, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    return output


def assert_thorough(output: str, min_requests: int = MIN_REQUESTS) -> None:
    """Assert the run tested every operation in every phase with enough requests."""
    assert f"Tested: {OPERATIONS}" in output, output[-3000:]
    for phase in PHASES:
        # A skipped phase ("⏭ Stateful") would pass vacuously.
        assert re.search(rf"✅ +{phase}", output), f"{phase} did not run:\n{output[-3000:]}"
    generated, passed = map(int, re.search(r"(\d+) generated, (\d+) passed", output).groups())
    assert generated == passed >= min_requests, output[-3000:]


@pytest.mark.slow
def test_an_open_gateway_matches_its_document(
    gateway_server: Gunicorn, dead_jobs: list[str], tmp_path: Path
) -> None:
    assert_thorough(schemathesis(gateway_server, tmp_path))


@pytest.mark.slow
def test_a_gateway_with_a_token_matches_its_document(
    redis_server: RedisServer, dead_jobs: list[str], tmp_path: Path
) -> None:
    # ignored_auth also sends requests without the header and with a wrong token: 401s, far
    # more than a client address may send before its lockout (tests/gateway/test_lockout.py).
    unlocked = {"TASKFORGE_AUTH_MAX_FAILURES": "1000000"}
    with run_gunicorn(redis_server.url, tmp_path, TASKFORGE_API_TOKEN=TOKEN, **unlocked) as gw:
        output = schemathesis(
            gw, tmp_path, f"Authorization: Bearer {TOKEN}", examples=TOKEN_MAX_EXAMPLES
        )
        assert_thorough(output, TOKEN_MIN_REQUESTS)
