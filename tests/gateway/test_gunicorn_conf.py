"""deploy/gunicorn.conf.py read as gunicorn reads it, in a subprocess (it sets os.environ)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools import ROOT

PROMETHEUS = "PROMETHEUS_MULTIPROC_DIR"

READ_CONFIG = """
import json, runpy
conf = runpy.run_path("deploy/gunicorn.conf.py")
keys = ("bind", "workers", "threads", "worker_class", "METRICS_DIR", "timeout", "keepalive")
print(json.dumps({k: conf[k] for k in keys}))
"""


def read_config(tmp_path: Path, **env: str) -> dict[str, Any]:
    """Return the settings the config file computes under `env`."""
    names = ("PORT", "PORT_PRODUCER", "TASKFORGE_BIND_HOST", "WEB_CONCURRENCY", "GUNICORN_THREADS")
    names += ("TASKFORGE_EVENTS_STREAMS",)
    base = {k: v for k, v in os.environ.items() if k not in names}
    base.update(PYTHONPATH=str(ROOT), PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "m"), **env)
    done = subprocess.run(
        [sys.executable, "-c", READ_CONFIG],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("env", "bind"),
    [
        ({"PORT": "5001", "PORT_PRODUCER": "5002"}, "0.0.0.0:5001"),
        ({"PORT_PRODUCER": "5002"}, "0.0.0.0:5002"),
        ({}, "0.0.0.0:8080"),
    ],
)
def test_bind_prefers_port_then_port_producer_then_8080(
    tmp_path: Path, env: dict[str, str], bind: str
) -> None:
    assert read_config(tmp_path, **env)["bind"] == [bind]


@pytest.mark.parametrize(
    ("host", "bind"),
    [
        ("127.0.0.1", "127.0.0.1:8080"),
        ("::1", "[::1]:8080"),
        ("localhost", "localhost:8080"),
        ("  ", "0.0.0.0:8080"),
    ],
)
def test_bind_host_comes_from_taskforge_bind_host(tmp_path: Path, host: str, bind: str) -> None:
    assert read_config(tmp_path, TASKFORGE_BIND_HOST=host)["bind"] == [bind]


@pytest.mark.parametrize(
    "env", [{}, {"PORT": "5055", "TASKFORGE_BIND_HOST": "127.0.0.1"}, {"PORT_PRODUCER": "5002"}]
)
def test_run_as_a_script_it_prints_the_address_gunicorn_binds(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # bin/run announces this output: it must be the bind gunicorn gets, not a second opinion.
    names = ("PORT", "PORT_PRODUCER", "TASKFORGE_BIND_HOST", PROMETHEUS)
    base = {k: v for k, v in os.environ.items() if k not in names}
    temp = tmp_path / "tmp"
    temp.mkdir()
    printed = subprocess.run(
        [sys.executable, "deploy/gunicorn.conf.py"],
        cwd=ROOT,
        env={**base, "TMPDIR": str(temp), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert printed.splitlines() == read_config(tmp_path, **env)["bind"]
    assert not list(temp.iterdir())  # and it made no metrics directory on the way


def test_worker_counts_come_from_the_environment(tmp_path: Path) -> None:
    conf = read_config(tmp_path, WEB_CONCURRENCY="5", GUNICORN_THREADS="3")
    # Each process also gets a thread per event stream it may serve (64 by default).
    assert (conf["workers"], conf["threads"], conf["worker_class"]) == (
        5,
        3 + 64,
        "gateway.http_worker.HeadReadingWorker",
    )


def test_by_default_a_process_has_32_threads_for_requests_and_64_for_event_streams(
    tmp_path: Path,
) -> None:
    assert read_config(tmp_path)["threads"] == 96
    assert read_config(tmp_path, TASKFORGE_EVENTS_STREAMS="10")["threads"] == 42


@pytest.mark.parametrize(
    "env",
    [
        {"PORT": "http"},
        {"PORT": "70000"},
        {"WEB_CONCURRENCY": "0"},
        {"TASKFORGE_BIND_HOST": "my host"},
        {"TASKFORGE_BIND_HOST": "0.0.0.0:80"},
        {"TASKFORGE_EVENTS_STREAMS": "0"},
    ],
)
def test_a_bad_value_stops_gunicorn_with_its_name(tmp_path: Path, env: dict[str, str]) -> None:
    error = read_config(tmp_path, **env)["error"]
    assert next(iter(env)) in error


def test_start_wipes_stale_metrics_a_killed_worker_is_replaced_and_the_directory_stays(
    start_gateway: Any, tmp_path: Path
) -> None:
    stale = tmp_path / "metrics" / "counter_999999.db"
    stale.parent.mkdir()
    stale.write_bytes(b"stale")
    with start_gateway() as gw:
        assert not stale.exists()
        assert gw.request("POST", "/enqueue", {"type": "a"})[0] == 201
        victim = gw.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        # The arbiter reaps it (child_exit marks it dead) and boots a replacement.
        deadline = time.monotonic() + 15
        while not (victim not in (pids := gw.worker_pids()) and len(pids) == 2):
            assert time.monotonic() < deadline, "the killed worker was not replaced"
            time.sleep(0.05)
        assert gw.request("GET", "/metrics")[0] == 200
    # PROMETHEUS_MULTIPROC_DIR was set: the directory is the user's and outlives gunicorn.
    assert gw.process.returncode == 0 and stale.parent.is_dir()
