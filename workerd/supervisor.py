"""The supervisor: forks the workers, the scheduler and the observability server, and keeps
them honest — modelled on gunicorn's arbiter.

One thread, one loop. Signal handlers only record the signal and wake the loop through a
self-pipe; reaping, renewing, killing and spawning happen in :meth:`Supervisor.step`. No
threads ever: a forked copy of a threaded process can inherit a lock held by a thread that did
not come along. The supervisor renews the leases of its workers' jobs (one call per tick for
all of them), so a handler stuck in one long C call keeps its lease while its process lives;
when a worker dies mid-job the supervisor sees it at once and requeues the job.
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
from types import FrameType
from wsgiref.simple_server import WSGIServer

import redis

from shared import metrics
from shared.config import Settings, redact_url
from shared.keys import Keys
from shared.log import error_text
from shared.redis_checks import warn_about_redis
from shared.redis_conn import connect
from shared.scripts import Code, Policy, Scripts
from workerd import notify
from workerd.backoff import Backoff
from workerd.children import (
    OBSERVER,
    SCHEDULER,
    WORKER,
    Child,
    describe_exit,
    die_with_parent,
    process_stopped,
    signal_child,
)
from workerd.obs import ObservabilityApp, ObservabilityServer
from workerd.reload import ImportCheck
from workerd.scheduler import SchedulerProcess
from workerd.slots import SlotTable
from workerd.worker import WorkerProcess

log = logging.getLogger(__name__)

TICK = 0.1  # seconds between loop iterations when nothing wakes the loop sooner
REGISTRY_INTERVAL = 2.0
BOOT_FAILURE_LIMIT = 5  # consecutive children dying before they are up → halt
# Respawn delays double from 0.1 s per quick death of a slot. A child that dies while booting
# waits up to 5 s (a crash loop; the halt above ends it). A child that was up and serving --
# killed by the OOM killer, an operator, or a handler that crashes the process -- waits at
# most 1 s: its job is already back in the queue, and an empty slot only slows the queue
# down. The poison pill that kills every worker it meets is bounded by the recovery cap.
RESPAWN_FIRST = 0.1
RESPAWN_CAP_BOOTING = 5.0
RESPAWN_CAP_UP = 1.0
SCHEDULER_STOP_GRACE = 5.0
FINAL_ACK_WINDOW = 5.0  # at exit, how long to keep trying to requeue jobs of killed workers


class Halt(Exception):
    """The supervisor cannot run (children keep failing to boot); exit non-zero."""


@dataclasses.dataclass
class PendingAck:
    """A job whose worker is gone and whose fate still has to reach Redis."""

    job_id: str
    token: int
    action: str  # "worker died", "drain" (shutdown) or "timeout"
    timeout: float = 0.0
    # Set instead of job_id/token: "the job this worker claimed last, if it still holds it".
    claimed_by: str | None = None


class Supervisor:
    """Keeps WORKER_COUNT workers, one scheduler and one observability server running."""

    def __init__(
        self,
        settings: Settings,
        *,
        listener: WSGIServer | None = None,
        generation: int = 0,
        reloaded: bool = False,
    ) -> None:
        self.settings = settings
        self.redis_url = redact_url(settings.redis_url)
        self.silence_timeout = settings.heartbeat_timeout
        self.listener = listener
        self.pid = os.getpid()
        self.name = f"{socket.gethostname()}-{self.pid}"
        kinds = [WORKER] * settings.worker_count + [SCHEDULER] + ([OBSERVER] if listener else [])
        self.kinds = kinds  # slot index -> kind of child
        self.table = SlotTable(len(kinds))
        self.children: dict[int, Child] = {}
        self.respawn_at: dict[int, float] = {}
        self.failures: dict[int, int] = {}
        self.boot_failures = 0
        # Child names go on counting across a reload: the pid stays, names must not repeat.
        self.generation = generation
        self.reloaded = reloaded  # this image was started by a reload (SIGHUP)
        self.pending_acks: list[PendingAck] = []
        self.signals: list[int] = []
        self.stopping = False
        self.reloading = False  # the drain under way ends in a re-exec, not an exit
        self.check: ImportCheck | None = None
        self.drain_deadline = 0.0
        self.next_renew = 0.0
        self.next_registry = 0.0
        self.ready_sent = False
        # Ready means Redis has answered: the scripts are loaded at start and, while Redis is
        # unreachable, again with backoff until they are.
        self.scripts_loaded = False
        self.next_script_load = 0.0
        self.redis_backoff = Backoff("supervisor", redis_url=settings.redis_url)
        self.lease = settings.visibility_timeout
        self.renew_interval = min(1.0, self.lease / 4)
        self.scripts = Scripts(
            self._redis(), Keys(settings.key_prefix), Policy.from_settings(settings)
        )
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def _redis(self) -> redis.Redis:
        # Short timeouts: a Redis outage must not stall reaping and respawning for long.
        quick = dataclasses.replace(
            self.settings,
            redis_socket_timeout=min(1.0, self.settings.redis_socket_timeout),
            redis_connect_timeout=min(0.5, self.settings.redis_connect_timeout),
        )
        return connect(quick, role="supervisor")

    # -- signals -----------------------------------------------------------------------------

    def install_signals(self) -> None:
        """Record signals and wake the loop; everything else happens in step()."""
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, self._record_signal)

    def _record_signal(self, signum: int, _frame: FrameType | None) -> None:
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
        notify.notify("STOPPING=1")
        log.info(
            "supervisor_stopping", extra={"signal": cause, "grace_s": self.settings.drain_grace}
        )

    def _begin_drain(self, now: float) -> None:
        """Stop claiming: workers finish their job (up to the grace), then exit."""
        self.stopping = True
        self.drain_deadline = now + self.settings.drain_grace
        for child in self._of_kind(WORKER):
            signal_child(child.pid, signal.SIGTERM)

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
        # systemd: reloading until the new image sends READY=1 (MONOTONIC_USEC since v253).
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notify.notify(f"RELOADING=1\nMONOTONIC_USEC={usec}")
        log.info("supervisor_reloading", extra={"grace_s": self.settings.drain_grace})

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Run until shut down or due to reload; return the exit code (0 clean, 3 halted).

        After a 0, :attr:`reloading` tells the caller to re-exec rather than exit.
        """
        self.install_signals()
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
            while not self._finished():
                self.step(time.monotonic())
                self._sleep()
        except Halt as exc:
            log.error("supervisor_halted", extra={"reason": str(exc)})
            self._kill_everything()
            return 3
        finally:
            if self.check is not None:
                self.check.kill()
                self.check = None
        self._stop_helpers()
        self._flush_acks(deadline=time.monotonic() + FINAL_ACK_WINDOW)
        if self.reloading:
            return 0  # the same name comes back after the exec: stay in the registry
        self._leave_registry()
        log.info("supervisor_stopped")
        return 0

    def step(self, now: float) -> None:
        """Do one iteration: signals, reaping, lease renewal, policing, spawning, reporting."""
        self._handle_signals(now)
        self._reap(now)
        self._poll_check(now)
        if not self.scripts_loaded and now >= self.next_script_load:
            self._load_scripts(now)
        if self.stopping and now >= self.drain_deadline:
            self._kill_workers("drain grace over")
        self._police(now)
        if now >= self.next_renew:
            self.next_renew = now + self.renew_interval
            self._renew()
        self._flush_acks()
        if not self.stopping:
            self._spawn_missing(now)
        self._report(now)

    def _sleep(self) -> None:
        select.select([self._wake_r], [], [], TICK)
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _finished(self) -> bool:
        return self.stopping and not self._of_kind(WORKER)

    def _of_kind(self, kind: str) -> list[Child]:
        return [c for c in self.children.values() if c.kind == kind]

    def _load_scripts(self, now: float) -> None:
        try:
            self.scripts.load()
            self.scripts_loaded = True
            self.redis_backoff.succeeded()
            warn_about_redis(self.scripts.redis, log)  # eviction or no persistence loses jobs
        except redis.RedisError as exc:
            # Not fatal: the children back off and retry on their own, and so does this.
            self.next_script_load = now + self.redis_backoff.failed(exc)

    # -- children ----------------------------------------------------------------------------

    def _spawn_missing(self, now: float) -> None:
        running = {child.index for child in self.children.values()}
        for index, kind in enumerate(self.kinds):
            if index not in running and now >= self.respawn_at.get(index, 0.0):
                self._spawn(index, kind, now)

    def _spawn(self, index: int, kind: str, now: float) -> None:
        self.generation += 1
        name = f"{self.name}-{kind}{index}-{self.generation}"
        slot = self.table.slot(index)
        slot.reset(booting=True)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = self._child(Child(kind, index, os.getpid(), name, now))
            except BaseException:
                log.exception("child_crashed", extra={"child": name})
            finally:
                os._exit(code)
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
                pid, status = os.waitpid(-1, os.WNOHANG)
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
            self._requeue_job_of(child, state)
        failed = booting or (child.kill_reason is None and not expected and code != 0)
        self._plan_respawn(child, now, failed=failed, booting=booting)

    def _requeue_job_of(self, child: Child, state: object) -> None:
        """Queue the fate of the job a dead worker was running (it reaches Redis in _flush_acks)."""
        action = "drain" if self.stopping else "worker died"
        if child.kill_reason == "lease lost":
            # The job its slot shows is someone else's now. But a worker that ran on after its
            # lease was lost (resumed after SIGSTOP) may have claimed another job before it
            # was killed: that one is still its own, found by its last claim.
            self.pending_acks.append(PendingAck("", 0, action, claimed_by=child.name))
            return
        if child.killed_job is not None:
            job_id, token, timeout = child.killed_job
            if child.kill_reason == "timeout":
                action = "timeout"
            self.pending_acks.append(PendingAck(job_id, token, action, timeout))
        elif state is not None and state.job_id:  # type: ignore[attr-defined]
            job_id, token, timeout = state.job_id, state.token, state.job_timeout  # type: ignore[attr-defined]
            self.pending_acks.append(PendingAck(job_id, token, action, timeout))
        # A worker that died inside a claim (or a complete that claims the next job) holds a
        # job its slot never showed: Redis knows it, under the worker's last claim.
        self.pending_acks.append(PendingAck("", 0, action, claimed_by=child.name))

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
        if now - child.started > 10.0 or not failed:
            self.failures[child.index] = 0
        failures = self.failures.get(child.index, 0) + (1 if failed else 0)
        self.failures[child.index] = failures
        cap = RESPAWN_CAP_BOOTING if booting else RESPAWN_CAP_UP
        delay = 0.0 if failures <= 1 else min(cap, RESPAWN_FIRST * 2 ** (failures - 2))
        self.respawn_at[child.index] = now + delay

    def _kill(self, child: Child, reason: str, sig: signal.Signals = signal.SIGKILL) -> None:
        if child.kill_reason is None:
            child.kill_reason = reason
        signal_child(child.pid, sig)

    def _kill_workers(self, reason: str) -> None:
        for child in self._of_kind(WORKER):
            if child.kill_reason is None:
                log.warning("child_killed", extra={"child": child.name, "reason": reason})
                self._kill(child, "drain")

    def _kill_everything(self) -> None:
        for child in list(self.children.values()):
            self._kill(child, "halt")
        deadline = time.monotonic() + 5
        while self.children and time.monotonic() < deadline:
            self._reap_quietly(deadline)

    def _reap_quietly(self, deadline: float) -> None:
        # Not _reap: after a halt, a child's exit must not plan a respawn or count (and raise)
        # another boot failure.
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            self.children.clear()
            return
        if pid:
            self.children.pop(pid, None)
        else:
            select.select([self._wake_r], [], [], min(TICK, max(0.0, deadline - time.monotonic())))

    def _stop_helpers(self) -> None:
        """Stop the scheduler and the observability server, after the workers are gone."""
        for sig in (signal.SIGTERM, signal.SIGKILL):  # ask, then insist
            for child in list(self.children.values()):
                self._kill(child, "shutdown", sig)
            deadline = time.monotonic() + SCHEDULER_STOP_GRACE
            while self.children and time.monotonic() < deadline:
                self._reap(time.monotonic())
                if self.children:
                    select.select([self._wake_r], [], [], TICK)

    # -- leases, timeouts, silence ---------------------------------------------------------------

    def _police(self, now: float) -> None:
        """Kill workers past their job's timeout and children silent outside a job."""
        for child in list(self.children.values()):
            state = self.table.slot(child.index).read()
            if state is None or child.kill_reason is not None:
                continue
            if state.job_id:
                if state.job_timeout > 0 and now - state.job_started > state.job_timeout:
                    child.killed_job = (state.job_id, state.token, state.job_timeout)
                    log.warning(
                        "job_timed_out",
                        extra={
                            "job_id": state.job_id,
                            "child": child.name,
                            "timeout_s": state.job_timeout,
                        },
                    )
                    self._kill(child, "timeout")
            elif now - state.heartbeat > self.silence_timeout:
                log.error(
                    "child_silent", extra={"child": child.name, "silent_s": now - state.heartbeat}
                )
                self._kill(child, "silent")

    def _renew(self) -> None:
        """Extend the lease of every running job in one call; stop workers that lost theirs."""
        running: list[tuple[Child, str, int]] = []
        for child in self._of_kind(WORKER):
            state = self.table.slot(child.index).read()
            if state is None or not state.job_id or child.kill_reason is not None:
                continue
            if process_stopped(child.pid):
                continue  # a stopped process is not working on its job: let the lease run out
            running.append((child, state.job_id, state.token))
        if not running:
            return
        try:
            codes = self.scripts.renew([(job_id, token) for _, job_id, token in running])
        except redis.RedisError as exc:
            log.warning(
                "lease_renewal_failed",
                extra={"redis": self.redis_url, "error": error_text(exc), "jobs": len(running)},
            )
            return
        for (child, job_id, _), code in zip(running, codes, strict=True):
            if code in (Code.STALE_TOKEN, Code.NOT_FOUND):
                log.error("lease_lost", extra={"job_id": job_id, "child": child.name})
                self._kill(child, "lease lost")

    def _flush_acks(self, deadline: float | None = None) -> None:
        """Send queued requeues/failures to Redis; keep the ones an outage blocks for later."""
        while self.pending_acks:
            ack = self.pending_acks[0]
            try:
                self._apply(ack)
            except redis.RedisError as exc:
                if deadline is None or time.monotonic() >= deadline:
                    if deadline is not None:
                        log.error(
                            "requeue_abandoned",
                            extra={
                                "job_id": ack.job_id,
                                "redis": self.redis_url,
                                "error": error_text(exc),
                                "note": "its lease will expire and a scheduler recovers it",
                            },
                        )
                        self.pending_acks.pop(0)
                        continue
                    return
                time.sleep(0.1)
                continue
            self.pending_acks.pop(0)

    def _apply(self, ack: PendingAck) -> None:
        if ack.claimed_by is not None:
            ack = self._last_claim_of(ack)
            if not ack.job_id:
                return
        fields = {"job_id": ack.job_id}
        if ack.action == "timeout":
            error = f"Timeout: timed out after {ack.timeout:g}s; its worker was killed"
            # A timeout is rare and off the hot path: one read for the counter's type label.
            raw_type = self.scripts.redis.hget(self.scripts.keys.job(ack.job_id), "type")
            job_type = raw_type.decode() if raw_type else None
            result = self.scripts.fail(ack.job_id, ack.token, error)
            metrics.count("timed_out", job_type)
            if result.code is Code.RETRYING:
                metrics.count("retried", job_type)
            elif result.code is Code.DEAD:
                metrics.count("dead", job_type)
            log.warning(
                "job_timed_out",
                extra={**fields, "type": job_type, "result": result.code.name.lower()},
            )
            return
        outcome = self.scripts.release(ack.job_id, ack.token, drained=ack.action == "drain")
        fields["type"] = outcome.job_type
        if outcome.code is Code.DONE:
            metrics.count("released" if ack.action == "drain" else "recovered", outcome.job_type)
            event = "job_released" if ack.action == "drain" else "job_recovered"
            log.warning(event, extra={**fields, "reason": ack.action})
        elif outcome.code is Code.DEAD:
            metrics.count("dead", outcome.job_type)
            log.error("job_dead", extra={**fields, "reason": "recovery cap"})

    def _last_claim_of(self, ack: PendingAck) -> PendingAck:
        """Resolve "the job this dead worker claimed last" to that job, if it still holds it."""
        keys, client = self.scripts.keys, self.scripts.redis
        last = client.get(keys.last_claim(ack.claimed_by or ""))
        if last is None:
            return dataclasses.replace(ack, job_id="")
        job_id = last.decode().partition("|")[2]
        status, worker, token = client.hmget(keys.job(job_id), "status", "worker_id", "token")
        if status != b"processing" or worker is None or worker.decode() != ack.claimed_by:
            return dataclasses.replace(ack, job_id="")  # finished, requeued, or claimed anew
        # release checks the token again, inside its script: a claim since then is left alone.
        return dataclasses.replace(ack, job_id=job_id, token=int(token))

    # -- reporting ---------------------------------------------------------------------------

    def _report(self, now: float) -> None:
        workers = [c for c in self._of_kind(WORKER) if c.kill_reason is None]
        live = sum(1 for c in workers if (s := self.table.slot(c.index).read()) and not s.booting)
        scheduler_up = any(
            c.kill_reason is None and (s := self.table.slot(c.index).read()) and not s.booting
            for c in self._of_kind(SCHEDULER)
        )
        self.table.publish_status(live, scheduler_up, self.scripts_loaded)
        up = live == self.settings.worker_count and scheduler_up
        if not self.ready_sent and up and self.scripts_loaded and not self.stopping:
            self.ready_sent = True
            notify.notify(f"READY=1\nSTATUS={live} workers running")
            log.info("supervisor_ready", extra={"workers": live, "reloaded": self.reloaded})
        if now >= self.next_registry:
            self.next_registry = now + REGISTRY_INTERVAL
            busy = sum(1 for c in workers if (s := self.table.slot(c.index).read()) and s.job_id)
            # The registry is informational; an outage is logged by the loops it stops.
            with contextlib.suppress(redis.RedisError):
                self.scripts.heartbeat(
                    self.name,
                    {"host": socket.gethostname(), "pid": self.pid, "workers": live, "busy": busy},
                    ttl_ms=int(REGISTRY_INTERVAL * 5 * 1000),
                )

    def _leave_registry(self) -> None:
        with contextlib.suppress(redis.RedisError):  # else the record expires on its own
            self.scripts.heartbeat(self.name, {}, ttl_ms=1, leaving=True)
