"""systemd units: `systemd-analyze verify` accepts them, and the stop they configure works.

The shipped units point at /opt/taskforge; verify refuses an ExecStart binary that does not
exist, so each test copies the units with that prefix swapped for a temporary tree holding
stand-in executables. Everything else is verified exactly as shipped.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shared.model.jobs import JobState
from shared.settings.config import VARIABLES
from tests.deploy.conftest import ROOT, SYSTEMD, procfile, unit_settings
from tests.support.redis_server import RedisServer
from tests.support.tools import free_port, require_tool, wait_until
from tests.support.workerd import MARKER_ENV, Workerd, marked_processes
from tests.workerd.conftest import HANDLERS, Engine, Journal

PREFIX = "/opt/taskforge"
UNITS = ["taskforge-gateway.service", "taskforge-workerd.service", "taskforge-workerd@.service"]
# What systemd loads: a template is verified through one of its instances.
LOADED = {"taskforge-workerd@.service": "taskforge-workerd@8081.service"}
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "RestrictSUIDSGID": "yes",
    "CapabilityBoundingSet": "",
}
DEFAULT_GRACE = next(v for v in VARIABLES if v.env == "WORKER_DRAIN_GRACE")
RELOAD_COMMAND = "/bin/kill -HUP $MAINPID"
# gunicorn's graceful_timeout in deploy/gunicorn.conf.py.
GUNICORN_GRACEFUL_TIMEOUT = 25.0
BOOT_TIMEOUT = 15.0
EXIT_TIMEOUT = 15.0


def _seconds(value: str) -> float:
    """Return a systemd time span given in plain seconds (the form our units use)."""
    assert value.isdigit(), f"use plain seconds in the units, not {value!r}"
    return float(value)


def _settings(unit: str) -> dict[str, list[str]]:
    return unit_settings(SYSTEMD / unit)


def _one(unit: str, key: str) -> str:
    values = _settings(unit).get(f"Service.{key}", [])
    assert len(values) == 1, f"{unit}: {key}= set {len(values)} times"
    return values[0]


def _install(tmp_path: Path) -> Path:
    """Copy the units into tmp_path/units with PREFIX swapped for stand-in executables."""
    opt = tmp_path / "opt"
    for name in ("gunicorn", "python"):
        exe = opt / ".venv" / "bin" / name
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    for unit in UNITS:
        text = (SYSTEMD / unit).read_text()
        assert PREFIX in text, f"{unit} no longer installs under {PREFIX}: update this test"
        (units / unit).write_text(text.replace(PREFIX, str(opt)))
    return units


def _verify(units: Path, unit: str) -> subprocess.CompletedProcess[str]:
    analyze = require_tool("systemd-analyze")
    return subprocess.run(
        [analyze, "verify", str(units / LOADED.get(unit, unit))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- the unit files -------------------------------------------------------------------------


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_analyze_verify_accepts_the_unit_with_nothing_on_stderr(
    unit: str, tmp_path: Path
) -> None:
    result = _verify(_install(tmp_path), unit)
    # verify exits 0 on unknown keys and bad values: stderr is the verdict.
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


def test_systemd_analyze_verify_reports_an_unknown_key_so_the_check_above_is_real(
    tmp_path: Path,
) -> None:
    units = _install(tmp_path)
    template = units / "taskforge-workerd@.service"
    template.write_text(template.read_text().replace("KillMode=", "KillModde="))
    result = _verify(units, "taskforge-workerd@.service")
    assert "Unknown key 'KillModde'" in result.stderr, result.stderr


@pytest.mark.parametrize("unit", UNITS)
def test_unit_is_a_hardened_notify_service_that_restarts_on_failure(unit: str) -> None:
    settings = _settings(unit)
    assert _one(unit, "Type") == "notify"
    # gunicorn's master and workerd's supervisor speak for the service; their children
    # inherit NOTIFY_SOCKET and must not (gunicorn's READY=1 comes from its arbiter).
    assert _one(unit, "NotifyAccess") == "main"
    assert _one(unit, "Restart") == "on-failure"
    assert _one(unit, "User") == "taskforge"
    assert settings["Service.EnvironmentFile"][0] == "/etc/taskforge/taskforge.env"
    for key, value in HARDENING.items():
        assert _one(unit, key) == value, key
    # A writable place for the Prometheus multiprocess files under ProtectSystem=strict.
    runtime = _one(unit, "RuntimeDirectory")
    assert f"PROMETHEUS_MULTIPROC_DIR=%t/{runtime}/metrics" in settings["Service.Environment"]
    assert settings["Install.WantedBy"] == ["multi-user.target"]


@pytest.mark.parametrize("unit", UNITS)
def test_unit_raises_the_open_files_limit(unit: str) -> None:
    # The gateway admits up to 10,000 connections per worker (gunicorn.conf.py), a
    # descriptor each; the default soft limit of 1,024 would let one client fill it.
    needed = 65536 if "gateway" in unit else 8192
    assert int(_one(unit, "LimitNOFILE")) >= needed


@pytest.mark.parametrize("unit", UNITS)
def test_unit_stops_with_killmode_mixed_and_a_timeout_above_the_drain(unit: str) -> None:
    assert _one(unit, "KillMode") == "mixed"
    assert _one(unit, "KillSignal") == "SIGTERM"
    timeout = _seconds(_one(unit, "TimeoutStopSec"))
    if "gateway" in unit:
        assert timeout > GUNICORN_GRACEFUL_TIMEOUT + 5
    else:
        # The drain, then the supervisor's helper-stop and final-ack windows (5 s each).
        assert timeout >= DEFAULT_GRACE.parse(DEFAULT_GRACE.default) + 10 + 5


def test_gunicorn_config_keeps_the_graceful_timeout_this_test_assumes() -> None:
    config = (ROOT / "deploy" / "gunicorn.conf.py").read_text()
    assert f"graceful_timeout = {GUNICORN_GRACEFUL_TIMEOUT:g}" in config


@pytest.mark.parametrize(
    ("unit", "process"),
    [
        ("taskforge-gateway.service", "web"),
        ("taskforge-workerd.service", "worker"),
        ("taskforge-workerd@.service", "worker"),
    ],
)
def test_unit_runs_the_procfile_command_from_the_virtualenv(unit: str, process: str) -> None:
    argv = shlex.split(_one(unit, "ExecStart"))
    if argv[0] == "/usr/bin/env":  # the template sets PORT_WORKER from its instance name
        assert argv[1] == "PORT_WORKER=%i"
        argv = argv[2:]
    assert argv[0].startswith(f"{PREFIX}/.venv/bin/")
    expected = shlex.split(procfile()[process])
    assert [Path(argv[0]).name, *argv[1:]] == expected
    assert _one(unit, "WorkingDirectory") == PREFIX


@pytest.mark.parametrize("unit", ["taskforge-workerd.service", "taskforge-workerd@.service"])
def test_workerd_units_reload_with_sighup_to_the_supervisor(unit: str) -> None:
    assert _one(unit, "ExecReload") == RELOAD_COMMAND


def test_template_instances_get_their_own_port_and_runtime_directory() -> None:
    unit = "taskforge-workerd@.service"
    assert "%i" in _one(unit, "RuntimeDirectory")
    assert "PORT_WORKER=%i" in _one(unit, "ExecStart")
    assert _settings(unit)["Service.EnvironmentFile"][1] == "-/etc/taskforge/workerd-%i.env"


def test_env_example_sets_the_default_drain_grace_the_units_were_sized_for() -> None:
    lines = (SYSTEMD / "taskforge.env.example").read_text().splitlines()
    settings = dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))
    assert settings["WORKER_DRAIN_GRACE"] == DEFAULT_GRACE.default
    known = {v.env for v in VARIABLES} | {"WEB_CONCURRENCY"}
    assert set(settings) <= known, set(settings) - known


def test_env_example_sets_the_handler_modules_workerd_requires_and_not_the_demo() -> None:
    text = (SYSTEMD / "taskforge.env.example").read_text()
    [line] = [line for line in text.splitlines() if line.startswith("TASKFORGE_HANDLERS=")]
    modules = line.partition("=")[2].split(",")
    assert modules and "workerd.demo" not in modules
    assert "refuses to start without it" in text


# --- the stop they configure, emulated --------------------------------------------------------


@contextmanager
def _notify_socket() -> Iterator[socket.socket]:
    """Yield a datagram socket like systemd's NOTIFY_SOCKET that reports each sender's pid."""
    # A short directory: AF_UNIX paths are limited to 108 bytes.
    with (
        tempfile.TemporaryDirectory(prefix="tf-notify-") as directory,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.bind(str(Path(directory) / "notify.sock"))
        sock.settimeout(BOOT_TIMEOUT)
        yield sock


def _receive(sock: socket.socket) -> tuple[int, list[str]]:
    """Return the sender's pid and the lines of one notify datagram."""
    data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(struct.calcsize("iII")))
    pids = [
        struct.unpack("iII", payload[: struct.calcsize("iII")])[0]
        for level, kind, payload in ancillary
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)
    ]
    assert len(pids) == 1, ancillary
    return pids[0], data.decode().splitlines()


