"""Schemathesis against real gunicorn with a live workerd host: the OpenAPI document and the
server agree, both ways.

`st run --checks all` over every phase: examples, coverage (boundary and just-outside values
of every parameter and field), fuzzing (valid and invalid inputs), and stateful (call chains
along the links it infers, Location headers included). A check fails when the server answers
5xx, answers a status, header, content type or body the document does not list (each event of
GET /events included), refuses a request the document allows, or accepts one it forbids (a
missing or wrong token included). The workerd host runs a job through the whole run and has
completed and dead ones, so GET /workers lists busy and idle processes and events flow.

Why the CLI and not the pytest plugin: it runs all four phases and every check under one seed
in one process; the plugin would need a test per operation plus a separate state machine,
configured apart, to do the same. tests/gateway/test_document_findings.py pins what earlier
runs found; bench/schemathesis_wide.py runs more seeds and examples.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.gateway.conftest import TOKEN
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.schemathesis_run import live_fleet, run_schemathesis, seed_examples

# Every operation in the OpenAPI document, GET /events included (its stream is read until a
# few events or a second have passed): a new route must be fuzzed too.
OPERATIONS = 34
# A fixed seed, one worker and no example database: every run draws the same inputs, so the
# test cannot flake on a rare draw and a failure reproduces with the command it prints.
SEED = 12
# Per operation, for fuzzing; coverage and stateful go their own length. No --max-time: it
# would make Schemathesis repeat fuzzing and stateful chains until the budget is spent, so how
# much ran (a phase at all, on a loaded machine) would depend on the machine's speed. The
# examples bound the run instead, the same requests every time (some 45 s a test, start-up
# included, on a loaded 2-core machine); RUN_TIMEOUT is the time limit.
MAX_EXAMPLES = 10
MIN_REQUESTS = 150
# The run with a token checks what a token changes (every operation answers 401 without it or
# with a wrong one, and the same as the open run with it): fewer examples find that.
TOKEN_MAX_EXAMPLES = 5
TOKEN_MIN_REQUESTS = 100
RUN_TIMEOUT = 180.0  # seconds; a hung server must fail the test, not stall the suite
PHASES = ("Examples", "Coverage", "Fuzzing", "Stateful")


@pytest.fixture
def dead_jobs(r: redis.Redis) -> list[str]:
    """Seed what the document's examples name on the emptied Redis (dead jobs among them)."""
    return seed_examples(Scripts(r, Keys()))


def schemathesis(
    gw: Gunicorn, redis_url: str, tmp: Path, *headers: str, examples: int = MAX_EXAMPLES
) -> str:
    """Run `st run --checks all`, every phase, on `gw` with a live workerd host; return its
    output, failing on any finding."""
    with live_fleet(redis_url, gw, tmp, *headers):
        run = run_schemathesis(
            gw.url,
            tmp,
            *headers,
            seed=SEED,
            examples=examples,
            timeout=RUN_TIMEOUT,
        )
    assert run.returncode == 0, run.output[-6000:]
    return run.output


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
    gateway_server: Gunicorn, redis_server: RedisServer, dead_jobs: list[str], tmp_path: Path
) -> None:
    assert_thorough(schemathesis(gateway_server, redis_server.url, tmp_path))


@pytest.mark.slow
def test_a_gateway_with_a_token_matches_its_document(
    redis_server: RedisServer, dead_jobs: list[str], tmp_path: Path
) -> None:
    # ignored_auth also sends requests without the header and with a wrong token: 401s, far
    # more than a client address may send before its lockout (tests/gateway/test_lockout.py).
    unlocked = {"TASKFORGE_AUTH_MAX_FAILURES": "1000000"}
    with run_gunicorn(redis_server.url, tmp_path, TASKFORGE_API_TOKEN=TOKEN, **unlocked) as gw:
        header = f"Authorization: Bearer {TOKEN}"
        output = schemathesis(gw, redis_server.url, tmp_path, header, examples=TOKEN_MAX_EXAMPLES)
        assert_thorough(output, TOKEN_MIN_REQUESTS)
