"""Reloading workerd in place on SIGHUP: check that the code imports, then re-exec (same pid).

A reload must import the handler modules afresh, and only a new interpreter does that
reliably (``importlib.reload`` keeps stale objects, removed handlers and unreloaded
dependencies). So the supervisor first runs ``<its own command line> --check-config`` in a
subprocess: if the new code does not import, it says why and keeps serving with the old code.
If it does, the supervisor drains as for SIGTERM and then execs its own command line: the
same pid (systemd's MainPID, bin/run's child), the same environment, the observability
socket handed across the exec so the port is never closed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from typing import BinaryIO

from workerd.children import describe_exit, signal_child

# Set only across the exec: "<listening socket's fd>,<child generation>". Read and removed
# by the new image at start, so nothing it forks or runs inherits it.
REEXEC_ENV = "TASKFORGE_WORKERD_REEXEC"
QUIET_ENV = "TASKFORGE_WORKERD_QUIET"  # set by a reload of a quiet host
CHECK_TIMEOUT = 60.0  # seconds a handler import may take before the reload is called off
CHECK_OUTPUT_LIMIT = 500  # characters of the check's error kept for the log line


def command_line() -> list[str]:
    """Return the command that started this interpreter (``python -m workerd``), runnable."""
    return [sys.executable, *sys.orig_argv[1:]]


@dataclass
class ImportCheck:
    """A ``--check-config`` subprocess; the supervisor reaps it and reads its verdict."""

    pid: int
    output: BinaryIO  # the check's stderr
    deadline: float  # monotonic
    status: int | None = None  # its waitpid status, once reaped

    @classmethod
    def start(cls, now: float) -> ImportCheck:
        """Spawn the check; its stderr goes to a temporary file, the rest to /dev/null."""
        output = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            # posix_spawn, not fork: no copy of the supervisor runs Python in the child.
            pid = os.posix_spawn(
                sys.executable,
                [*command_line(), "--check-config"],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, devnull, 0),
                    (os.POSIX_SPAWN_DUP2, devnull, 1),
                    (os.POSIX_SPAWN_DUP2, output.fileno(), 2),
                ],
            )
        finally:
            os.close(devnull)
        return cls(pid, output, now + CHECK_TIMEOUT)

    def verdict(self, now: float) -> str | None:
        """Return None while the check runs, else why it failed ("" if it passed); then close it."""
        if self.status is None:
            if now < self.deadline:
                return None
            self.kill()
            return "the import check timed out"
        error = self.error()
        self.close()
        return error

    def error(self) -> str:
        """Return why the check failed ("" when it passed): its last stderr line, or its exit."""
        if self.status is None:
            return "the check did not finish"
        if os.WIFEXITED(self.status) and os.WEXITSTATUS(self.status) == 0:
            return ""
        self.output.seek(0)
        lines = [line for line in self.output.read().decode(errors="replace").splitlines() if line]
        text = lines[-1] if lines else describe_exit(self.status)[0]
        return text[:CHECK_OUTPUT_LIMIT]

    def kill(self) -> None:
        """Stop a check still running (the supervisor is shutting down); reap it."""
        if self.status is None:
            signal_child(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                _, self.status = os.waitpid(self.pid, 0)
        self.close()

    def close(self) -> None:
        """Drop the captured output."""
        self.output.close()


def reexec(listener_fd: int, generation: int, *, quiet: bool = False) -> OSError:
    """Replace this process with a fresh interpreter running the same command; return on failure.

    The caller has stopped every child and flushed what it owed Redis. Only the listening
    socket is inherited (every other descriptor Python opens is close-on-exec). A quiet host
    stays quiet in the new image.
    """
    os.set_inheritable(listener_fd, True)
    os.environ[REEXEC_ENV] = f"{listener_fd},{generation}"
    if quiet:
        os.environ[QUIET_ENV] = "1"
    # Log lines still buffered would be lost with this image.
    sys.stdout.flush()
    sys.stderr.flush()
    # An ignored signal stays ignored across exec: a second SIGHUP arriving before the new
    # image installs its handlers must not kill it (SIGHUP's default action).
    # Nor may a SIGTSTP (whose default stops the process); it is lost, the host stays as it was.
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    previous_tstp = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
    try:
        os.execv(sys.executable, command_line())
    except OSError as exc:
        signal.signal(signal.SIGHUP, previous)
        signal.signal(signal.SIGTSTP, previous_tstp)
        os.environ.pop(REEXEC_ENV, None)
        os.environ.pop(QUIET_ENV, None)
        os.set_inheritable(listener_fd, False)
        return exc
    raise AssertionError("unreachable: execv returned without an error")


def inherited() -> tuple[int | None, int]:
    """Return (listening socket fd, child generation) handed over by a reload, and forget them."""
    value = os.environ.pop(REEXEC_ENV, "")
    fd, _, generation = value.partition(",")
    if not fd.isdigit() or not generation.isdigit():
        return None, 0
    return int(fd), int(generation)


def inherited_quiet() -> bool:
    """Return whether the image before a reload was quiet, and forget it."""
    return os.environ.pop(QUIET_ENV, "") == "1"
