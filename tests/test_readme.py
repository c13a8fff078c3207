"""The README cannot drift: its demo runs verbatim against the stack its run command starts."""

from __future__ import annotations

import contextlib
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

from tests.support.tools import free_port, in_ci, require_tool, wait_until
from tests.support.workerd import MARKER_ENV, marked_processes

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# The demo's curl commands name these ports: the tests that bind them are marked serial, so
# bin/test runs them one at a time after its parallel phase.
DEMO_PORTS = (8080, 8081)
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


@contextlib.contextmanager
def running_stack(command: str, extra_env: dict[str, str] | None = None) -> Iterator[Path]:
    """Run a README command line that starts bin/run, from the repo root, with a fresh private
    Redis; yield the path of its output once gateway and workerd are ready; stop it as Ctrl-C
    would and check that nothing it started is left."""
    require_tool("redis-server")
    taken = [port for port in DEMO_PORTS if _port_taken(port)]
    if taken:
        message = f"the README needs ports {DEMO_PORTS}, but {taken} are in use"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    marker = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="taskforge-readme-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        for name in (
            "PORT_PRODUCER",
            "PORT_WORKER",
            "PORT",
            "PROMETHEUS_MULTIPROC_DIR",
            "TASKFORGE_HANDLERS",
            "TASKFORGE_BIND_HOST",
        ):
            env.pop(name, None)
        env |= {
            "TASKFORGE_REDIS_PORT": str(free_port()),
            "TASKFORGE_REDIS_DIR": str(Path(tmp) / "redis"),
            MARKER_ENV: marker,
        }
        env |= extra_env or {}
        log_path = Path(tmp) / "bin-run.log"
        log = open(log_path, "w+")  # noqa: SIM115 - closed below
        run = subprocess.Popen(
            ["bash", "-c", command],
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
                raise AssertionError(
                    f"bin/run did not get ready:\n{log_path.read_text()[-4000:]}"
                ) from None
            yield log_path
            os.killpg(run.pid, signal.SIGINT)  # Ctrl-C: bin/run stops what it started
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


@pytest.fixture
def stack() -> Iterator[Path]:
    """bin/run from the repo root, exactly as the Quickstart says."""
    with running_stack("bin/run") as log_path:
        yield log_path


def run_block(
    command: list[str], blocks: list[str]
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run README blocks, joined, as the last argument of `command`; return the run and a report
    of its output; fail unless it exits 0 within DEMO_TIMEOUT."""
    try:
        done = subprocess.run(
            [*command, "\n".join(blocks)],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"a README block ran over {DEMO_TIMEOUT:g}s:\n{exc.stdout}") from None
    report = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, report
    return done, report


@pytest.mark.slow
@pytest.mark.serial  # the demo's fixed ports, 8080 and 8081
def test_five_minute_demo_runs_verbatim_against_bin_run(stack: Path) -> None:
    demo, report = run_block(["bash", "-euo", "pipefail", "-c"], shell_blocks("Five-minute demo"))
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
    assert dead[0]["last_error"].startswith("NoHandler: "), report
    assert "traceback" in dead[0], report

    # Step 6: once the sleeps free the workers, send_email is claimed (and started) by priority.
    def started_priorities() -> list[int]:
        lines = [
            json.loads(line)
            for line in stack.read_text().splitlines()
            if '"job_started"' in line and '"send_email"' in line
        ]
        return [line["priority"] for line in lines]

    wait_until(lambda: len(started_priorities()) >= 3, 15, "three send_email starts")
    assert started_priorities() == [10, 5, 1]


@pytest.mark.slow
@pytest.mark.serial  # the demo's fixed ports, 8080 and 8081
def test_client_and_command_line_run_verbatim_against_bin_run(stack: Path) -> None:
    """The "Python client" block, then the "Command line" block, as a reader would run them."""
    venv_python = str(ROOT / ".venv" / "bin" / "python")
    python, report = run_block([venv_python, "-c"], [_python_block("Python client")])
    lines = python.stdout.splitlines()
    assert lines[0] == "completed {'pages': 1, 'bytes': 2048}", report
    assert lines[1].startswith("job ") and "is dead after 1 attempt: NoHandler: " in lines[1]
    assert "'pending'" in lines[2] and "'scheduled'" in lines[2], report

    shell, report = run_block(["bash", "-euo", "pipefail", "-c"], shell_blocks("Command line"))
    assert "Traceback" not in shell.stdout + shell.stderr, report
    assert "exit status 5" in shell.stdout, report  # the dead job's wait
    assert "completed" in shell.stdout and "send_email" in shell.stdout, report


# Every ```sh block of the README is run by a test: this names which, by section.
SECTIONS_RUN = {
    "Quickstart": "test_quickstart_commands_exist_and_are_executable, and every test here",
    "Five-minute demo": "test_five_minute_demo_runs_verbatim_against_bin_run",
    "Writing and running a handler": "test_handler_loop_runs_verbatim_against_bin_run",
    "Command line": "test_client_and_command_line_run_verbatim_against_bin_run",
}


def test_every_shell_block_of_the_readme_is_run_by_a_test() -> None:
    headings = re.findall(r"^## (.+)$", README.read_text(), re.M)
    with_blocks = [
        h for h in headings if any(lang in ("sh", "bash") for lang, _ in FENCE.findall(_section(h)))
    ]
    assert sorted(with_blocks) == sorted(SECTIONS_RUN), (
        "a README section with a sh block that no test runs (or a test of a block that is gone)"
    )


def _python_block(heading: str) -> str:
    blocks = [body for lang, body in FENCE.findall(_section(heading)) if lang == "python"]
    assert len(blocks) == 1, f"README.md's '{heading}' section should have one python block"
    return blocks[0]


def _post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:8080{path}", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        return json.loads(reply.read())


def _job(job_id: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:8080/jobs/{job_id}", timeout=5) as reply:
        return json.loads(reply.read())


def _finished(job_id: str) -> dict[str, Any] | None:
    job = _job(job_id)
    return job if job["status"] in ("completed", "dead") else None


def _run_to_end(body: dict[str, Any]) -> dict[str, Any]:
    job_id = _post("/enqueue", body)["id"]
    wait_until(lambda: _finished(job_id), 15, f"job {job_id} to finish")
    job = _finished(job_id)
    assert job is not None
    return job


@pytest.mark.slow
@pytest.mark.serial  # the demo's fixed ports, 8080 and 8081
def test_handler_loop_runs_verbatim_against_bin_run(tmp_path: Path) -> None:
    """The README's handler, run with its own command lines: the job runs, a failure keeps its
    traceback, and an edit is picked up by the reload line without failing a job."""
    start_line, reload_line = [
        line.split("  #", 1)[0].strip()
        for line in shell_blocks("Writing and running a handler")[0].splitlines()
        if line.strip()
    ]
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    tasks = package / "tasks.py"
    source = _python_block("Writing and running a handler")
    tasks.write_text(source)
    # "put its parent on PYTHONPATH", as the README offers: the checkout stays untouched.
    with running_stack(start_line, {"PYTHONPATH": str(tmp_path)}) as log_path:
        assert "myapp.tasks" in log_path.read_text()
        done = _run_to_end({"type": "send_invoice", "payload": {"customer": "ada"}})
        assert (done["status"], done["result"]) == ("completed", {"sent": True})

        dead = _run_to_end({"type": "send_invoice", "payload": {}})
        assert dead["status"] == "dead" and dead["attempts"] == 1  # PermanentError: no retry
        assert dead["last_error"] == "PermanentError: no customer: retrying cannot help"
        assert "in send_invoice" in dead["traceback"]

        edited = source.replace('return {"sent": True}', 'return {"sent": "edited"}')
        assert edited != source, "the README handler no longer returns {'sent': True}"
        tasks.write_text(edited)
        pid_before = Path(ROOT / "var/run/workerd-8081.pid").read_text().strip()
        subprocess.run(["bash", "-c", reload_line], cwd=ROOT, check=True, timeout=10)

        results = []

        def reloaded() -> bool:
            job = _run_to_end({"type": "send_invoice", "payload": {"customer": "ada"}})
            assert job["status"] == "completed", job  # no job fails across the reload
            results.append(job["result"]["sent"])
            return job["result"] == {"sent": "edited"}

        wait_until(reloaded, 60, "the edited handler to run after the reload")
        assert set(results) <= {True, "edited"}
        assert Path(ROOT / "var/run/workerd-8081.pid").read_text().strip() == pid_before
        assert '"supervisor_reloading"' in log_path.read_text()


def test_the_honcho_line_tested_is_the_one_documented() -> None:
    from tests.deploy.test_procfile import HONCHO_LINE

    assert HONCHO_LINE in (ROOT / "docs" / "DEPLOYMENT.md").read_text()
