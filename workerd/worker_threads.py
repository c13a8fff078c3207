"""A worker process that runs up to WORKER_THREADS jobs at once, one per thread.

Each job thread is workerd.worker's per-job loop (:class:`JobThread`, a WorkerProcess) on its
own slot: its own heartbeat, Control, ClaimFence, claim planner, routing and worker id
(``<child name>.t<k>``, so claims, leases, GET /workers and release_worker.lua work per
thread). The supervisor renews each slot's lease and times each slot's job as it does a
process's. The threads share the process's Redis client (redis-py's pool is thread-safe) and
Scripts (immutable once built). With WORKER_THREADS=1 none of this runs: the supervisor forks
a plain WorkerProcess and the job runs on the main thread, as always.

The main thread runs no job: it starts the threads, waits on them and takes the signals
(Python runs signal handlers on the main thread only). What one process's threads share:

- stopping: a drain's SIGTERM, the parent's death or recycling stops every thread's claims;
  each finishes its job and hands back a next job claimed with its complete, then exits.
- recycling: WORKER_MAX_JOBS counts the jobs of the process, not of a thread; RSS is the
  process's anyway.
- cancels: the supervisor writes the cancel in the job's slot Control and signals the
  process; the main thread finds the thread whose execution is named there and raises
  JobCanceled in it (PyThreadState_SetAsyncExc), only while its handler runs and has not
  asked ``job.cancel_requested()`` (:class:`ThreadExecution`). A thread blocked in one long C
  call (a sleep, a socket read) sees it when the call returns; past WORKER_CANCEL_GRACE the
  supervisor kills the process, and the other threads' jobs go back uncounted.

A thread cannot be killed: a timeout, a lost lease or a cancel past its grace SIGKILLs the
whole process (workerd.duties.release gives the culprit job its fate and the others back
without counting a recovery).

A job marked to run alone (``alone`` in its hash: it was one of several jobs running when a
threaded process died of a cause nobody could attribute, a segfault or the OOM killer) runs
with no sibling job in its process (:class:`AloneGate`): its thread waits, the job shown in
its slot (lease renewed, untimed), until the siblings' jobs end, and no thread claims until it
is done. Its slot then says it runs alone, so a death is its own and counts toward the
poison cap. A cancel of the job while it waits (its slot's Control names the wait) ends it
canceled without running it (``stopped: sigterm``), rather than at the grace with a kill that
would take its siblings' jobs too; a drain (or recycling) while it waits hands it back unrun,
as a job claimed with a complete is.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from shared.engine.scripts import Scripts
from shared.model.jobs import Job
from shared.obs import metrics, tracing
from shared.settings.config import Settings
from workerd.children import StopOnSignal
from workerd.execution import Execution, Outcome
from workerd.handler_registry import JobCanceled
from workerd.prefetch import READ_LATE
from workerd.slots import Control, Slot
from workerd.worker import WorkerProcess, job_timeout, outcome_write_limit, recycling_reason

log = logging.getLogger(__name__)

JOIN_WAIT = 0.5  # seconds the main thread waits on a thread before checking its parent again
GATE_WAIT = 0.5  # seconds a thread waits at the gate between heartbeats

_set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
_set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)
_set_async_exc.restype = ctypes.c_int


class ThreadExecution(Execution):
    """An Execution whose cancel another thread raises (the process's main thread).

    The main thread raises JobCanceled in the job thread only while `armed` (inside the
    handler), under a lock the job thread takes to disarm: a raise aimed at the handler can
    land, at the latest, while it disarms (in run_handler's ``finally``, inside its ``except
    JobCanceled``), never after, where it would escape the job's recording.
    """

    def __init__(self, started: float, control: Control | None, thread_id: int) -> None:
        # Reentrant: a second SIGTERM can run the main thread's handler inside the first's.
        self._guard = threading.RLock()
        self._armed = False
        self._fired = False  # JobCanceled was aimed at the thread and may not have landed yet
        self.thread_id = thread_id
        super().__init__(started, control)

    @property  # type: ignore[override]
    def armed(self) -> bool:
        return self._armed

    @armed.setter
    def armed(self, value: bool) -> None:
        with self._guard:
            self._armed = value
            if value or not self._fired:
                return
            # Disarming after a raise was aimed: take back one not yet delivered (a NULL
            # exception clears it) and raise it here, inside the handler's except clause.
            self._fired = False
            _set_async_exc(self.thread_id, ctypes.py_object())
        raise JobCanceled()

    def interrupt(self) -> bool:
        """Raise JobCanceled in the job thread if its handler runs, has not asked, and its
        cancel is requested (main thread); once. Tell whether it was raised."""
        with self._guard:
            if not self._armed or self.asked or not self.requested():
                return False
            self._armed = False  # once: the handler then unwinds
            self._fired = True
            _set_async_exc(self.thread_id, ctypes.py_object(JobCanceled))
            return True


class AloneGate:
    """Runs a job marked to run alone with no sibling job in its process.

    A thread holds the gate shared from before its claim to its job's end (one step); a
    thread whose job is marked trades its share for the gate alone, which it gets once no
    other thread holds a share. While one is waiting or running alone, no thread starts a step.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shares = 0  # threads inside a step
        self._marked = 0  # threads with a marked job, waiting or running alone
        self._alone = False

    def enter(self, keep_waiting: Callable[[], bool]) -> bool:
        """Take a share before a step, waiting while a marked job waits or runs; False when
        `keep_waiting` (called every GATE_WAIT seconds) says to stop waiting."""
        while True:
            with self._cond:
                if not self._marked:
                    self._shares += 1
                    return True
            # Outside the lock: it may call Redis (a job to hand back).
            if not keep_waiting():
                return False
            with self._cond:
                self._cond.wait_for(lambda: not self._marked, GATE_WAIT)

    def leave(self) -> None:
        """Give back the share taken by enter."""
        with self._cond:
            self._shares -= 1
            self._cond.notify_all()

    @contextmanager
    def alone(self, give_up: Callable[[], bool] = lambda: False) -> Iterator[bool]:
        """Hold the gate alone (from inside a step, whose share it trades for the while);
        yield True once held, or False, not held, when `give_up` (asked before each wait of
        at most GATE_WAIT seconds, and on each :meth:`wake`) says to stop waiting."""
        with self._cond:
            self._shares -= 1
            self._marked += 1
            gave_up = False
            while self._shares or self._alone:
                if give_up():
                    gave_up = True
                    break
                self._cond.wait(GATE_WAIT)
            if gave_up:  # the share back, as before the wait: the step goes on without it
                self._marked -= 1
                self._shares += 1
                self._cond.notify_all()
            else:
                self._alone = True
        if gave_up:
            yield False
            return
        try:
            yield True
        finally:
            with self._cond:
                self._alone = False
                self._marked -= 1
                self._shares += 1
                self._cond.notify_all()

    def wake(self) -> None:
        """Have every thread waiting at the gate look again (a cancel may have come for one)."""
        with self._cond:
            self._cond.notify_all()


class JobThread(WorkerProcess):
    """One job thread: WorkerProcess's per-job loop on its own slot, its stopping and its
    recycling those of its process (:class:`ThreadedWorker`)."""

    # Its process's main thread polls every job thread's flusher (ThreadedWorker.run): one
    # thread waking every READ_LATE per process, rather than one per job thread.
    FLUSHER_POLLED = True

    def __init__(
        self,
        process: ThreadedWorker,
        settings: Settings,
        scripts: Scripts,
        slot: Slot,
        worker_id: str,
        parent_pid: int,
        number: int = 0,
    ) -> None:
        self.process = process  # before WorkerProcess's own: `stopping` reads it
        self.thread_id = 0  # threading.get_ident() once the thread runs
        self._execution: ThreadExecution | None = None
        super().__init__(settings, scripts, slot, worker_id, parent_pid)
        # The process's threads start apart on a cluster's wake lists, as processes do by pid.
        self.planner.wake_turn += number

    @property  # type: ignore[override]
    def stopping(self) -> bool:
        return self.process.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        # The parent gone (keep_going sets the flag before the reason), or recycling (the
        # reason first): the whole process stops claiming.
        if value:
            self.process.stop(self.exit_reason or "supervisor gone")

    @property  # type: ignore[override]
    def execution(self) -> ThreadExecution | None:
        return self._execution

    @execution.setter
    def execution(self, value: Execution | None) -> None:
        # WorkerProcess._execute makes a plain Execution: this thread's can be interrupted.
        if value is not None and not isinstance(value, ThreadExecution):
            value = ThreadExecution(value.started, value.control, self.thread_id)
        self._execution = value

    def _due_for_recycling(self) -> bool:
        return self.process.due_for_recycling(self)

    def step(self) -> None:
        """WorkerProcess.step, inside the process's AloneGate."""
        if not self.process.gate.enter(self._wait_at_gate):
            return
        try:
            super().step()
        finally:
            self.process.gate.leave()

    def _wait_at_gate(self) -> bool:
        """While a marked job waits or runs: give back a job claimed with the last complete
        (its lease is not renewed while it waits), beat, and say whether to keep waiting."""
        self._hand_back_unstarted_job()
        self.slot.beat()
        return self.keep_going()

    def _execute(self, job: Job) -> Job | None:
        """WorkerProcess._execute; a job marked to run alone runs with no sibling job, unless
        its cancel or the process's stop comes while it waits for them (:meth:`_unstarted`)."""
        if job.extra.get("alone") != "1":
            return super()._execute(job)
        if self._too_old_to_start(job):  # asked now: the wait below renews its lease
            return None
        # Shown while it waits, so its lease is renewed and a cancel can name this wait;
        # untimed (timeout 0) until it starts.
        started = self.slot.start_job(job.id, job.token, 0.0, job.queue, job.type)
        waiting = Execution(started, self.slot.control)
        log.info("worker_waits_alone", extra={"job_id": job.id, "worker_id": self.worker_id})
        with self.process.gate.alone(lambda: waiting.requested() or self.stopping) as alone:
            if not alone:
                return self._unstarted(job, canceled=waiting.requested())
            self.slot.alone = True
            try:
                return super()._execute(job)
            finally:
                self.slot.alone = False

    def _unstarted(self, job: Job, *, canceled: bool) -> Job | None:
        """End a job that stopped waiting at the gate, its handler never run; return the next.

        Its cancel: it ends canceled, written as a handler stopped by its cancel's SIGTERM
        (cancel_running.lua, fenced by the job's token), the signal being what stopped its
        wait (ThreadedWorker._on_sigterm). A drain, recycling or the parent gone: it is handed
        back uncounted, as a job claimed with a completion is.
        """
        next_job = None
        if canceled:
            # Its outcome's write, as after a handler: the cancel's grace is over for it.
            self.slot.handler_returned(outcome_write_limit(job_timeout(job, self.settings)))
            outcome = Outcome(False, canceled="sigterm")
            next_job = self._record(job, outcome, {"duration_ms": 0}, None)
        else:
            self.next_job = job
            self._hand_back_unstarted_job()
        self.slot.beat()  # between jobs again
        return next_job

    def _record(
        self,
        job: Job,
        outcome: Outcome,
        fields: dict[str, object],
        attributes: dict[str, object] | None,
    ) -> Job | None:
        self.process.count_job()  # the process's count: WORKER_MAX_JOBS is per process
        return super()._record(job, outcome, fields, attributes)

    def run_thread(self) -> None:
        """The thread's body: WorkerProcess.run's loop, less what is the process's."""
        self.thread_id = threading.get_ident()
        log.info("worker_started", extra={"worker_id": self.worker_id})
        try:
            while self.keep_going():
                self.step()
            self._hand_back_unstarted_job()
        except BaseException:
            # A bug, not a job's failure (those are recorded): stop the process, whose exit
            # gives back what this thread held.
            log.exception("child_crashed", extra={"child": self.worker_id})
            self.process.failed = True
            self.process.stop("a job thread crashed")
        reason = self.exit_reason or self.process.exit_reason
        log.info("worker_stopped", extra={"worker_id": self.worker_id, "reason": reason})


class ThreadedWorker(StopOnSignal):
    """A worker process of several job threads; its main thread waits and takes signals."""

    def __init__(
        self,
        settings: Settings,
        scripts: Scripts,
        slots: Sequence[tuple[Slot, str]],
        name: str,
        parent_pid: int,
    ) -> None:
        self.settings = settings
        self.name = name
        self.parent_pid = parent_pid
        self.stopping = False
        self.failed = False
        self.exit_reason = ""
        self.jobs_done = 0
        self._count = threading.Lock()
        self.gate = AloneGate()
        self.threads = [
            JobThread(self, settings, scripts, slot, worker_id, parent_pid, number)
            for number, (slot, worker_id) in enumerate(slots)
        ]

    def install_signals(self) -> None:
        """As every child; SIGTERM also carries the supervisor's cancels (_on_sigterm)."""
        super().install_signals()
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _request_stop(self, signum: int, _frame: FrameType | None) -> None:
        """SIGINT (or a plain SIGTERM): every thread finishes its job, then exits."""
        self.stop(f"signal {signal.Signals(signum).name}")

    def _on_sigterm(self, signum: int, _frame: FrameType | None) -> None:
        """Interrupt each thread whose slot carries a new cancel; a SIGTERM that carries none
        (or comes with the drain's flag) stops the process after its running jobs."""
        cancel = drain = False
        for thread in self.threads:
            control = thread.slot.control
            if control is None:
                continue
            drain = drain or control.drain_requested()
            sent = control.cancels_sent()
            if sent == thread.cancels_seen:
                continue
            thread.cancels_seen, cancel = sent, True
            running = thread.execution
            if running is not None:
                running.interrupt()
        if cancel:
            self.gate.wake()  # a job waiting to run alone may be the one asked to stop
        if drain or not cancel:
            self._request_stop(signum, _frame)

    def stop(self, reason: str) -> None:
        """Stop claiming in every thread; each finishes its job, then exits (the first reason
        is the one logged)."""
        if not self.stopping:
            self.stopping, self.exit_reason = True, reason
            self.gate.wake()  # a job waiting to run alone is handed back, not started

    def count_job(self) -> None:
        """Count one job run by any thread (before its outcome is written: see _record)."""
        with self._count:
            self.jobs_done += 1

    def due_for_recycling(self, thread: JobThread) -> bool:
        """WorkerProcess._due_for_recycling for the whole process."""
        reason = recycling_reason(self.settings, self.jobs_done)
        if reason:
            thread.exit_reason = reason
        return bool(reason)

    def _beat_for_the_stopped(self, started: Sequence[threading.Thread]) -> None:
        """Beat the slot of each job thread whose loop has ended (a drain, recycling): it
        beats no more, and while a sibling finishes a long job its stale slot would make the
        process look silent to the supervisor, which would kill it and that job with it. The
        main thread's beat says what a beat between jobs says: the process lives."""
        for thread, job_thread in zip(started, self.threads, strict=True):
            if not thread.is_alive():
                # Not a slot still showing a job (a thread that crashed in one): that job's
                # lease is renewed, and the process's death names it.
                job_thread.slot.beat_if_idle()

    def run(self) -> int:
        """Run the job threads until every one has stopped; return the exit code."""
        # Workers are job threads here, as taskforge_busy_workers counts them (busy ≤ active).
        metrics.ACTIVE_WORKERS.set(len(self.threads))
        started = [
            threading.Thread(target=thread.run_thread, name=thread.worker_id, daemon=True)
            for thread in self.threads
        ]
        for thread in started:
            thread.start()
        polled = [thread.flusher for thread in self.threads if thread.flusher is not None]
        for thread in started:
            while thread.is_alive():
                # Each wake also reads the completion in flight of any held job past
                # READ_LATE (workerd.prefetch), for the job threads, as a flusher thread would.
                thread.join(READ_LATE if polled else JOIN_WAIT)
                for flusher in polled:
                    flusher.poll()
                self._beat_for_the_stopped(started)
                if not self.threads[0]._parent_alive():
                    self.stop("supervisor gone")
        metrics.flush_job_writes()
        log.info(
            "worker_process_stopped",
            extra={"child": self.name, "reason": self.exit_reason, "jobs": self.jobs_done},
        )
        tracing.shutdown()
        return 1 if self.failed else 0
