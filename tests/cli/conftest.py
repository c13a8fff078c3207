"""Fixtures for the CLI tests: ``taskforge`` run in-process (click's isolation, through the same
``run`` the console script calls) or as ``python -m taskforge``, against the real gateway."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner

from shared.engine.scripts import Scripts
from taskforge.cli import run
from tests.support.engine_jobs import engine_on
from tests.support.gunicorn import Gunicorn
from tests.support.tools import ROOT
from tests.workerd.conftest import start_workerd  # noqa: F401 (a fixture)

SUBPROCESS_TIMEOUT = 30.0
# The test's environment must not choose the gateway or the token for a command.
CLEAN_ENV: dict[str, str | None] = {"TASKFORGE_URL": None, "TASKFORGE_API_TOKEN": None}


@dataclass
class Outcome:
    """What one run of ``taskforge`` did."""

    code: int
    out: str
    err: str

    def error_line(self) -> str:
        """Return stderr, checked to be exactly one ``taskforge: error:`` line and no traceback."""
        assert "Traceback" not in self.out + self.err
        lines = self.err.splitlines()
        assert len(lines) == 1, f"expected one error line, got {self.err!r}"
        assert lines[0].startswith("taskforge: error: "), lines[0]
        return lines[0]


Taskforge = Callable[..., Outcome]


def invoke(
    *args: str, input: str | None = None, env: dict[str, str | None] | None = None
) -> Outcome:
    """Run ``taskforge args...`` in this process; return its exit status and output."""
    runner = CliRunner()
    with runner.isolation(input=input, env={**CLEAN_ENV, **(env or {})}) as (out, err, _):
        code = run(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
    outcome = Outcome(code, out.getvalue().decode(), err.getvalue().decode())
    assert "Traceback" not in outcome.out + outcome.err
    return outcome


@pytest.fixture
def taskforge(gw: Gunicorn) -> Taskforge:
    """Return a runner of ``taskforge --url <the real gateway> --retries 1 ...``."""

    def call(*args: str, **options: Any) -> Outcome:
        return invoke("--url", gw.url, "--retries", "1", *args, **options)

    return call


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m taskforge args...`` from the repository (not the venv's script)."""
    return subprocess.run(
        [sys.executable, "-m", "taskforge", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
        check=False,
    )


@pytest.fixture
def engine(r: Any) -> Scripts:
    """Return the engine's scripts on the private Redis, to play the worker's part."""
    return engine_on(r)
