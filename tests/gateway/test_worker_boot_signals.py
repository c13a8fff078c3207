"""A SIGTERM that reaches a gunicorn worker before its own handlers are in stops it at once.

CI, 2026-12-07: bin/run was stopped as gunicorn booted its second worker; the master passed
the SIGTERM on while that worker still had the master's handlers, the signal was lost, and
the master waited graceful_timeout (25 s) for it. gateway.worker_signals holds it instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from gateway import worker_signals
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT, wait_until

# deploy/gunicorn.conf.py, plus a post_fork that holds a worker booted while the file `hold`
# exists in the boot window (after the fork, before gunicorn's init_signals) until the
# master's stop (SIGTERM, or SIGQUIT for a quick stop) has reached it: blocked and pending,
# or queued by the master's handler, which such a worker still has.
HOLDING_CONFIG = """
import os, runpy, signal, time

globals().update(runpy.run_path({conf!r}, run_name="__config__"))
_HOLD = {hold!r}


def post_fork(server, worker):
    if not os.path.exists(_HOLD):
        return
    open(f"{{_HOLD}}.{{os.getpid()}}", "w").close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if {{signal.SIGTERM, signal.SIGQUIT}} & {{*signal.sigpending(), *server.SIG_QUEUE}}:
            break
        time.sleep(0.01)
"""

STOP_WITHIN = 10.0  # seconds; gunicorn.conf.py's graceful_timeout is 25


# The master's signal and the line it logs: SIGTERM stops gracefully (it sends its workers
# SIGTERM), SIGINT at once (SIGQUIT to its workers); both wait graceful_timeout for a worker.
STOPS = {"graceful": (signal.SIGTERM, "term"), "quick": (signal.SIGINT, "int")}


@pytest.mark.parametrize("stop", STOPS)
def test_a_stop_sent_while_a_worker_boots_stops_it_without_waiting_out_the_grace(
    redis_server: RedisServer, tmp_path: Path, stop: str
) -> None:
    sig, name = STOPS[stop]
    hold = tmp_path / "hold"
    config = tmp_path / "holding.conf.py"
    config.write_text(
        HOLDING_CONFIG.format(conf=str(ROOT / "deploy/gunicorn.conf.py"), hold=str(hold))
    )
    with run_gunicorn(redis_server.url, tmp_path, "-c", str(config)) as gw:
        [victim, *_] = gw.worker_pids()
        hold.touch()
        os.kill(victim, signal.SIGKILL)  # its replacement boots into the hold
        wait_until(lambda: any(tmp_path.glob("hold.*")), 20.0, "a replacement held in its boot")
        os.kill(gw.process.pid, sig)
        try:
            gw.process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"gunicorn still running {STOP_WITHIN} s after its {sig.name}:\n"
                + gw.log_path.read_text(errors="replace")[-3000:]
            ) from None
        assert gw.process.returncode == 0
        after_stop = gw.log_path.read_text().partition(f"Handling signal: {name}")[2]
        assert after_stop and "SIGKILL" not in after_stop  # the held worker stopped by itself


def _blocked() -> set[signal.Signals]:
    return signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_the_worker_forked_after_a_hold_starts_with_the_stop_signals_blocked() -> None:
    before = _blocked()
    read_end, write_end = os.pipe()
    worker_signals.hold_across_fork()
    pid = os.fork()
    if pid == 0:  # the worker: blocked until it takes them; then as the master had them
        try:
            held = _blocked() >= worker_signals.STOP_SIGNALS
            worker_signals.take_stop_signals()
            os.write(write_end, b"%d %d" % (held, _blocked() == before))
        finally:
            os._exit(0)
    try:
        assert _blocked() == before  # the master's own mask, back as the fork returned
        os.waitpid(pid, 0)
        assert os.read(read_end, 16) == b"1 1"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_stop_signal_blocked_before_the_hold_stays_blocked_after_it() -> None:
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGQUIT])
    try:
        worker_signals.hold_across_fork()
        worker_signals.take_stop_signals()
        assert signal.SIGQUIT in _blocked() and signal.SIGTERM not in _blocked()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
