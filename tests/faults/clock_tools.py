"""Skewed host clocks for the fault scenarios: libfaketime's environment, and Redis's clock.

``faketime -f '+30s' cmd`` (Debian package ``faketime``) runs ``cmd`` with libfaketime
preloaded and ``FAKETIME=+30s``. The fixtures that start workerd and gunicorn take environment
variables, not a command wrapper, so :func:`faketime_env` asks the ``faketime`` binary which
variables it sets and returns them: the process started with them is the one being skewed (no
wrapper process between the test and the supervisor, so signals and exit codes stay direct).

libfaketime also fakes ``CLOCK_MONOTONIC`` (0.9.10 reports it on the skewed wall clock's
scale, advancing at the real rate). Leaving it alone would model a wrong wall clock more
closely, but Debian's libfaketime 0.9.10 then breaks Python 3.11's ``time.sleep`` (EINVAL: its
absolute ``clock_nanosleep`` is mistranslated, libfaketime issue #426). Every interval measured
on the faked monotonic clock is still right, which is all our processes use it for. The catch: a *timed* wait on a thread lock or condition
(``sem_clockwait``, which 0.9.10 does not intercept) never wakes under the shift, so code
that added one would hang here; the bounded waits of the tests then fail, they do not pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import redis

from tests.support.tools import require_tool

# The variables libfaketime reads. FAKETIME_SHARED is left out on purpose: it names shared
# memory the faketime binary creates for the life of its own child and removes on exit.
KEPT = ("LD_PRELOAD", "FAKETIME")
PROBE = "import time; print(repr(time.time()))"


def faketime_env(offset: str) -> dict[str, str]:
    """Return the environment under which a process's wall clock is off by `offset` ('+30s')."""
    binary = require_tool("faketime")
    out = subprocess.run(
        [binary, "-f", offset, "env", "-0"], capture_output=True, check=True, timeout=10
    ).stdout
    found = dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)
    env = {name: found[name] for name in KEPT if name in found}
    if set(env) != set(KEPT):
        raise AssertionError(f"faketime set {sorted(found)}, expected {KEPT}")
    return env


def observed_offset(env: dict[str, str]) -> float:
    """Return how far ahead (s) time.time() is in a Python process started with `env`."""
    before = time.time()
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **env},
        capture_output=True,
        check=True,
        timeout=20,
    ).stdout
    after = time.time()
    # The probe read its clock somewhere between our two readings.
    return float(out) - (before + after) / 2


def redis_now_ms(client: redis.Redis) -> int:
    """Return Redis's clock (TIME) in milliseconds: the one clock leases and schedules use."""
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


class MovableClock:
    """A wall clock offset that a running process re-reads at every call: Redis's, moved.

    :attr:`env` starts a process (a redis-server: Redis TIME is the clock every schedule and
    lease uses) with tests/faults/clock_shift.c preloaded, compiled here with the system's C
    compiler; :meth:`shift` moves its wall clock from the next call on, with no restart. Only
    the wall clock moves: Redis's timers run on the monotonic clock and keep their pace.
    libfaketime cannot do this one: redis-server does not start under it (0.9.10's
    clock_gettime recurses through jemalloc's).
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "clock_shift")
        library = os.path.join(directory, "clock_shift.so")
        source = os.path.join(os.path.dirname(__file__), "clock_shift.c")
        compiler = require_tool("gcc")
        subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", library, source, "-ldl"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.offset = 0
        self.shift(0)
        self.env = {"LD_PRELOAD": library, "CLOCK_SHIFT_FILE": self.path}

    def shift(self, seconds: int) -> None:
        """Set the offset from the real clock to `seconds` (a rename: never half written)."""
        staged = f"{self.path}.new"
        with open(staged, "w") as handle:
            handle.write(f"{seconds}\n")
        os.replace(staged, self.path)
        self.offset = seconds
