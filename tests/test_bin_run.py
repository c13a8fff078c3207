"""bin/run and bin/test as a user types them: addresses, handlers, Ctrl-C, installs, lint."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.app import AUTH_DISABLED
from tests.support.tools import free_port, require_tool, wait_until
from tests.support.workerd import MARKER_ENV, marked_processes

ROOT = Path(__file__).resolve().parent.parent
RUNNING = "bin/run: ready; Ctrl-C stops everything."
START_TIMEOUT = 60.0  # the whole start; bin/run may first install into .venv
STOP_TIMEOUT = 45.0  # bin/run gives each part 30 s, then SIGKILLs it
# The environment bin/run and its parts read; a test gives each of them explicitly.
OURS = ("REDIS_URL", "PORT", "PORT_PRODUCER", "PORT_WORKER", "PROMETHEUS_MULTIPROC_DIR")


def port_answers(port: int) -> bool:
    """Return whether a Redis server answers PING on 127.0.0.1:port."""
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


def http(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """Send one request with an optional JSON body; return the status and decoded JSON."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, None  # not listening (yet)


@dataclass
class BinRun:
    """A running bin/run: what it said up to "running;", its parts' output, its ports."""

    env: dict[str, str]
    log_path: Path
    said: list[str] = field(default_factory=list)
    rest: str = ""  # what it said after Ctrl-C
    returncode: int | None = None

    def line(self, part: str) -> str:
        """Return bin/run's line about `part` (gateway, workerd, handlers, redis)."""
        found = [line for line in self.said if line.startswith(f"bin/run: {part} ")]
        assert len(found) == 1, self.said
        return found[0]

    def log_lines(self) -> list[dict[str, Any]]:
        """Return the JSON lines the parts wrote so far."""
        lines = []
        for text in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(text))
        return lines

    @property
    def gateway(self) -> str:
        """Return the gateway's URL as bin/run printed it."""
        return self.line("gateway").split()[2]

    def wait_ready(self) -> None:
        """Wait until the gateway and workerd answer /ready and both gateway workers run.

        bin/run says "running" sooner. And a gunicorn worker still forking when SIGTERM comes
        misses it (gunicorn's race), holding the stop for its 25 s graceful timeout.
        """
        for url in (self.gateway, f"http://127.0.0.1:{self.env['PORT_WORKER']}"):
            wait_until(lambda url=url: http("GET", f"{url}/ready")[0] == 200, 20, f"{url}/ready")
        wait_until(
            lambda: sum(line["event"] == "gateway_started" for line in self.log_lines()) >= 2,
            20,
            "both gateway workers",
        )


def own_environment(tmp_path: Path) -> dict[str, str]:
    """Return this environment without TaskForge's variables, every port a free one (never a
    developer's 8080, 8081 or 6399) and Redis's data under `tmp_path`."""
    base = {k: v for k, v in os.environ.items() if k not in OURS and not k.startswith("TASKFORGE_")}
    return base | {
        "TASKFORGE_REDIS_PORT": str(free_port()),
        "TASKFORGE_REDIS_DIR": str(tmp_path / "redis"),
        "PORT_PRODUCER": str(free_port()),
        "PORT_WORKER": str(free_port()),
    }


