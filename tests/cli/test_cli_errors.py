"""Bad input and bad conditions give one ``taskforge: error:`` line and the documented exit
status, never a traceback; ``python -m taskforge`` and shell completion work."""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import click
import pytest

from taskforge.cli import Exit, cli
from tests.cli.conftest import Taskforge, invoke, run_module
from tests.support.tools import free_port

UNKNOWN = "0b1f3c0e-6f2c-4c35-9a39-3b8f7e1e2a11"


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("get", UNKNOWN), Exit.API_ERROR, "job not found (HTTP 404)"),
        (("history", UNKNOWN), Exit.API_ERROR, "job not found (HTTP 404)"),
        (("cancel", UNKNOWN), Exit.API_ERROR, "(HTTP 404)"),
        (("get", "not-an-id"), Exit.API_ERROR, "malformed job id 'not-an-id'"),
        (("enqueue", "t", "--priority", "99999999999"), Exit.API_ERROR, "priority"),
        (("queues", "pause", "bad name!"), Exit.API_ERROR, "(HTTP 400)"),
        (("enqueue", "t", "{not json"), Exit.USAGE, "PAYLOAD is not valid JSON"),
        (("enqueue", "t", "[1, 2]"), Exit.USAGE, "must be a JSON object, not list"),
        (
            ("enqueue", "t", "@/nonexistent/job.json"),
            Exit.USAGE,
            "cannot read '/nonexistent/job.json'",
        ),
        (("enqueue", "t", "--at", "2030-01-01T00:00:00Z", "--delay", "5"), Exit.USAGE, "not both"),
        (("enqueue", "t", "--priority", "high"), Exit.USAGE, "'high' is not a valid integer"),
        (("enqueue",), Exit.USAGE, "Missing argument 'TYPE'"),
        # --state is optional (every state); a word that is no state is a usage error.
        (("jobs", "ls", "--state", "running"), Exit.USAGE, "'running' is not one of"),
        (("jobs", "ls", "--state", "lost"), Exit.USAGE, "'lost' is not one of"),
        (("get", UNKNOWN, "--bogus"), Exit.USAGE, "No such option '--bogus'"),
        (("frobnicate",), Exit.USAGE, "No such command 'frobnicate'"),
        (("dlq", "retry"), Exit.USAGE, "name the dead jobs"),
        (("dlq", "purge", UNKNOWN, "--all"), Exit.USAGE, "not both"),
        (("stats", "--watch", "0"), Exit.USAGE, "0"),
    ],
)
def test_bad_input_is_one_line_and_its_exit_status(
    taskforge: Taskforge, args: tuple[str, ...], code: int, says: str
) -> None:
    done = taskforge(*args)
    assert done.code == code, (done.out, done.err)
    assert says in done.error_line()
    assert done.out == ""


def test_usage_errors_point_at_the_commands_help(taskforge: Taskforge) -> None:
    line = taskforge("jobs", "ls", "--state", "running").error_line()
    assert line.endswith("(see 'taskforge jobs ls --help')")


def test_a_gateway_that_is_down_is_exit_3(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = invoke("--url", url, "--retries", "1", "get", UNKNOWN)
    assert done.code == Exit.UNAVAILABLE
    assert "cannot connect to" in done.error_line() and "tried 2 times" in done.err


def test_a_server_that_is_not_a_gateway_is_named_as_such() -> None:
    """An error answer without TaskForge's {"error": ...} body (another web server)."""

    class Empty404(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), Empty404) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            done = invoke("--url", url, "get", UNKNOWN)
        finally:
            server.shutdown()
    assert done.code == Exit.API_ERROR
    assert done.error_line() == (
        f"taskforge: error: HTTP 404 without a TaskForge error message: is {url} a TaskForge "
        "gateway?"
    )


def test_the_request_timeout_bounds_each_try() -> None:
    """--request-timeout (the global one) is not a job's or a wait's --timeout."""
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        done = invoke("--url", url, "--retries", "0", "--request-timeout", "0.3", "stats")
        elapsed = time.monotonic() - started
    assert done.code == Exit.UNAVAILABLE and "no answer from" in done.error_line()
    assert done.error_line().endswith("(tried 1 time)")
    assert elapsed < 5.0  # the default, 10 s, would still be waiting