def _wait_gone(marker: str, timeout: float) -> float:
    """Wait until no process carries `marker`; return how long that took."""
    start = time.monotonic()
    while marked_processes(marker):
        assert time.monotonic() - start < timeout, f"processes left: {marked_processes(marker)}"
        time.sleep(0.02)
    return time.monotonic() - start


def test_workerd_stop_as_killmode_mixed_does_it_ends_well_inside_timeoutstopsec(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    grace = 1.0
    with _notify_socket() as sock:
        workerd = start_workerd(
            wait_ready=False, NOTIFY_SOCKET=sock.getsockname(), WORKER_DRAIN_GRACE=f"{grace:g}s"
        )
        sender, lines = _receive(sock)
        assert "READY=1" in lines and sender == workerd.pid  # NotifyAccess=main is enough
        job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 30})
        journal.wait_for("start", job_id)

        # KillMode=mixed: KillSignal to the main process only; SIGKILL to all only at the end.
        signalled = time.monotonic()
        workerd.signal(signal.SIGTERM)
        sender, lines = _receive(sock)
        assert lines[0] == "STOPPING=1" and sender == workerd.pid
        assert workerd.wait_exit(timeout=EXIT_TIMEOUT) == 0
        _wait_gone(workerd.marker, EXIT_TIMEOUT)
        took = time.monotonic() - signalled

    # What the stop costs beyond the grace, added to the default grace, must leave the
    # unit's final SIGKILL unused: it is a backstop, never the way the drain ends.
    overhead = took - grace
    budget = _seconds(_one("taskforge-workerd.service", "TimeoutStopSec"))
    assert DEFAULT_GRACE.parse(DEFAULT_GRACE.default) + overhead < budget - 5, took
    job = engine.job(job_id)
    assert job.status is JobState.PENDING and job.attempts == 0  # released, not lost


