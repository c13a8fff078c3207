"""The README cannot drift: its demo runs verbatim against the stack its run command starts."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._tools import free_port, in_ci, require_tool, wait_until
from tests.workerd.conftest import MARKER_ENV, marked_processes

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEMO_PORTS = (8080, 8081)  # the demo's curl commands name these ports
READY_TIMEOUT = 90.0  # bin/run may first install the .venv dependencies
DEMO_TIMEOUT = 60.0  # the demo sleeps about 5 s; the rest is curl against localhost
STOP_TIMEOUT = 45.0  # bin/run gives each part 30 s, then SIGKILLs it


FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


def _section(heading: str) -> str:
    """Return the text of the README's ``## heading`` section, up to the next ``## ``."""
    text = README.read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def shell_blocks(heading: str) -> list[str]:
    """Return the ```sh blocks of a README section, verbatim."""
    blocks = [body for lang, body in FENCE.findall(_section(heading)) if lang in ("sh", "bash")]
    assert blocks, f"README.md's '{heading}' section has no sh block"
    return blocks


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _json_objects(text: str) -> Iterator[Any]:
    """Yield every line of `text` that is a JSON object or list."""
    for line in text.splitlines():
        line = line.strip()
        if line[:1] in "{[":
            try:
                yield json.loads(line)
            except ValueError:
                continue


def test_quickstart_commands_exist_and_are_executable() -> None:
    blocks = shell_blocks("Quickstart")
    commands = [
        line.split("#", 1)[0].split()[0]
        for block in blocks
        for line in block.splitlines()
        if line.split("#", 1)[0].strip()
    ]
    assert commands == ["bin/run", "bin/test"], commands
    for command in commands:
        path = ROOT / command
        assert path.is_file(), f"{command} named in the README does not exist"
        assert os.access(path, os.X_OK), f"{command} named in the README is not executable"


@pytest.fixture
def stack() -> Iterator[subprocess.Popen[str]]:
    """bin/run from the repo root, as the README says, with a fresh private Redis."""
    require_tool("redis-server")
    taken = [port for port in DEMO_PORTS if _port_taken(port)]
    if taken:
        message = f"the README demo needs ports {DEMO_PORTS}, but {taken} are in use"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="taskforge-readme-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        for name in ("PORT_PRODUCER", "PORT_WORKER", "PORT", "PROMETHEUS_MULTIPROC_DIR"):
            env.pop(name, None)
        env |= {
            "TASKFORGE_REDIS_PORT": str(free_port()),
            "TASKFORGE_REDIS_DIR": str(Path(tmp) / "redis"),
            MARKER_ENV: marker,
        }
        log = open(Path(tmp) / "bin-run.log", "w+")  # noqa: SIM115 - closed below
        run = subprocess.Popen(
            [str(ROOT / "bin/run")],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            try:
                wait_until(
                    lambda: run.poll() is not None or all(_ready(p) for p in DEMO_PORTS),
                    READY_TIMEOUT,
                    "gateway and workerd /ready",
                )
                assert run.poll() is None, "bin/run exited early"
            except AssertionError:
                log.seek(0)
                raise AssertionError(f"bin/run did not get ready:\n{log.read()[-4000:]}") from None
            yield run
            run.send_signal(signal.SIGTERM)  # as Ctrl-C would: bin/run stops what it started
            try:
                assert run.wait(timeout=STOP_TIMEOUT) == 0
            except subprocess.TimeoutExpired:
                raise AssertionError(f"bin/run did not stop within {STOP_TIMEOUT:g}s") from None
            wait_until(lambda: not marked_processes(marker), 5, "every bin/run process to exit")
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(timeout=10)
            for pid in marked_processes(marker):
                os.kill(pid, signal.SIGKILL)
            log.close()


@pytest.mark.slow
def test_five_minute_demo_runs_verbatim_against_bin_run(stack: subprocess.Popen[str]) -> None:
    script = "\n".join(shell_blocks("Five-minute demo"))
    try:
        demo = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the README demo ran over {DEMO_TIMEOUT:g}s:\n{exc.stdout}") from None
    report = f"stdout:\n{demo.stdout}\nstderr:\n{demo.stderr}"
    assert demo.returncode == 0, report
    objects = list(_json_objects(demo.stdout))
    jobs = [o for o in objects if isinstance(o, dict) and "status" in o and "type" in o]
    assert any(job["type"] == "generate_pdf" and job["status"] == "completed" for job in jobs), (
        report
    )
    listings = [o for o in objects if isinstance(o, dict) and isinstance(o.get("jobs"), list)]
    dead = [job for listing in listings for job in listing["jobs"] if job["type"] == "unsupported"]
    assert dead and dead[0]["status"] == "dead", report
    assert any(
        job["type"] == "unsupported"
        and job["id"] == dead[0]["id"]
        and job["status"] == "pending"
        and job["attempts"] == 0
        for job in jobs
    ), report
