"""workerd's command line and start-up refusals: --help, --version, --check-config, no handlers,
and the interface its observability server binds (TASKFORGE_BIND_HOST)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.settings.config import ConfigError, Settings
from tests.support.tools import ROOT
from tests.support.workerd import Workerd, scrubbed_environment

CLI_TIMEOUT = 30.0
# One command starts workerd: the server runs from its checkout and installs no script.
COMMANDS = {"python -m workerd": [sys.executable, "-m", "workerd"]}


def _run(command: list[str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = scrubbed_environment() | {"PYTHONPATH": str(ROOT)} | env
    return subprocess.run(
        [*command, *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_help_explains_the_daemon_and_exits_0_without_starting_it(name: str) -> None:
    # No REDIS_URL, no handlers: a daemon would refuse or hang; --help must do neither.
    result = _run(COMMANDS[name], "--help")
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    out = result.stdout
    assert out.startswith(f"usage: {name} ")
    for needle in ("TASKFORGE_HANDLERS", "REDIS_URL", "WORKER_COUNT", "PORT_WORKER"):
        assert needle in out, needle
    assert "TERM, INT  drain" in out and "HUP        reload" in out
    assert "exit codes:" in out and "\n  2  configuration error" in out
    assert "{" not in out  # no JSON log line: nothing started


@pytest.mark.parametrize("name", COMMANDS)
def test_version_prints_the_package_version_and_exits_0(name: str) -> None:
    # The version line as the client's module spells it, read as text: no import to agree with.
    source = (ROOT / "taskforge" / "version.py").read_text()
    written = re.search(r'^__version__ = "([^"]+)"$', source, re.MULTILINE)
    assert written is not None
    result = _run(COMMANDS[name], "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"taskforge {written.group(1)}\n"


def test_an_unknown_argument_exits_2_with_the_usage() -> None:
    result = _run(COMMANDS["python -m workerd"], "--workers", "4")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: python -m workerd")
    assert "unrecognized arguments: --workers 4" in result.stderr


def test_check_config_imports_the_handlers_and_leaves_the_metrics_directory_alone(
    tmp_path: Path,
) -> None:
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    (metrics / "counter_1.db").write_bytes(b"a live workerd's file")
    (tmp_path / "metric_handlers.py").write_text(
        "import prometheus_client\nprometheus_client.Counter('imported', 'x').inc()\n"
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(metrics), "PYTHONPATH": f"{ROOT}:{tmp_path}"}

    ok = _run(
        COMMANDS["python -m workerd"],
        "--check-config",
        **env,
        TASKFORGE_HANDLERS="workerd.demo,metric_handlers",
    )
    assert (ok.returncode, ok.stderr) == (0, "")
    assert ok.stdout.startswith("workerd: configuration ok;")
    assert "generate_pdf" in ok.stdout  # it names the job types the modules registered
    assert "workerd: takes these types from queues default;" in ok.stdout  # routing
    assert [p.name for p in metrics.iterdir()] == ["counter_1.db"]

    bad = _run(
        COMMANDS["python -m workerd"],
        "--check-config",
        **env,
        TASKFORGE_HANDLERS="workerd.demo,no_such_mod",
    )
    assert bad.returncode == 2
    assert "'no_such_mod'" in bad.stderr and len(bad.stderr.splitlines()) == 1

    (tmp_path / "broken_handlers.py").write_text("def broken(:\n    pass\n")
    broken = _run(
        COMMANDS["python -m workerd"],
        "--check-config",
        **env,
        TASKFORGE_HANDLERS="broken_handlers",
    )
    assert broken.returncode == 2
    assert f"{tmp_path / 'broken_handlers.py'}:1: SyntaxError: " in broken.stderr

    lenient = _run(
        COMMANDS["python -m workerd"],
        "--check-config",
        **env,
        TASKFORGE_HANDLERS="workerd.demo",
        WORKER_COUNT="abc",
    )
    assert lenient.returncode == 0
    assert "workerd: warning: WORKER_COUNT='abc'" in lenient.stderr


def test_without_taskforge_handlers_workerd_refuses_to_start_and_says_what_to_set(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(wait_ready=False, TASKFORGE_HANDLERS=None)

    assert workerd.wait_exit(timeout=15) == 2
    [line] = workerd.stderr().strip().splitlines()
    assert "set TASKFORGE_HANDLERS" in line and "TASKFORGE_HANDLERS=workerd.demo" in line
    assert workerd.logs() == []  # it started nothing


def _listening_address(port: int) -> str:
    """Return the IPv4 address a socket listens on at `port`, read from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
            return ".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0))
    raise AssertionError(f"nothing listens on port {port}")


def test_the_default_bind_host_listens_everywhere_and_warns_it_is_unauthenticated(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(TASKFORGE_BIND_HOST=None)

    assert _listening_address(workerd.port) == "0.0.0.0"
    warnings = [rec["warning"] for rec in workerd.events("config_warning")]
    [warning] = [w for w in warnings if "unauthenticated" in w]
    assert f"0.0.0.0:{workerd.port}" in warning and "TASKFORGE_BIND_HOST=127.0.0.1" in warning


def test_bind_host_127_0_0_1_listens_on_loopback_only_without_the_warning(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(TASKFORGE_BIND_HOST="127.0.0.1")

    assert _listening_address(workerd.port) == "127.0.0.1"
    assert not [r for r in workerd.events("config_warning") if "unauthenticated" in r["warning"]]


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("::", "::"),
        ("0:0::1", "::1"),
        ("localhost", "localhost"),
        ("metrics-1.internal.example", "metrics-1.internal.example"),
    ],
)
def test_bind_host_accepts_an_ip_address_or_a_hostname(value: str, parsed: str) -> None:
    assert Settings.from_env({"TASKFORGE_BIND_HOST": value}).bind_host == parsed


@pytest.mark.parametrize("value", ["127.0.0.1:8081", "http://localhost", "-bad", "a b", "x" * 300])
def test_bind_host_refuses_anything_else_naming_the_variable(value: str) -> None:
    with pytest.raises(ConfigError, match=r"TASKFORGE_BIND_HOST=.* is invalid: expected an IP"):
        Settings.from_env({"TASKFORGE_BIND_HOST": value})


def test_bind_host_defaults_to_every_interface() -> None:
    assert Settings.from_env({}).bind_host == "0.0.0.0"