@pytest.mark.slow
def test_workerd_reload_as_systemd_runs_it_reports_reloading_then_ready_from_the_main_pid(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    with _notify_socket() as sock:
        workerd = start_workerd(wait_ready=False, NOTIFY_SOCKET=sock.getsockname())
        sender, lines = _receive(sock)
        assert "READY=1" in lines and sender == workerd.pid

        # ExecReload= exactly as the unit writes it, $MAINPID expanded as systemd does.
        reload_argv = shlex.split(_one("taskforge-workerd.service", "ExecReload"))
        reload_argv = [arg.replace("$MAINPID", str(workerd.pid)) for arg in reload_argv]
        subprocess.run(reload_argv, check=True, timeout=10)

        sender, lines = _receive(sock)
        assert lines[0] == "RELOADING=1" and sender == workerd.pid, lines
        # systemd 253+ wants the reload's start on CLOCK_MONOTONIC with RELOADING=1.
        [usec] = [line.partition("=")[2] for line in lines if line.startswith("MONOTONIC_USEC=")]
        assert abs(int(usec) / 1e6 - time.monotonic()) < BOOT_TIMEOUT
        sender, lines = _receive(sock)
        assert "READY=1" in lines and sender == workerd.pid  # same main pid: NotifyAccess=main
    job_id = engine.enqueue("journal", {"file": journal.file})
    assert engine.wait_for(job_id, JobState.COMPLETED).attempts == 1
    assert workerd.stop() == 0


@pytest.mark.parametrize("kill_mode", ["mixed", "control-group"])
def test_killmode_mixed_lets_a_handlers_child_program_finish_and_control_group_does_not(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, kill_mode: str
) -> None:
    # Why the units say KillMode=mixed. Both modes send SIGTERM at first and SIGKILL at
    # TimeoutStopSec; control-group sends that SIGTERM to every process of the unit at once,
    # mixed to the main process only. workerd's own children drain correctly either way
    # (tests/workerd/test_shutdown.py), but a program a handler runs is killed mid-job by
    # control-group's SIGTERM: the job fails instead of finishing within the grace.
    workerd = start_workerd(
        TASKFORGE_HANDLERS=f"{HANDLERS},tests.deploy.handlers_for_deploy", WORKER_DRAIN_GRACE="10s"
    )
    # Long enough that the signals land while the child runs, even on a loaded machine.
    job_id = engine.enqueue("shell_out", {"file": journal.file, "seconds": 3}, max_retries=2)
    journal.wait_for("start", job_id)
    if kill_mode == "mixed":
        workerd.signal(signal.SIGTERM)
    else:
        # systemd signals the whole cgroup: every process, the handler's child too.
        for pid in workerd.processes():
            os.kill(pid, signal.SIGTERM)
    assert workerd.wait_exit(timeout=EXIT_TIMEOUT) == 0
    workerd.wait_no_processes()
    job = engine.job(job_id)
    if kill_mode == "mixed":
        assert job.status is JobState.COMPLETED
    else:
        assert job.status is JobState.RETRYING, job
        assert "child exited with -15" in (job.last_error or ""), job.last_error


def test_gunicorn_notifies_ready_from_its_master_and_stops_on_sigterm_to_it_alone(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    marker = uuid.uuid4().hex
    ours = {v.env for v in VARIABLES} | {"NOTIFY_SOCKET", "PROMETHEUS_MULTIPROC_DIR", MARKER_ENV}
    env = {k: v for k, v in os.environ.items() if k not in ours and k != "PORT"}
    with _notify_socket() as sock:
        env.update(
            REDIS_URL=redis_server.url,
            PORT=str(free_port()),
            WEB_CONCURRENCY="2",
            NOTIFY_SOCKET=sock.getsockname(),
            PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"),
            PYTHONPATH=str(ROOT),
            **{MARKER_ENV: marker},
        )
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        with open(tmp_path / "gunicorn.log", "wb") as log:
            proc = subprocess.Popen(
                [gunicorn, *shlex.split(procfile()["web"])[1:]],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            sender, lines = _receive(sock)
            assert "READY=1" in lines and sender == proc.pid  # the master: NotifyAccess=main
            start = time.monotonic()
            while len(marked_processes(marker)) < 3:  # the master and its two workers
                assert time.monotonic() - start < BOOT_TIMEOUT, marked_processes(marker)
                time.sleep(0.02)
            # And both workers booted: a worker signalled before it installs its own handlers
            # runs the master's, inherited at fork, and the SIGTERM is lost (gunicorn 23; the
            # master then waits its graceful timeout). A CI run hit it 4 ms after a fork.
            log_path = tmp_path / "gunicorn.log"
            wait_until(
                lambda: log_path.read_bytes().count(b'"event": "gateway_started"') >= 2,
                BOOT_TIMEOUT,
                "both gunicorn workers to boot",
            )
            proc.send_signal(signal.SIGTERM)  # KillMode=mixed: the main process only
            assert proc.wait(timeout=EXIT_TIMEOUT) == 0
            _wait_gone(marker, EXIT_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in marked_processes(marker):
                os.kill(pid, signal.SIGKILL)
