"""Process plumbing for the supervisor's children: fork, die with the parent, decode exits."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
WORKER, SCHEDULER, OBSERVER = "worker", "scheduler", "observer"


class StopOnSignal:
    """What every child loop shares: SIGTERM or SIGINT asks it to stop after its current step.

    Installed first thing after the fork, replacing the supervisor's handlers (which would
    record the signal in the supervisor's state, in this process's copy of it).
    """

    stopping: bool = False

    def install_signals(self) -> None:
        """Stop at the end of the current step on SIGTERM/SIGINT; default SIGCHLD; skip SIGHUP."""
        signal.signal(signal.SIGTERM, self._request_stop)
        signal.signal(signal.SIGINT, self._request_stop)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # SIGHUP asks the supervisor to reload; sent to the whole process group it must not
        # kill a child mid-job. A handler, not SIG_IGN: programs a handler runs get the default.
        signal.signal(signal.SIGHUP, _ignore)

    def _request_stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    pass


@dataclass
class Child:
    """One forked child as the supervisor tracks it."""

    kind: str
    index: int  # its slot in the shared table
    pid: int
    name: str
    started: float  # monotonic
    kill_reason: str | None = None  # set when the supervisor itself killed it
    killed_job: tuple[str, int, float] | None = None  # (job id, token, timeout) it was running


def die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process if the supervisor dies (no orphan keeps a job)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def describe_exit(status: int, killed_for: str | None = None) -> tuple[str, int | None, str | None]:
    """Return (cause text, exit code, signal name) for a waitpid status.

    An unexplained SIGKILL is most often the kernel's OOM killer, so the text says so; not
    when the supervisor itself sent it (`killed_for`: timeout, lease lost, ...).
    """
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        hint = " (out of memory?)" if sig == "SIGKILL" and killed_for is None else ""
        return f"killed by {sig}{hint}", None, sig
    code = os.WEXITSTATUS(status)
    return f"exited with code {code}", code, None


def process_stopped(pid: int) -> bool:
    """Tell whether `pid` is stopped (SIGSTOP/SIGTSTP): a stopped job is not being worked on."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state follows the command name, which is in parentheses and may hold spaces.
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def signal_child(pid: int, sig: signal.Signals) -> None:
    """Send `sig` to a child that may already have exited."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
