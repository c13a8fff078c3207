"""The supervisor: forks the workers, the scheduler and the observability server, and keeps
them honest — modelled on gunicorn's arbiter.

One thread, one loop. Signal handlers only record the signal and wake the loop through a
self-pipe; reaping, killing and spawning happen in :meth:`Supervisor.step`, which also ticks
the small duties of workerd.duties (lease renewal, giving back a dead worker's job, the
registry heartbeat, readiness). No threads ever: a forked copy of a threaded process can
inherit a lock held by a thread that did not come along. The clock, the engine scripts and the
process spawner are constructor arguments, so tests drive ``step(now)`` by hand.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from types import FrameType
from wsgiref.simple_server import WSGIServer

import redis

from shared import metrics, tracing
from shared.config import Settings, redact_url
from shared.keys import Keys
from shared.redis_conn import connect
from shared.scripts import Policy, Scripts
from workerd import notify
from workerd.backoff import Backoff
from workerd.children import (
    OBSERVER,
    SCHEDULER,
    WORKER,
    Child,
    ForkSpawner,
    Roster,
    Spawner,
    describe_exit,
    die_with_parent,
)
from workerd.duties.leases import Leases
from workerd.duties.notify import Readiness
from workerd.duties.registry import RegistryHeartbeat
from workerd.duties.release import Release
from workerd.duties.scripts import ScriptLoader
from workerd.obs import ObservabilityApp, ObservabilityServer
from workerd.reload import ImportCheck
from workerd.scheduler import SchedulerProcess
from workerd.slots import SlotTable
from workerd.worker import WorkerProcess

log = logging.getLogger(__name__)

TICK = 0.1  # seconds between loop iterations when nothing wakes the loop sooner
BOOT_FAILURE_LIMIT = 5  # consecutive children dying before they are up → halt
# Respawn delays double from 0.1 s per quick death of a slot. A child that dies while booting
# waits up to 5 s (a crash loop; the halt above ends it). A child that was up and serving --
# killed by the OOM killer, an operator, or a handler that crashes the process -- waits at
# most 1 s: its job is already back in the queue, and an empty slot only slows the queue
# down. The poison pill that kills every worker it meets is bounded by the recovery cap.
RESPAWN_FIRST = 0.1
RESPAWN_CAP_BOOTING = 5.0
RESPAWN_CAP_UP = 1.0
QUICK_DEATH = 10.0  # seconds: a child that lived longer starts its slot's backoff afresh
SCHEDULER_STOP_GRACE = 5.0
FINAL_ACK_WINDOW = 5.0  # at exit, how long to keep trying to requeue jobs of killed workers
HALT_KILL_WINDOW = 5.0  # after a halt, how long to wait for the killed children to go


class Halt(Exception):
    """The supervisor cannot run (children keep failing to boot); exit non-zero."""


class Supervisor:
    """Keeps WORKER_COUNT workers, one scheduler and one observability server running."""

    def __init__(
        self,
        settings: Settings,
        *,
        listener: WSGIServer | None = None,
        generation: int = 0,
        reloaded: bool = False,
        scripts: Scripts | None = None,
        spawner: Spawner | None = None,
        clock: Callable[[], float] = time.monotonic,
        send_notify: Callable[[str], bool] = notify.notify,
    ) -> None:
        self.settings = settings
        self.redis_url = redact_url(settings.redis_url)
        self.silence_timeout = settings.heartbeat_timeout
        self.listener = listener
        self.clock = clock
        self.pid = os.getpid()
        self.name = f"{socket.gethostname()}-{self.pid}"
        kinds = [WORKER] * settings.worker_count + [SCHEDULER] + ([OBSERVER] if listener else [])
        self.kinds = kinds  # slot index -> kind of child
        self.table = SlotTable(len(kinds))
        self.roster = Roster(self.table, spawner or ForkSpawner())
        self.children = self.roster.children  # pid -> Child
        self.respawn_at: dict[int, float] = {}
        self.failures: dict[int, int] = {}
        self.boot_failures = 0
        # Child names go on counting across a reload: the pid stays, names must not repeat.
        self.generation = generation
        self.reloaded = reloaded  # this image was started by a reload (SIGHUP)
        self.signals: list[int] = []
        self.stopping = False
        self.reloading = False  # the drain under way ends in a re-exec, not an exit
        self.check: ImportCheck | None = None
        self.drain_deadline = 0.0
        self.scripts = scripts or Scripts(
            self._redis(), Keys(settings.key_prefix), Policy.from_settings(settings)
        )
        self.renew_interval = min(1.0, settings.visibility_timeout / 4)
        self._add_duties(clock, send_notify)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def _add_duties(self, clock: Callable[[], float], send_notify: Callable[[str], bool]) -> None:
        settings, roster, scripts = self.settings, self.roster, self.scripts
        self.loader = ScriptLoader(scripts, Backoff("supervisor", redis_url=settings.redis_url))
        self.leases = Leases(
            roster, scripts, interval=self.renew_interval, redis_url=self.redis_url
        )
        self.release = Release(scripts, redis_url=self.redis_url, clock=clock)
        self.registry = RegistryHeartbeat(roster, scripts, name=self.name)
        self.readiness = Readiness(
            roster,
            self.loader,
            worker_count=settings.worker_count,
            reloaded=self.reloaded,
            send=send_notify,
        )

    def _redis(self) -> redis.Redis:
        # Short timeouts: a Redis outage must not stall reaping and respawning for long.
        quick = dataclasses.replace(
            self.settings,
            redis_socket_timeout=min(1.0, self.settings.redis_socket_timeout),
            redis_connect_timeout=min(0.5, self.settings.redis_connect_timeout),
        )
        return connect(quick, role="supervisor")

    def close(self) -> None:
        """Close the wake-up pipe (the loop is over; tests make many supervisors)."""
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- signals -----------------------------------------------------------------------------

    def install_signals(self) -> None:
        """Record signals and wake the loop; everything else happens in step()."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self.record_signal)

    def record_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        """Queue `signum` for the next step and wake the loop (the signal handler)."""
        self.signals.append(signum)
        with contextlib.suppress(BlockingIOError):  # a full pipe: the loop is already due to wake
            os.write(self._wake_w, b"!")

    def _handle_signals(self, now: float) -> None:
        while self.signals:
            signum = self.signals.pop(0)
            if signum in (signal.SIGTERM, signal.SIGINT):
                self._begin_shutdown(now, signal.Signals(signum).name)
            elif signum == signal.SIGHUP:
                self._request_reload(now)

    def _begin_shutdown(self, now: float, cause: str) -> None:
        if self.reloading:
            # Stop instead of reloading: the drain under way serves both.
            self.reloading = False
        elif self.stopping:
            log.warning("supervisor_hurry", extra={"signal": cause})
            self.drain_deadline = now  # a second signal: kill what is still running
            return
        else:
            self._begin_drain(now)
        self.readiness.on_stopping()
        log.info(
            "supervisor_stopping", extra={"signal": cause, "grace_s": self.settings.drain_grace}
        )

    def _begin_drain(self, now: float) -> None:
        """Stop claiming: workers finish their job (up to the grace), then exit."""
        self.stopping = True
        self.drain_deadline = now + self.settings.drain_grace
        for child in self.roster.of_kind(WORKER):
            self.roster.spawner.kill(child.pid, signal.SIGTERM)

    # -- reload (SIGHUP) -----------------------------------------------------------------------

    def _request_reload(self, now: float) -> None:
        """SIGHUP: check that the code imports; the drain and re-exec follow in _poll_check."""
        if self.stopping and not self.reloading:
            log.warning("reload_failed", extra={"reason": "shutting down"})
            return
        if self.reloading or self.check is not None:
            return  # under way: the re-exec imports the code as it is then
        try:
            self.check = ImportCheck.start(now)
        except OSError as exc:
            log.error("reload_failed", extra={"reason": f"cannot run the check: {exc}"})
            return
        log.info("reload_check", extra={"check_pid": self.check.pid})

    def _poll_check(self, now: float) -> None:
        check = self.check
        if check is None:
            return
        if check.status is None:
            if now < check.deadline:
                return
            check.kill()
            self.check = None
            log.error("reload_failed", extra={"reason": "the import check timed out"})
            return
        self.check = None
        error = check.error()
        check.close()
        if error:
            # The running code stays: a typo in a handler must not take workerd down.
            log.error("reload_failed", extra={"reason": error})
            return
        if self.stopping:
            return  # SIGTERM came while the check ran
        self.reloading = True
        self._begin_drain(now)
        # systemd: reloading until the new image sends READY=1.
        self.readiness.on_reloading()
        log.info("supervisor_reloading", extra={"grace_s": self.settings.drain_grace})

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Run until shut down or due to reload; return the exit code (0 clean, 3 halted).

        After a 0, :attr:`reloading` tells the caller to re-exec rather than exit.
        """
        self.install_signals()
        tracing.forbid_here()  # this process forks: no SDK thread here (its children trace)
        log.info(
            "supervisor_started",
            extra={
                "workers": self.settings.worker_count,
                "supervisor": self.name,
                "redis": self.redis_url,
                "handlers": list(self.settings.handlers),
                "reloaded": self.reloaded,
            },
        )
        try:
            while not self.finished:
                self.step(self.clock())
                self._sleep(TICK)
        except Halt as exc:
            log.error("supervisor_halted", extra={"reason": str(exc)})
            self._kill_everything()
            return 3
        finally:
            if self.check is not None:
                self.check.kill()
                self.check = None
        self._stop_helpers()
        self.release.settle(deadline=self.clock() + FINAL_ACK_WINDOW)
        if self.reloading:
            return 0  # the same name comes back after the exec: stay in the registry
        self.registry.leave()
        log.info("supervisor_stopped")
        return 0

    def step(self, now: float) -> None:
        """Do one iteration: signals, reaping, policing, spawning, then each duty's tick."""
        self._handle_signals(now)
        self._reap(now)
        self._poll_check(now)
        self.loader.tick(now)
        if self.stopping and now >= self.drain_deadline:
            self._kill_workers("drain grace over")
        self._police(now)
        self.leases.tick(now)
        self.release.tick(now)
        if not self.stopping:
            self._spawn_missing(now)
        self.readiness.tick(now)
        self.registry.tick(now)

    @property
    def finished(self) -> bool:
        """Tell whether a drain is over: stopping, and no worker left."""
        return self.stopping and not self.roster.of_kind(WORKER)

    def _sleep(self, timeout: float) -> None:
        select.select([self._wake_r], [], [], timeout)
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    # -- children ----------------------------------------------------------------------------

    def _spawn_missing(self, now: float) -> None:
        running = {child.index for child in self.children.values()}
        for index, kind in enumerate(self.kinds):
            if index not in running and now >= self.respawn_at.get(index, 0.0):
                self._spawn(index, kind, now)

    def _spawn(self, index: int, kind: str, now: float) -> None:
        self.generation += 1
        name = f"{self.name}-{kind}{index}-{self.generation}"
        self.table.slot(index).reset(booting=True)

        def body() -> int:
            return self._child(Child(kind, index, os.getpid(), name, now))

        pid = self.roster.spawner.spawn(name, body)
        self.children[pid] = Child(kind, index, pid, name, now)
        log.info("child_spawned", extra={"child": name, "kind": kind, "child_pid": pid})

    def _child(self, child: Child) -> int:
        """Run in the forked child: detach from the supervisor's plumbing, then run its loop."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        die_with_parent(self.pid)
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self.listener is not None and child.kind != OBSERVER:
            self.listener.server_close()
        client = connect(self.settings, role=child.kind)
        scripts = Scripts(client, self.scripts.keys, self.scripts.policy)
        slot = self.table.slot(child.index)
        if child.kind == WORKER:
            process = WorkerProcess(self.settings, scripts, slot, child.name, self.pid)
        elif child.kind == SCHEDULER:
            grace = 2 * self.renew_interval + 1.0
            process = SchedulerProcess(
                scripts, slot, self.pid, reconnect_grace=grace, redis_url=self.settings.redis_url
            )
        else:
            assert self.listener is not None
            app = ObservabilityApp(scripts, self.table)
            process = ObservabilityServer(self.listener, app, slot, self.pid)
        process.install_signals()
        return process.run()

    def _reap(self, now: float) -> None:
        while True:
            try:
                pid, status = self.roster.spawner.reap()
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self._child_exited(child, status, now)
            elif self.check is not None and pid == self.check.pid:
                self.check.status = status

    def _child_exited(self, child: Child, status: int, now: float) -> None:
        cause, code, _ = describe_exit(status, child.kill_reason)
        state = self.table.slot(child.index).read()
        booting = state is not None and state.booting
        # A clean exit (recycled, drained) is routine; only the supervisor's own kills explain
        # a signal.
        expected = child.kill_reason == "shutdown" or code == 0
        level = logging.INFO if expected or child.kill_reason else logging.ERROR
        log.log(
            level,
            "child_exited",
            extra={
                "child": child.name,
                "kind": child.kind,
                "child_pid": child.pid,
                "cause": cause,
                "killed_for": child.kill_reason,
            },
        )
        metrics.mark_dead(child.pid)
        if child.kind == WORKER:
            self.release.on_worker_died(child, state, draining=self.stopping)
        failed = booting or (child.kill_reason is None and not expected and code != 0)
        self._plan_respawn(child, now, failed=failed, booting=booting)

    def _plan_respawn(self, child: Child, now: float, *, failed: bool, booting: bool) -> None:
        if booting:
            self.boot_failures += 1
            if self.boot_failures >= BOOT_FAILURE_LIMIT:
                raise Halt(
                    f"{self.boot_failures} children in a row died before they were up; "
                    "see the child_crashed lines above"
                )
        elif child.kind == WORKER:
            self.boot_failures = 0
        if now - child.started > QUICK_DEATH or not failed:
            self.failures[child.index] = 0
        failures = self.failures.get(child.index, 0) + (1 if failed else 0)
        self.failures[child.index] = failures
        cap = RESPAWN_CAP_BOOTING if booting else RESPAWN_CAP_UP
        delay = 0.0 if failures <= 1 else min(cap, RESPAWN_FIRST * 2 ** (failures - 2))
        self.respawn_at[child.index] = now + delay

    def _kill_workers(self, reason: str) -> None:
        for child in self.roster.of_kind(WORKER):
            if child.kill_reason is None:
                log.warning("child_killed", extra={"child": child.name, "reason": reason})
                self.roster.kill(child, "drain")

    def _kill_everything(self) -> None:
        for child in list(self.children.values()):
            self.roster.kill(child, "halt")
        deadline = self.clock() + HALT_KILL_WINDOW
        while self.children and self.clock() < deadline:
            self._reap_quietly(deadline)

    def _reap_quietly(self, deadline: float) -> None:
        # Not _reap: after a halt, a child's exit must not plan a respawn or count (and raise)
        # another boot failure.
        try:
            pid, _ = self.roster.spawner.reap()
        except ChildProcessError:
            self.children.clear()
            return
        if pid:
            self.children.pop(pid, None)
        else:
            self._sleep(min(TICK, max(0.0, deadline - self.clock())))

    def _stop_helpers(self) -> None:
        """Stop the scheduler and the observability server, after the workers are gone."""
        for sig in (signal.SIGTERM, signal.SIGKILL):  # ask, then insist
            for child in list(self.children.values()):
                self.roster.kill(child, "shutdown", sig)
            deadline = self.clock() + SCHEDULER_STOP_GRACE
            while self.children and self.clock() < deadline:
                self._reap(self.clock())
                if self.children:
                    self._sleep(TICK)

    # -- timeouts, silence -----------------------------------------------------------------------

    def _police(self, now: float) -> None:
        """Kill workers past their job's timeout and children silent outside a job."""
        for child in list(self.children.values()):
            state = self.table.slot(child.index).read()
            if state is None or child.kill_reason is not None:
                continue
            if state.job_id:
                if state.job_timeout > 0 and now - state.job_started > state.job_timeout:
                    child.killed_job = (state.job_id, state.token, state.job_timeout)
                    # About the kill; the job's own line (job_timed_out) comes with its outcome.
                    log.warning(
                        "child_killed",
                        extra={
                            "child": child.name,
                            "reason": "timeout",
                            "job_id": state.job_id,
                            "timeout_s": state.job_timeout,
                        },
                    )
                    self.roster.kill(child, "timeout")
            elif now - state.heartbeat > self.silence_timeout:
                log.error(
                    "child_silent", extra={"child": child.name, "silent_s": now - state.heartbeat}
                )
                self.roster.kill(child, "silent")