def test_every_command_takes_json_after_its_name() -> None:
    leaves: list[click.Command] = []
    groups: list[click.Group] = [cli]
    while groups:
        for command in groups.pop().commands.values():
            (groups if isinstance(command, click.Group) else leaves).append(command)  # type: ignore[arg-type]
    assert len(leaves) >= 14
    for command in leaves:
        assert any("--json" in param.opts for param in command.params), command.name


def test_a_bad_url_is_a_usage_error() -> None:
    done = invoke("--url", "ftp://example", "stats")
    assert done.code == Exit.USAGE and "bad gateway URL" in done.error_line()


def test_a_wrong_token_is_exit_4_and_the_right_one_from_the_environment_works(
    start_gateway: Any, r: Any
) -> None:
    with start_gateway(TASKFORGE_API_TOKEN="right-token") as guarded:
        missing = invoke("--url", guarded.url, "stats")
        assert missing.code == Exit.UNAUTHORIZED and "TASKFORGE_API_TOKEN" in missing.error_line()
        wrong = invoke("--url", guarded.url, "--token", "wrong", "stats")
        assert wrong.code == Exit.UNAUTHORIZED and "(HTTP 401" in wrong.error_line()
        env = {"TASKFORGE_URL": guarded.url, "TASKFORGE_API_TOKEN": "right-token"}
        assert invoke("stats", env=env).code == Exit.OK


def test_the_token_is_never_echoed_and_its_surrounding_whitespace_is_dropped(
    start_gateway: Any, r: Any
) -> None:
    with start_gateway(TASKFORGE_API_TOKEN="right-token") as guarded:
        # A token file with Windows line endings: dropped, as the gateway drops it.
        assert invoke("--url", guarded.url, "--token", "right-token\r", "stats").code == Exit.OK
        for token in ("right\rtoken", "right-token\r\nX-Evil: 1", "sec\x00ret"):
            done = invoke("--url", guarded.url, "--token", token, "stats")
            line = done.error_line()
            assert done.code == Exit.USAGE and "control character" in line
            assert "right" not in line and "sec" not in line.replace("(such", "")
            assert "token itself is not shown" in line


def test_guessing_through_the_cli_ends_in_429_with_when_to_try_again(
    start_gateway: Any, r: Any
) -> None:
    from gateway.lockout import MAX_FAILURES

    with start_gateway(TASKFORGE_API_TOKEN="right-token") as guarded:
        for _ in range(MAX_FAILURES - 1):
            done = invoke("--url", guarded.url, "--token", "guess", "stats")
            assert done.code == Exit.UNAUTHORIZED
        locked = invoke("--url", guarded.url, "--token", "guess", "stats")
        line = locked.error_line()
        assert "too many failed authentications" in line and "(HTTP 429)" in line
        assert "guess" not in line


def test_python_m_taskforge_runs_the_cli_and_its_help_lists_the_exit_statuses() -> None:
    done = run_module("--help")
    assert done.returncode == 0 and done.stderr == ""
    for line in ("0  ok", "3  gateway unavailable", "4  unauthorized", "5  wait: the job is dead"):
        assert line in done.stdout
    assert run_module("--version").stdout.startswith("taskforge, version ")
    closed = f"http://127.0.0.1:{free_port()}"
    down = run_module("--url", closed, "--retries", "0", "stats")
    assert down.returncode == Exit.UNAVAILABLE
    assert (
        down.stderr.startswith("taskforge: error: cannot connect")
        and "Traceback" not in down.stderr
    )


def test_shell_completion_source_is_produced() -> None:
    env = {**os.environ, "_TASKFORGE_COMPLETE": "bash_source"}
    done = run_module(env=env)
    assert done.returncode == 0
    assert "_taskforge_completion()" in done.stdout and "complete " in done.stdout
    completing = {
        **os.environ,
        "_TASKFORGE_COMPLETE": "bash_complete",
        "COMP_WORDS": "taskforge dl",
        "COMP_CWORD": "1",
    }
    assert "plain,dlq" in run_module(env=completing).stdout