@contextlib.contextmanager
def bin_run(command: str, tmp_path: Path, **env: str) -> Iterator[BinRun]:
    """Run `command` (a shell line that starts bin/run) from the repository root until it says
    it runs; on leaving, press Ctrl-C and wait until every process it started is gone."""
    require_tool("redis-server")
    marker = uuid.uuid4().hex
    run = BinRun(own_environment(tmp_path) | {MARKER_ENV: marker} | env, tmp_path / "parts.log")
    with run.log_path.open("w") as log:
        # Its own process group, like a terminal's foreground job, so Ctrl-C is a killpg.
        proc = subprocess.Popen(
            ["bash", "-c", command],
            cwd=ROOT,
            env=run.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    # Bounds the whole run: a hung bin/run is killed, which ends the read loops below.
    watchdog = threading.Timer(START_TIMEOUT + STOP_TIMEOUT, os.killpg, (proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        for text in proc.stderr:  # type: ignore[union-attr]
            run.said.append(text.rstrip("\n"))
            if text.startswith(RUNNING):
                break
        else:
            proc.wait()
            raise AssertionError(f"bin/run exited ({proc.returncode}) before running: {run.said}")
        run.wait_ready()
        yield run
        os.killpg(proc.pid, signal.SIGINT)
        run.rest = proc.communicate(timeout=STOP_TIMEOUT)[1]
        run.returncode = proc.returncode
        wait_until(lambda: not marked_processes(marker), 10, "every bin/run process to exit")
    finally:
        watchdog.cancel()
        if proc.poll() is None:  # a failed test: stop it as a user would, SIGKILL as a last resort
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for pid in marked_processes(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_bin_run_starts_private_redis_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    with bin_run("bin/run", tmp_path) as run:
        port = int(run.env["TASKFORGE_REDIS_PORT"])
        assert f"redis://127.0.0.1:{port}/0" in run.line("redis"), run.said
        assert port_answers(port)
    assert run.returncode == 0, [*run.said, run.rest]
    assert "stopped." in run.rest
    assert not port_answers(port)
    assert (tmp_path / "redis" / "appendonlydir").is_dir()


@pytest.mark.slow
def test_port_bin_run_prints_the_loopback_address_gunicorn_bound(tmp_path: Path) -> None:
    port = free_port()
    with bin_run(f"PORT={port} bin/run", tmp_path) as run:
        assert run.line("gateway") == f"bin/run: gateway  http://127.0.0.1:{port}"
        # Read back from gunicorn itself: the address it says it listens at.
        listening = wait_until(
            lambda: [line["event"] for line in run.log_lines() if "Listening at" in line["event"]],
            10,
            "gunicorn to say where it listens",
        )
        assert re.fullmatch(rf"Listening at: http://127\.0\.0\.1:{port} \(\d+\)", listening[0])
        # Loopback only: no open-gateway warning.
        assert not [line for line in run.log_lines() if line.get("warning") == AUTH_DISABLED]


@pytest.mark.slow
def test_bin_run_beyond_loopback_without_a_token_is_said_once_naming_the_address(
    tmp_path: Path,
) -> None:
    with bin_run("TASKFORGE_BIND_HOST=0.0.0.0 bin/run", tmp_path) as run:
        port = run.env["PORT_PRODUCER"]
        assert run.line("gateway") == f"bin/run: gateway  http://0.0.0.0:{port} (every interface)"
        warnings = [line for line in run.log_lines() if line.get("warning") == AUTH_DISABLED]
        assert [w["address"] for w in warnings] == [f"0.0.0.0:{port}"], warnings


@pytest.mark.slow
def test_bin_run_names_workerd_pid_its_file_the_reload_command_and_the_demo_handlers(
    tmp_path: Path,
) -> None:
    with bin_run("bin/run", tmp_path) as run:
        worker_port = run.env["PORT_WORKER"]
        match = re.fullmatch(
            rf"bin/run: workerd  http://127\.0\.0\.1:{worker_port}/health  "
            rf"\(pid (\d+) in (var/run/workerd-{worker_port}\.pid): kill -HUP \1 reloads your handlers\)",
            run.line("workerd"),
        )
        assert match, run.said
        pid, pidfile = match[1], ROOT / match[2]
        assert pidfile.read_text().strip() == pid
        assert b"workerd" in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert run.line("handlers").startswith("bin/run: handlers workerd.demo  (bin/run's default")
    assert run.returncode == 0, [*run.said, run.rest]
    assert not pidfile.exists()


HANDLER_MODULE = """
from workerd import handler


@handler("{job_type}")
def echo(payload, job):
    return {{"echo": payload["n"], "attempt": job.attempt}}
"""


@pytest.mark.slow
def test_taskforge_handlers_myapp_tasks_bin_run_runs_your_handler(tmp_path: Path) -> None:
    # As the README says: your package in the repository root (bin/run runs from there). A
    # unique name, so a developer's own myapp/ is never touched.
    name = f"myapp_{uuid.uuid4().hex[:8]}"
    package = ROOT / name
    package.mkdir()
    try:
        (package / "__init__.py").write_text("")
        (package / "tasks.py").write_text(HANDLER_MODULE.format(job_type=name))
        with bin_run(f"TASKFORGE_HANDLERS={name}.tasks bin/run", tmp_path) as run:
            assert run.line("handlers") == f"bin/run: handlers {name}.tasks  (TASKFORGE_HANDLERS)"
            status, job = http(
                "POST", f"{run.gateway}/enqueue", {"type": name, "payload": {"n": 7}}
            )
            assert status == 201, job

            def finished() -> dict[str, Any] | None:
                job_now = http("GET", f"{run.gateway}/jobs/{job['id']}")[1]
                return job_now if job_now["status"] not in ("pending", "processing") else None

            done = wait_until(finished, 15, "the job to finish")
            assert (done["status"], done["result"]) == ("completed", {"echo": 7, "attempt": 1})
        assert run.returncode == 0, [*run.said, run.rest]
    finally:
        shutil.rmtree(package)


# --- installs and lint, in a copy of the scripts with a recording pip -------------------------

FAKE_PYTHON = """#!/bin/sh
# Records pip installs instead of making them; anything else runs the real interpreter.
if [ "$1" = -m ] && [ "$2" = pip ]; then shift 2; echo "$*" >>"$SANDBOX_LOG"; exit 0; fi
exec {python} "$@"
"""
RECORDER = '#!/bin/sh\necho "$(basename "$0") $*" >>"$SANDBOX_LOG"\n'
COPIED = ["bin", "shared", "requirements.txt", "requirements-test.txt", "requirements-tracing.txt"]
COPIED += ["pyproject.toml", "ruff.toml"]


@dataclass
class Sandbox:
    """A git checkout of the scripts and packaging files whose .venv records what pip installs."""

    root: Path
    log: Path

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        """Run a shell command line in the checkout, as a user would."""
        drop = ("VIRTUAL_ENV", "TASKFORGE_TEST_WORKERS", *OURS)  # bin/test's defaults, as a user's
        env = {k: v for k, v in os.environ.items() if k not in drop}
        return subprocess.run(
            ["bash", "-c", command],
            cwd=self.root,
            env=env | {"SANDBOX_LOG": str(self.log)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def installs(self) -> list[str]:
        """Return the requirements file of every pip install so far, in order."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line.split(" -r ")[1].split()[0] for line in lines if line.startswith("install")]

    def git(self, *args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=self.root,
            check=True,
            capture_output=True,
            timeout=30,
        )


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    require_tool("git")
    root = tmp_path / "taskforge"
    root.mkdir()
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, root / name)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text(FAKE_PYTHON.format(python=sys.executable))
    # Tools bin/test looks for or runs: recorded, except ruff, which is the real one.
    for tool in ("pytest", "redis-server", "redis-cli", "systemd-analyze", "faketime"):
        (bin_dir / tool).write_text(RECORDER)
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    (bin_dir / "ruff").symlink_to(Path(sys.executable).parent / "ruff")
    box = Sandbox(root, tmp_path / "recorded.log")
    box.git("init", "-q")
    box.git("add", "-A")
    box.git("commit", "-q", "-m", "copy")
    return box


# REDIS_URL set and no gateway/ or workerd/: bin/run sets up .venv, then has nothing to start.
RUN = "REDIS_URL=redis://127.0.0.1:1/0 bin/run"


@pytest.mark.slow
def test_bin_run_installs_the_runtime_requirements_and_bin_test_the_test_ones_once(
    sandbox: Sandbox,
) -> None:
    def after(command: str) -> list[str]:
        done = sandbox.run(command)
        assert done.returncode == 0, done.stderr
        return sandbox.installs()

    assert after(RUN) == ["requirements.txt"]
    # The server runs from the checkout: the venv finds it by a .pth (bin/_common.sh).
    [pth] = (sandbox.root / ".venv" / "lib").glob("python3.*/site-packages/taskforge-checkout.pth")
    assert pth.read_text() == f"{sandbox.root}\n"
    assert after(RUN) == ["requirements.txt"]
    assert after("bin/test") == ["requirements.txt", "requirements-test.txt"]
    # Switching back and forth installs nothing more.
    assert after(RUN) == after("bin/test") == ["requirements.txt", "requirements-test.txt"]
    # A change to the test list concerns bin/test only; one to the runtime list, both.
    with (sandbox.root / "requirements-test.txt").open("a") as extra:
        extra.write("# one more line\n")
    assert after(RUN) == ["requirements.txt", "requirements-test.txt"]
    assert after("bin/test")[2:] == ["requirements-test.txt"]
    with (sandbox.root / "requirements.txt").open("a") as extra:
        extra.write("# one more line\n")
    assert after(RUN)[3:] == ["requirements.txt"]
    assert after("bin/test")[4:] == ["requirements-test.txt"]
    # A user's own package in the root is no reason to reinstall the project.
    (sandbox.root / "myapp").mkdir()
    (sandbox.root / "myapp" / "__init__.py").write_text("")
    assert after(RUN)[5:] == after("bin/test")[5:] == []


def test_bin_test_lints_what_git_tracks_and_the_whole_tree_of_an_export(
    sandbox: Sandbox,
) -> None:
    # Unused import, unformatted: ruff check and ruff format --check would both refuse it.
    mine = sandbox.root / "myapp" / "tasks.py"
    mine.parent.mkdir()
    mine.write_text("import os\nx=1\n")
    (sandbox.root / "shared" / "engine" / "keys.py").unlink()  # tracked, deleted, not yet committed
    done = sandbox.run("bin/test -q")
    assert done.returncode == 0, done.stdout + done.stderr
    # It got as far as the tests: both phases, each with the arguments given.
    phases = [line for line in sandbox.log.read_text().splitlines() if line.startswith("pytest ")]
    assert [line.endswith(" -q") for line in phases] == [True, True], phases
    assert "-n 3" in phases[0] and "--serial=skip" in phases[0], phases
    assert "--serial=only" in phases[1] and "-n" not in phases[1].split(), phases

    sandbox.git("add", "myapp")
    done = sandbox.run("bin/test")
    assert done.returncode != 0 and "myapp/tasks.py" in done.stdout, done.stdout

    sandbox.git("rm", "-q", "--cached", "-r", "myapp")
    shutil.rmtree(sandbox.root / ".git")  # an export: no git, so every file is the project's
    done = sandbox.run("bin/test")
    assert done.returncode != 0 and "myapp/tasks.py" in done.stdout, done.stdout
    shutil.rmtree(mine.parent)
    done = sandbox.run("bin/test")
    assert done.returncode == 0, done.stdout + done.stderr


def _bin_run_until_exit(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run bin/run with free ports (overridden by `env`) and return once it exits by itself."""
    require_tool("redis-server")
    return subprocess.run(
        [str(ROOT / "bin/run")],
        cwd=ROOT,
        env=own_environment(tmp_path) | env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT + STOP_TIMEOUT,
        start_new_session=True,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "part"),
    [("TASKFORGE_REDIS_PORT", "redis"), ("PORT_PRODUCER", "gateway"), ("PORT_WORKER", "workerd")],
)
def test_a_port_in_use_stops_bin_run_before_it_starts_anything(
    tmp_path: Path, variable: str, part: str
) -> None:
    with contextlib.closing(socket.socket()) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _bin_run_until_exit(tmp_path, **{variable: str(port)})
    assert result.returncode == 1, result.stderr
    # One line, naming the part, its port and the variable that moves it.
    said = [line for line in result.stderr.splitlines() if "already in use" in line]
    assert len(said) == 1, result.stderr
    assert f"{part} port 127.0.0.1:{port} is already in use" in said[0]
    assert f"set {variable}" in said[0]
    # Nothing started: not even the private redis-server (it writes its log as it starts).
    assert not (tmp_path / "redis" / "redis.log").exists(), result.stderr
    assert "bin/run: redis    redis://" not in result.stderr  # its "started" line
    assert "ready;" not in result.stderr


@pytest.mark.slow
def test_a_handler_module_that_does_not_import_stops_bin_run_before_it_says_ready(
    tmp_path: Path,
) -> None:
    (tmp_path / "broken_tasks.py").write_text("def broken(:\n    pass\n")
    result = _bin_run_until_exit(
        tmp_path, TASKFORGE_HANDLERS="broken_tasks", PYTHONPATH=str(tmp_path)
    )
    assert result.returncode == 2, result.stderr
    # One line, before anything started: no Redis, gateway or workerd line, no "ready".
    [line] = [text for text in result.stderr.splitlines() if not text.startswith("WARNING: ")]
    assert "broken_tasks.py:1: SyntaxError" in line, result.stderr


# --- Redis never reachable: what bin/run says while it waits, and how it stops ----------------

STOP_TRIES = 5  # before the fix about half the tries hung: 5 all pass by luck 1 time in 32


@dataclass
class Unready:
    """A bin/run whose Redis never answers: its process, what it said so far, its ports."""

    proc: subprocess.Popen[str]
    env: dict[str, str]
    marker: str
    said: list[str] = field(default_factory=list)

    def read_until(self, wanted: str, timeout: float) -> str:
        """Read bin/run's stderr until a line contains `wanted`; return that line."""
        lines: list[str] = []

        def read() -> None:
            for text in self.proc.stderr:  # type: ignore[union-attr]
                self.said.append(text.rstrip("\n"))
                if wanted in text:
                    lines.append(text)
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        assert lines, f"no line with {wanted!r} within {timeout:g}s: {self.said}"
        return lines[0]


@contextlib.contextmanager
def unreachable_bin_run(tmp_path: Path) -> Iterator[Unready]:
    """Start bin/run with REDIS_URL naming a Sentinel no one listens on; kill what is left."""
    nobody = free_port()
    with started_bin_run(
        tmp_path, REDIS_URL=f"redis+sentinel://127.0.0.1:{nobody}/taskforge/0"
    ) as run:
        yield run


@contextlib.contextmanager
def started_bin_run(tmp_path: Path, **settings: str) -> Iterator[Unready]:
    """Start bin/run with `settings`, read nothing yet (the caller reads what it waits for:
    bin_run's reader would keep lines that follow "ready" in its buffer); kill what is left."""
    require_tool("redis-server")
    marker = uuid.uuid4().hex
    tmp_path.mkdir(exist_ok=True)
    env = own_environment(tmp_path) | {MARKER_ENV: marker} | settings
    with (tmp_path / "parts.log").open("w") as log:
        proc = subprocess.Popen(
            [str(ROOT / "bin/run")],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a script's background job
        )
    run = Unready(proc, env, marker)
    try:
        yield run
    finally:
        for pid in marked_processes(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.slow
def test_sigterm_to_bin_run_group_before_ready_stops_everything_every_time(
    tmp_path: Path,
) -> None:
    # The parts run, answer /ready with 503, and bin/run waits for them when the SIGTERM
    # comes: it reached bin/run's readiness checker too, and bash lost track of it.
    for attempt in range(STOP_TRIES):
        with unreachable_bin_run(tmp_path / str(attempt)) as run:
            run.read_until("bin/run: handlers ", START_TIMEOUT)
            gateway = f"http://127.0.0.1:{run.env['PORT_PRODUCER']}"
            ready = f"{gateway}/ready"
            wait_until(lambda url=ready: http("GET", url)[0] == 503, 20, "a 503 /ready")
            os.killpg(run.proc.pid, signal.SIGTERM)
            try:
                rest = run.proc.communicate(timeout=25)[1]
            except subprocess.TimeoutExpired:
                # Where it hung: every process of this run (a part in its own session too),
                # what each waits in, and the parts' last log lines after the SIGTERM.
                left = marked_processes(run.marker)
                pids = ",".join(map(str, left or [run.proc.pid]))
                tree = subprocess.run(
                    ["ps", "-ww", "-o", "pid,ppid,pgid,stat,wchan:24,etime,args", "-p", pids],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                parts_log = (tmp_path / str(attempt) / "parts.log").read_text(errors="replace")
                for pid in left:  # the parts hold bin/run's stderr open: its end needs theirs
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                run.proc.kill()
                late = run.proc.communicate(timeout=10)[1]
                raise AssertionError(
                    f"try {attempt}: bin/run hung: {run.said}\nthen: {late}\nprocesses:\n{tree}"
                    f"parts' last lines:\n{parts_log[-4000:]}"
                ) from None
            assert "bin/run: stopping ...\n" in rest, (attempt, run.said, rest)
            assert rest.endswith("bin/run: stopped.\n"), (attempt, rest)
            assert "SIGKILL" not in rest and run.proc.returncode == 0, (attempt, rest)
            assert not marked_processes(run.marker), f"try {attempt}: parts left running"
            for variable in ("PORT_PRODUCER", "PORT_WORKER"):
                with socket.socket() as probe:
                    assert probe.connect_ex(("127.0.0.1", int(run.env[variable]))) != 0


@pytest.mark.slow
def test_bin_run_says_what_it_waits_for_and_why_when_redis_never_answers(
    tmp_path: Path,
) -> None:
    with unreachable_bin_run(tmp_path) as run:
        line = run.read_until("still waiting", START_TIMEOUT + 10)
        url = run.env["REDIS_URL"]
        sentinel = url.split("//")[1].split("/")[0]
        assert line == (
            f"bin/run: still waiting for Redis ({url}: no sentinel at {sentinel} answered"
            " (connection refused))\n"
        ), run.said
        assert not [text for text in run.said if text.startswith("bin/run: ready")]
        os.killpg(run.proc.pid, signal.SIGTERM)
        rest = run.proc.communicate(timeout=25)[1]
        assert rest.endswith("bin/run: stopped.\n"), rest


@pytest.mark.slow
def test_bin_run_waiting_for_redis_logs_no_request_line_of_its_own_polls(tmp_path: Path) -> None:
    with unreachable_bin_run(tmp_path) as run:
        run.read_until("bin/run: still waiting for Redis", START_TIMEOUT + 10)
        # A load balancer's probe meanwhile is logged as ever: the access log works.
        request = urllib.request.Request(
            f"http://127.0.0.1:{run.env['PORT_PRODUCER']}/ready",
            headers={"User-Agent": "lb-probe/1"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 503
        parts_log = tmp_path / "parts.log"

        def ready_lines() -> list[dict[str, Any]]:
            lines = []
            for text in parts_log.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    line = json.loads(text)
                    if line.get("event") == "http_request" and line.get("path") == "/ready":
                        lines.append(line)
            return lines

        wait_until(ready_lines, 10, "the load balancer's /ready line")
        # bin/run polled the gateway's /ready for 5 s before it said it waits: none of it shows.
        assert [(line["status"], line["user_agent"]) for line in ready_lines()] == [
            (503, "lb-probe/1")
        ]
        os.killpg(run.proc.pid, signal.SIGTERM)
        rest = run.proc.communicate(timeout=25)[1]
        assert rest.endswith("bin/run: stopped.\n"), rest


@pytest.mark.slow
def test_bin_run_in_durable_mode_without_a_replica_says_enqueues_will_fail(
    tmp_path: Path,
) -> None:
    # bin/run's private Redis has no replica: ready (reads work), but no enqueue can succeed.
    with started_bin_run(tmp_path, TASKFORGE_WAIT_REPLICAS="1") as run:
        run.read_until(RUNNING, START_TIMEOUT)
        line = run.read_until("bin/run: warning:", 5)
        assert line == (
            "bin/run: warning: durable mode (TASKFORGE_WAIT_REPLICAS=1) but the primary has 0 of "
            "1 replica connected: every enqueue answers 503 not_replicated until enough connect\n"
        )
        for port in (run.env["PORT_PRODUCER"], run.env["PORT_WORKER"]):
            status, body = http("GET", f"http://127.0.0.1:{port}/ready")
            assert status == 200 and body["replicas"] == {"connected": 0, "wanted": 1}, body
        parts_log = (tmp_path / "parts.log").read_text()
        assert "TASKFORGE_WAIT_REPLICAS=1 but the primary has 0 of 1 replica connected" in parts_log
        os.killpg(run.proc.pid, signal.SIGTERM)
        rest = run.proc.communicate(timeout=STOP_TIMEOUT)[1]
        assert rest.endswith("bin/run: stopped.\n"), rest


@pytest.mark.slow
def test_a_second_sigterm_does_not_escalate_to_sigkill(tmp_path: Path) -> None:
    # `timeout`, a supervisor or a kill of the process group may send SIGTERM twice in quick
    # succession: the parts must still get their graceful stop. Only a second Ctrl-C forces.
    with started_bin_run(tmp_path) as run:
        run.read_until(RUNNING, START_TIMEOUT)
        parts_log = tmp_path / "parts.log"
        # A gunicorn worker still forking when SIGTERM comes would hold the stop for 25 s.
        wait_until(
            lambda: parts_log.read_text(errors="replace").count('"gateway_started"') >= 2,
            20,
            "both gateway workers",
        )
        run.proc.send_signal(signal.SIGTERM)
        run.read_until("bin/run: stopping ...", 10)  # the first one was handled
        run.proc.send_signal(signal.SIGTERM)
        rest = run.proc.communicate(timeout=STOP_TIMEOUT)[1]
        assert "SIGKILL" not in rest, rest
        assert rest.endswith("bin/run: stopped.\n"), rest
        assert run.proc.returncode == 0, rest
        wait_until(lambda: not marked_processes(run.marker), 10, "every bin/run process to exit")
