"""Process plumbing for the supervisor's children: fork, die with the parent, decode exits."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

from workerd.slots import SlotState, SlotTable

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
WORKER, SCHEDULER, OBSERVER = "worker", "scheduler", "observer"


class StopOnSignal:
    """What every child loop shares: SIGTERM or SIGINT asks it to stop after its current step.

    SIGHUP and SIGTSTP, the supervisor's to act on, are ignored. Installed first thing after the fork, replacing the supervisor's handlers (which would
    record the signal in the supervisor's state, in this process's copy of it).
    """

    stopping: bool = False

    def install_signals(self) -> None:
        """Stop at the end of the step on SIGTERM/SIGINT; default SIGCHLD; skip SIGHUP, SIGTSTP."""
        signal.signal(signal.SIGTERM, self._request_stop)
        signal.signal(signal.SIGINT, self._request_stop)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # SIGHUP asks the supervisor to reload; sent to the whole process group it must not
        # kill a child mid-job. A handler, not SIG_IGN: programs a handler runs get the default.
        signal.signal(signal.SIGHUP, _ignore)
        # SIGTSTP quiets the host (the supervisor's to act on); sent to the whole group (systemctl
        # kill), its default would stop a child mid-job, lease renewals and all.
        signal.signal(signal.SIGTSTP, _ignore)

    def _request_stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    pass


@dataclass(frozen=True)
class StuckThread:
    """A job thread found stuck between jobs: its slot, that slot's last beat then, and when
    its process, drained meanwhile, is killed if still running."""

    slot: int
    beat: float
    deadline: float


@dataclass
class Child:
    """One forked child as the supervisor tracks it."""

    kind: str
    index: int  # its slot in the shared table
    pid: int
    name: str
    started: float  # monotonic
    kill_reason: str | None = None  # set when the supervisor itself killed it
    # Its slot as read when it was killed for that slot's job's timeout
    killed_job: SlotState | None = None
    threads: int = 1  # slots it owns from `index` on: a worker's job threads (WORKER_THREADS)
    # The slot whose job the supervisor killed it for (timeout, lease lost, cancel): the other
    # threads' jobs died for no fault of their own (workerd.duties.release).
    culprit: int | None = None
    # Set while it drains because one job thread stuck between jobs (duties.watchdog).
    stuck: StuckThread | None = None

    @property
    def slots(self) -> range:
        """Return the indexes of the slots it owns, one per job thread."""
        return range(self.index, self.index + self.threads)

    def worker_id(self, slot: int) -> str:
        """Return the worker id the thread on `slot` claims under (``claimed_by``): the child's
        name when it runs one job at a time, else the name and the thread (``<name>.t<k>``)."""
        return self.name if self.threads == 1 else f"{self.name}.t{slot - self.index}"


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


class Spawner(Protocol):
    """How the supervisor makes, watches and signals processes (a fake one in step tests)."""

    def spawn(self, name: str, body: Callable[[], int]) -> int:
        """Start a child that runs `body` and exits with its code; return the child's pid."""

    def reap(self) -> tuple[int, int]:
        """Return (pid, waitpid status) of one exited child, (0, 0) if none has exited yet;
        raise ChildProcessError when there is no child at all (waitpid's contract)."""

    def kill(self, pid: int, sig: signal.Signals) -> None:
        """Send `sig` to a child that may already have exited."""

    def stopped(self, pid: int) -> bool:
        """Tell whether the child is stopped (SIGSTOP): not working on its job."""


# The signals that stop a child. A forked child starts with the supervisor's handlers for them,
# which only queue the signal in the supervisor's state, the child's copy of it: one that came
# before the child put its own handlers in was lost, and the supervisor's drain then waited its
# whole grace for a child that never stopped (a bin/run stop in CI, 2026-12-07). So they are
# blocked from before the fork until the child's handlers are in: one sent meanwhile waits for
# them.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def accept_stop_signals() -> None:
    """In a child ForkSpawner started, once its own handlers are in: take STOP_SIGNALS (one
    sent since the fork is handled now)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


class ForkSpawner:
    """The real spawner: os.fork, waitpid(-1, WNOHANG), kill, /proc."""

    def spawn(self, name: str, body: Callable[[], int]) -> int:
        """Fork; the child runs `body` and leaves through os._exit, never back into the caller.
        `body` starts with STOP_SIGNALS blocked: it calls accept_stop_signals once its own
        handlers are in."""
        before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
        except BaseException:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
            raise
        if pid == 0:
            code = 1
            try:
                code = body()
            except BaseException:
                log.exception("child_crashed", extra={"child": name})
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        return pid

    def reap(self) -> tuple[int, int]:
        """Reap one exited child without blocking (the import check of a reload included)."""
        return os.waitpid(-1, os.WNOHANG)

    def kill(self, pid: int, sig: signal.Signals) -> None:
        """Send `sig`; a child already gone is not an error."""
        signal_child(pid, sig)

    def stopped(self, pid: int) -> bool:
        """Read the process state from /proc."""
        return process_stopped(pid)


class Roster:
    """The supervisor's children by pid, with their slots: what the duties read and signal."""

    def __init__(self, table: SlotTable, spawner: Spawner) -> None:
        self.table = table
        self.spawner = spawner
        self.children: dict[int, Child] = {}

    def of_kind(self, kind: str) -> list[Child]:
        """Return the children of `kind`, killed ones included until they are reaped."""
        return [c for c in self.children.values() if c.kind == kind]

    def state(self, child: Child) -> SlotState | None:
        """Return the child's (first) slot as it wrote it, or None while it is mid-write."""
        return self.table.slot(child.index).read()

    def slot_states(self, child: Child) -> list[tuple[int, SlotState | None]]:
        """Return each slot of the child (one per job thread) with its reading (None while
        mid-write)."""
        return [(index, self.table.slot(index).read()) for index in child.slots]

    def up(self, kind: str) -> list[Child]:
        """Return the children of `kind` past booting that the supervisor is not killing."""
        return [
            c
            for c in self.of_kind(kind)
            if c.kill_reason is None and (s := self.state(c)) is not None and not s.booting
        ]

    def drain(self, child: Child) -> None:
        """Ask `child` to finish its jobs and exit: a SIGTERM its slots say is a drain (told
        apart from a cancel's, should the two arrive as one signal)."""
        for index in child.slots:
            control = self.table.slot(index).control
            if control is not None:
                control.request_drain()
        self.spawner.kill(child.pid, signal.SIGTERM)

    def kill(
        self,
        child: Child,
        reason: str,
        sig: signal.Signals = signal.SIGKILL,
        *,
        culprit: int | None = None,
    ) -> None:
        """Signal `child`; the first reason given is the one its exit is logged with, and
        `culprit` (the slot whose job it is killed for) goes with that reason."""
        if child.kill_reason is None:
            child.kill_reason = reason
            child.culprit = culprit
        self.spawner.kill(child.pid, sig)
