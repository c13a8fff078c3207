"""The supervisor: forks the workers, the scheduler and the observability server, and keeps
them honest — modelled on gunicorn's arbiter.

One thread, one loop. Signal handlers only record the signal and wake the loop through a
self-pipe; reaping, killing and spawning happen in :meth:`Supervisor.step`, which also ticks
the small duties of workerd.duties (the watchdog over timeouts and silence, lease renewal,
giving back a dead worker's job, the registry heartbeat, readiness). When a dead child's slot
is refilled is workerd.respawn's to say. No threads ever: a forked copy of a threaded process can
inherit a lock held by a thread that did not come along. The clock, the engine scripts and the
process spawner are constructor arguments, so tests drive ``step(now)`` by hand.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from wsgiref.simple_server import WSGIServer

import redis

from shared.connect.redis_conn import connect
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.schedules import Schedule
from shared.obs import metrics, tracing
from shared.settings.config import Settings, redact_url
from workerd import sd_notify as notify
from workerd.backoff import Backoff
from workerd.children import (
    OBSERVER,
    SCHEDULER,
    WORKER,
    Child,
    ForkSpawner,
    Roster,
    Spawner,
    accept_stop_signals,
    describe_exit,
    die_with_parent,
)
from workerd.duties.cancels import Cancels
from workerd.duties.fleet_heartbeat import RegistryHeartbeat
from workerd.duties.leases import Leases
from workerd.duties.readiness import Readiness
from workerd.duties.release import Release
from workerd.duties.script_loading import ScriptLoader
from workerd.duties.watchdog import Watchdog
from workerd.handler_registry import registered_types
from workerd.obs_server import ObservabilityApp, ObservabilityServer
from workerd.reload import ImportCheck
from workerd.respawn import Halt, Respawns
from workerd.scheduler import SchedulerProcess
from workerd.slots import SlotTable
from workerd.worker import WorkerProcess
from workerd.worker_threads import ThreadedWorker

log = logging.getLogger(__name__)

TICK = 0.1  # seconds between loop iterations when nothing wakes the loop sooner
SCHEDULER_STOP_GRACE = 5.0
FINAL_ACK_WINDOW = 5.0  # at exit, how long to keep trying to requeue jobs of killed workers
HALT_KILL_WINDOW = 5.0  # after a halt, how long to wait for the killed children to go
# Sidekiq's choice: TSTP quiets the host (finish running jobs, claim nothing more), CONT resumes.
QUIET_SIGNALS = (signal.SIGTSTP, signal.SIGCONT)


@dataclass(frozen=True)
class Place:
    """Where one child lives in the slot table: its kind, its first slot, how many it owns."""

    kind: str
    index: int
    threads: int = 1


def _places(workers: int, threads: int, observer: bool) -> list[Place]:
    """Return the children's places: WORKER_COUNT workers of `threads` slots each (one per job
    thread), then the scheduler and, with a listener, the observability server."""
    places = [Place(WORKER, number * threads, threads) for number in range(workers)]
    places.append(Place(SCHEDULER, workers * threads))
    if observer:
        places.append(Place(OBSERVER, workers * threads + 1))
    return places


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
        quiet: bool = False,
        schedules: Sequence[Schedule] = (),
    ) -> None:
        self.settings = settings
        self.schedules = tuple(schedules)  # TASKFORGE_SCHEDULES, read and checked before forking
        self.redis_url = redact_url(settings.redis_url)
        self.listener = listener
        self.clock = clock
        self.pid = os.getpid()
        self.name = f"{socket.gethostname()}-{self.pid}"
        self.places = _places(settings.worker_count, settings.worker_threads, bool(listener))
        self.table = SlotTable(sum(place.threads for place in self.places))
        self.roster = Roster(self.table, spawner or ForkSpawner())
        self.children = self.roster.children  # pid -> Child
        self.respawns = Respawns()
        # Child names go on counting across a reload: the pid stays, names must not repeat.
        self.generation = generation
        self.reloaded = reloaded  # this image was started by a reload (SIGHUP)
        self.signals: list[int] = []
        self.stopping = False
        self.reloading = False  # the drain under way ends in a re-exec, not an exit
        self.check: ImportCheck | None = None
        self.drain_deadline = 0.0
        self.scripts = scripts or Scripts(
            self._redis(), Keys(settings.namespace), Policy.from_settings(settings)
        )
        self.renew_interval = min(1.0, settings.visibility_timeout / 4)
        self._add_duties(clock, send_notify, quiet)
        self.readiness.publish()  # quiet after a reload: before the first worker is forked
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def _add_duties(
        self, clock: Callable[[], float], send_notify: Callable[[str], bool], quiet: bool
    ) -> None:
        settings, roster, scripts = self.settings, self.roster, self.scripts
        self.loader = ScriptLoader(scripts, Backoff("supervisor", redis_url=settings.redis_url))
        self.cancels = Cancels(roster, grace=settings.cancel_grace)
        self.leases = Leases(
            roster,
            scripts,
            interval=self.renew_interval,
            redis_url=self.redis_url,
            cancels=self.cancels,
        )
        self.release = Release(
            scripts, redis_url=self.redis_url, clock=clock, queues=settings.worker_queues.names
        )
        self.registry = RegistryHeartbeat(
            roster,
            scripts,
            name=self.name,
            queues=settings.worker_queues.names,
            types=registered_types(),
            plan=settings.worker_queues.describe(),
            quiet=quiet,
        )
        self.watchdog = Watchdog(
            roster, silence_timeout=settings.heartbeat_timeout, drain_grace=settings.drain_grace
        )
        self.readiness = Readiness(
            roster,
            self.loader,
            worker_count=settings.worker_count,
            reloaded=self.reloaded,
            send=send_notify,
            quiet=lambda: self.registry.quiet,
        )

    def _redis(self) -> redis.Redis:
        # Short timeouts: a Redis outage must not stall reaping and respawning for long.
        return connect(
            self.settings,
            role="supervisor",
            socket_timeout=min(1.0, self.settings.redis_socket_timeout),
            connect_timeout=min(0.5, self.settings.redis_connect_timeout),
        )

    def close(self) -> None:
        """Close the wake-up pipe (the loop is over; tests make many supervisors)."""
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- signals -----------------------------------------------------------------------------

    @property
    def quiet(self) -> bool:
        """Tell whether this host claims nothing more (SIGTSTP or the API) until resumed."""
        return self.registry.quiet

    def install_signals(self) -> None:
        """Record signals and wake the loop; everything else happens in step()."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, *QUIET_SIGNALS):
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
            elif signum in QUIET_SIGNALS:
                # Workers read it from shared memory before their next claim.
                self.registry.signalled(signum == signal.SIGTSTP, signal.Signals(signum).name)
                self.readiness.publish()

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
            self.roster.drain(child)

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
        error = None if self.check is None else self.check.verdict(now)
        if error is None:
            return  # no check, or still running
        self.check = None
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
                "threads_per_worker": self.settings.worker_threads,
                # Holding the next job (on/off): batching replaces it (workerd.batching).
                "prefetch": self.settings.worker_prefetch and self.settings.worker_batch == 1,
                # Jobs claimed and acknowledged per call (1: off; workerd.batching).
                "batch": self.settings.worker_batch,
                "supervisor": self.name,
                "redis": self.redis_url,
                "handlers": list(self.settings.handlers),
                # What this host takes (routing, docs/QUEUES.md): these types from these queues.
                "queues": self.settings.worker_queues.describe(),
                "job_types": registered_types(),
                "schedules": [schedule.name for schedule in self.schedules],
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
        """Do one iteration: signals, reaping, the watchdog, spawning, then each duty's tick."""
        self._handle_signals(now)
        self._reap(now)
        self._poll_check(now)
        self.loader.tick(now)
        if self.stopping and now >= self.drain_deadline:
            self._kill_workers("drain grace over")
        self.watchdog.tick(now)
        self.leases.tick(now)
        self.cancels.tick(now)
        self.release.tick(now)
        if not self.stopping:
            self._spawn_missing(now)
        # The registry first: a quiet request it applies is published to the workers below.
        self.registry.tick(now)
        self.readiness.tick(now)

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
        for number, place in enumerate(self.places):
            if place.index not in running and self.respawns.due(place.index, now):
                self._spawn(number, place, now)

    def _spawn(self, number: int, place: Place, now: float) -> None:
        self.generation += 1
        kind, index, threads = place.kind, place.index, place.threads
        name = f"{self.name}-{kind}{number}-{self.generation}"
        for slot in range(index, index + threads):
            self.table.slot(slot).reset(booting=True)

        def body() -> int:
            return self._child(Child(kind, index, os.getpid(), name, now, threads=threads))

        pid = self.roster.spawner.spawn(name, body)
        self.children[pid] = Child(kind, index, pid, name, now, threads=threads)
        log.info("child_spawned", extra={"child": name, "kind": kind, "child_pid": pid})

    def _child(self, child: Child) -> int:
        """Run in the forked child: detach from the supervisor's plumbing, then run its loop."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        # TSTP's default stops the process: ignored until the child's own handler is in.
        signal.signal(signal.SIGTSTP, signal.SIG_IGN)
        signal.signal(signal.SIGCONT, signal.SIG_DFL)
        die_with_parent(self.pid)
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self.listener is not None and child.kind != OBSERVER:
            self.listener.server_close()
        client = connect(self.settings, role=child.kind)
        scripts = Scripts(client, self.scripts.keys, self.scripts.policy)
        slot = self.table.slot(child.index)
        process: WorkerProcess | ThreadedWorker | SchedulerProcess | ObservabilityServer
        if child.kind == WORKER:
            metrics.hold_job_writes()  # written a few times a second (shared.obs.held_writes)
        if child.kind == WORKER and child.threads > 1:
            slots = [(self.table.slot(index), child.worker_id(index)) for index in child.slots]
            process = ThreadedWorker(self.settings, scripts, slots, child.name, self.pid)
        elif child.kind == WORKER:
            # Its slot's ClaimFence carries the host's quiet request (workerd.slots).
            process = WorkerProcess(self.settings, scripts, slot, child.name, self.pid)
        elif child.kind == SCHEDULER:
            grace = 2 * self.renew_interval + 1.0
            process = SchedulerProcess(
                scripts,
                slot,
                self.pid,
                reconnect_grace=grace,
                redis_url=self.settings.redis_url,
                served=self.settings.worker_queues.names,
                schedules=self.schedules,
            )
        else:
            assert self.listener is not None
            app = ObservabilityApp(scripts, self.table, self.settings.worker_queues)
            process = ObservabilityServer(self.listener, app, slot, self.pid)
        process.install_signals()
        accept_stop_signals()  # blocked since the fork (children.STOP_SIGNALS)
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
            states = self.roster.slot_states(child)
            self.release.on_worker_died(child, states, draining=self.stopping)
            # Its jobs are no longer running here: taskforge_busy_workers counts slots.
            for index in child.slots:
                self.table.slot(index).reset(booting=False)
        failed = booting or (child.kill_reason is None and not expected and code != 0)
        self.respawns.after_exit(child, now, failed=failed, booting=booting)

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
