"""A stop signal that reaches a gunicorn worker while it boots is held for it, not lost.

A worker gunicorn forks keeps the master's signal handlers until its own ``init_signals``,
and those only queue the signal in the worker's copy of the master's state. A SIGTERM the
master passed on in that window (a stop landing while a worker was booted, or replaced after
``max_requests``) was lost, and the master waited its whole ``graceful_timeout`` (25 s) for a
worker that never stopped (a bin/run stop in CI, 2026-12-07). So the stop signals are blocked
from just before the fork (the ``pre_fork`` hook) until the worker's own handlers are in
(gateway.http_worker's ``init_signals``); one sent meanwhile waits for them. The master
unblocks them as soon as ``os.fork`` returns. workerd's ForkSpawner does the same for its
children.

The master blocks and unblocks through libc, not ``signal.pthread_sigmask``: that one runs
any pending Python handler before it returns, here inside a gunicorn hook or an at-fork
callback. A SIGCHLD handler that raises there (gunicorn's HaltServer, when a worker failed
to boot) would be swallowed by the at-fork callback, or leave the master halting with its
stop signals blocked. Through libc the handlers run after the hook, in gunicorn's own code.

Imported by ``deploy/gunicorn.conf.py`` and gateway.http_worker.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable

# SIGTERM stops a worker gracefully; SIGINT and SIGQUIT at once (gunicorn's handle_quit).
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGQUIT})

_libc = ctypes.CDLL(None, use_errno=True)
_SIGSET_BYTES = 128  # sizeof(sigset_t) in glibc and musl: room for 1,024 signals


def _sigset(signals: Iterable[signal.Signals]) -> ctypes.Array[ctypes.c_char]:
    mask = ctypes.create_string_buffer(_SIGSET_BYTES)
    _libc.sigemptyset(mask)
    for sig in signals:
        _libc.sigaddset(mask, int(sig))
    return mask


_STOP_SET = _sigset(STOP_SIGNALS)


def _sigmask(how: int, mask: ctypes.Array[ctypes.c_char]) -> ctypes.Array[ctypes.c_char]:
    """Change this thread's signal mask through libc; return the mask it had."""
    before = ctypes.create_string_buffer(_SIGSET_BYTES)
    error = _libc.pthread_sigmask(how, mask, before)
    if error:
        raise OSError(error, os.strerror(error))
    return before


# The mask from before hold_across_fork: the master's, and (copied by the fork) the worker's.
# None when nothing is held.
_mask_before: ctypes.Array[ctypes.c_char] | None = None


def hold_across_fork() -> None:
    """In the master, just before it forks a worker: block STOP_SIGNALS (the worker inherits
    the mask; the master unblocks them as soon as the fork returns)."""
    global _mask_before
    _mask_before = _sigmask(signal.SIG_BLOCK, _STOP_SET)


def take_stop_signals() -> None:
    """Restore the mask hold_across_fork changed: in the master once the fork returns, in the
    worker once its own handlers are in (a stop sent since the fork is handled then)."""
    global _mask_before
    if _mask_before is not None:
        before, _mask_before = _mask_before, None
        _sigmask(signal.SIG_SETMASK, before)


# Called after every fork in this process, also one that failed: gunicorn's other fork (the
# new master of a SIGUSR2 upgrade) never held anything, so there is nothing to take back.
os.register_at_fork(after_in_parent=take_stop_signals)
