"""Shared-memory slots: how a child tells the supervisor it is alive and what it is running.

The supervisor maps one anonymous shared region before it forks; each child owns one slot,
and one more record holds the supervisor's own status for the observability server. A child
writes its heartbeat and current job with no system call (a pipe could fill up and block a
child; a file's mtime costs a syscall per beat), and the supervisor reads every slot on each
tick. A sequence counter (a seqlock) lets a reader skip a torn, half-written record.

The other way, each slot ends with a few words only the supervisor writes and only its child
reads (:class:`Control`): a request to stop the running job (a cancel) and a drain, set before
the supervisor sends SIGTERM, so the child tells the two signals apart. One aligned 8-byte word
each: a single store, no seqlock needed.

The host's quiet request is such a word too, one for the whole table: a worker reads it before
each claim and a read cannot tear (the status record, rewritten on every supervisor tick, could
be mid-write when read, and a worker then fell back to its previous reading: a claim slipped
through after /health said quiet). Reading it is not enough on its own: a worker that read
"not quiet" just before the supervisor set it still claims afterwards. So each worker holds a
lock of its own (:class:`ClaimFence`) from the read to its claim's reply, and the status says
quiet, for /health and /ready, only once the supervisor has taken and given back every worker's
lock after setting the request: every claim that read "not quiet" has answered by then, and
every later read sees the request. Uncontended, a lock is two atomic operations in the worker's
own memory: no system call, no Redis command.
"""

from __future__ import annotations

import mmap
import multiprocessing
import struct
import time
from dataclasses import dataclass
from types import TracebackType

from shared.model.queues import DEFAULT_QUEUE

RECORD_SIZE = 320  # room to grow a record without moving the others
_WORD = 8  # the sequence counter: one aligned 64-bit word at the start of each record
# Each record is the sequence counter, then these fields (at offset + 8).
# heartbeat (monotonic s), token, job started (monotonic s), job timeout (s), job id, queue,
# job type (for GET /workers: what each process runs), alone (1: the job runs alone in its
# process, WORKER_THREADS; its death is its own)
_CHILD = struct.Struct("<dqdd36s64s128si")
# heartbeat (monotonic s), live workers, scheduler alive, scripts loaded, quiet
_SUPERVISOR = struct.Struct("<diiii")
_READ_ATTEMPTS = 100
# The supervisor's words at the end of each child's record (the child's fields end at 272):
# cancels sent (a counter), the execution to cancel (its start, monotonic s), drain requested.
_CONTROL_AT = RECORD_SIZE - 3 * _WORD
_CANCELS, _CANCEL_TARGET, _DRAIN = 0, 1, 2
# The host's quiet request: one word after the supervisor's status record (its fields end at 32).
_QUIET_AT = RECORD_SIZE - _WORD
# Locks made for a fork: the semaphore is unlinked at once and lives in memory the child
# inherits (no resource tracker process, whatever multiprocessing's default start method).
_FORK = multiprocessing.get_context("fork")


class _SeqRecord:
    """One fixed-size record in the shared region, written by one process, read by others.

    The counter goes through a memoryview of 64-bit words: one aligned 8-byte load or store
    (x86-64, arm64). struct.pack_into would not do: it zero-fills its target before writing,
    so readers could see the counter pass through 0 — even — on every update, and CPython packs
    standard-size integers a byte at a time.
    """

    def __init__(
        self, region: mmap.mmap, words: memoryview, offset: int, layout: struct.Struct
    ) -> None:
        self._region = region
        self._words = words
        self._index = offset // _WORD
        self._fields_at = offset + _WORD
        self._layout = layout

    def write(self, *fields: object) -> None:
        # Odd while writing: a reader that sees an odd or changed sequence reads again. `| 1`
        # also heals a record whose last writer was killed mid-write (left odd forever).
        begin = (self._words[self._index] + 1) | 1
        self._words[self._index] = begin
        self._layout.pack_into(self._region, self._fields_at, *fields)
        self._words[self._index] = begin + 1

    def read(self) -> tuple[object, ...] | None:
        for _ in range(_READ_ATTEMPTS):
            before = self._words[self._index]
            record = self._layout.unpack_from(self._region, self._fields_at)
            after = self._words[self._index]
            if before == after and before % 2 == 0:
                return record
        return None


@dataclass(frozen=True)
class SlotState:
    """One consistent reading of a child's slot."""

    heartbeat: float
    job_id: str | None
    token: int  # the running job's token; 0 between jobs; -1 until the child's first beat
    job_started: float
    job_timeout: float
    queue: str = ""
    job_type: str = ""
    alone: bool = False  # the job runs alone in its threaded process (workerd.worker_threads)

    @property
    def booting(self) -> bool:
        """Tell whether the child has not yet beaten once (still starting up)."""
        return self.token < 0

    @property
    def writing_outcome(self) -> bool:
        """Tell whether the job shown has left its handler and its outcome is being written
        (Slot.handler_returned stamps the beat after the start; start_job stamps both alike)."""
        return bool(self.job_id) and self.heartbeat > self.job_started


class Control:
    """The supervisor's words in one slot: what it asks of the child besides signals.

    A job's execution is named by its start (the monotonic time start_job wrote, unique per
    child): a cancel sent for a job that ended meanwhile does not match the child's next one.
    """

    def __init__(self, words: memoryview, floats: memoryview, offset: int) -> None:
        self._words = words
        self._floats = floats
        self._index = (offset + _CONTROL_AT) // _WORD

    def clear(self) -> None:
        """Forget every request (before the child is forked)."""
        for word in (_CANCELS, _CANCEL_TARGET, _DRAIN):
            self._words[self._index + word] = 0

    def request_cancel(self, started: float) -> None:
        """Ask the child to stop the execution that started at `started` (supervisor)."""
        self._floats[self._index + _CANCEL_TARGET] = started
        self._words[self._index + _CANCELS] += 1  # after the target: a reader sees both

    def request_drain(self) -> None:
        """Say that the next SIGTERM is a drain (supervisor)."""
        self._words[self._index + _DRAIN] = 1

    def cancels_sent(self) -> int:
        """Return how many cancels the supervisor sent this child (child)."""
        return self._words[self._index + _CANCELS]

    def cancel_requested(self, started: float) -> bool:
        """Tell whether the execution that started at `started` is asked to stop (child)."""
        return started != 0.0 and self._floats[self._index + _CANCEL_TARGET] == started

    def drain_requested(self) -> bool:
        """Tell whether the supervisor asked the child to drain (child)."""
        return self._words[self._index + _DRAIN] != 0


class ClaimFence:
    """A worker's claim lock and the host's quiet request (see the module's docstring).

    The worker holds it (``with fence:``) from its reading of :meth:`quiet` to its claim's
    reply; the supervisor only ever tries it without waiting (:meth:`passed`).
    """

    def __init__(self, table: SlotTable, index: int) -> None:
        self._table = table
        self._index = index
        self._lock = table._locks[index]  # the one made before this slot's child was forked
        self._words = table._words
        self._quiet_index = table._quiet_index

    def quiet(self, previous: bool = False) -> bool:
        """Tell whether the host is asked to claim nothing (one aligned load: never torn,
        so `previous`, the caller's last reading, is not needed)."""
        return self._words[self._quiet_index] != 0

    def __enter__(self) -> ClaimFence:
        self._lock.acquire()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._lock.release()


class Slot:
    """One child's record: written by the child, read by the supervisor; its Control, and the
    ClaimFence a worker child holds around each claim."""

    # Set by a job thread around a job it runs alone in its process (workerd.worker_threads):
    # start_job says so in the record, so a death then is the job's own (workerd.duties.release).
    alone = False

    def __init__(
        self,
        record: _SeqRecord,
        control: Control | None = None,
        fence: ClaimFence | None = None,
    ) -> None:
        self._record = record
        self.control = control
        self.fence = fence
        self._job: tuple[int, float, bytes, bytes, bytes, int] = (0, 0.0, b"", b"", b"", 0)
        self._showing = False  # a job is shown (start_job) and no beat has cleared it since

    def reset(self, *, booting: bool) -> None:
        """Clear the slot before forking its child; while booting the token reads -1. The
        child gets a new claim lock: one a killed child held would never be given back."""
        self._record.write(time.monotonic(), -1 if booting else 0, 0.0, 0.0, b"", b"", b"", 0)
        if self.control is not None:
            self.control.clear()
        if self.fence is not None:
            self.fence._table._new_lock(self.fence._index)

    def beat(self) -> None:
        """Record that the child is alive and between jobs."""
        self._record.write(time.monotonic(), 0, 0.0, 0.0, b"", b"", b"", 0)
        self._showing = False

    def beat_if_idle(self) -> None:
        """Beat, unless the slot shows a job (a beat would take it off: its lease would no
        longer be renewed). For waits between jobs outside the step's own beat: a write that
        waits out a Redis outage (workerd.acks)."""
        if not self._showing:
            self.beat()

    def start_job(
        self,
        job_id: str,
        token: int,
        timeout: float,
        queue: str = DEFAULT_QUEUE,
        job_type: str = "",
    ) -> float:
        """Record the job the child is about to run (its lease is renewed from here on); return
        its start, which names this execution (Control)."""
        now = time.monotonic()
        job_b, queue_b, type_b = job_id.encode(), queue.encode(), job_type.encode()
        self._record.write(now, token, now, timeout, job_b, queue_b, type_b, int(self.alone))
        self._job = (token, now, job_b, queue_b, type_b, int(self.alone))
        self._showing = True
        return now

    def handler_returned(self, write_limit: float) -> None:
        """The running job's handler returned: the job stays shown (its lease is renewed, a
        death names it) and is timed anew while its outcome is written, for `write_limit`
        seconds from now (0: untimed). That write waits out a Redis outage, and the job's
        timeout bounds its handler, not the wait: timed by it, the watchdog killed a worker
        whose job had finished, losing its completion's line and counts, and failed the job as
        timed out (run again, had the completion not reached Redis). Still bounded: a write
        that never lands (a Redis error that does not clear while leases renew) is killed at
        the limit, as a job stuck that long would be."""
        token, started, job_b, queue_b, type_b, alone = self._job
        now = time.monotonic()
        timeout = 0.0 if write_limit <= 0 else (now - started) + write_limit
        self._record.write(now, token, started, timeout, job_b, queue_b, type_b, alone)

    def read(self) -> SlotState | None:
        """Return a consistent reading, or None if the child kept writing (read next tick)."""
        record = self._record.read()
        if record is None:
            return None
        heartbeat, token, started, timeout, raw_id, raw_queue, raw_type, alone = record
        job_id = raw_id.rstrip(b"\0").decode() or None  # type: ignore[union-attr]
        queue = raw_queue.rstrip(b"\0").decode()  # type: ignore[union-attr]
        job_type = raw_type.rstrip(b"\0").decode()  # type: ignore[union-attr]
        return SlotState(heartbeat, job_id, token, started, timeout, queue, job_type, bool(alone))  # type: ignore[arg-type]


@dataclass(frozen=True)
class SupervisorStatus:
    """What the supervisor last published about its children."""

    heartbeat: float
    live_workers: int
    scheduler_alive: bool
    scripts_loaded: bool
    quiet: bool = False  # the host claims nothing more (SIGTSTP or the API) until resumed


class SlotTable:
    """The shared region: one slot per child plus the supervisor's status. Create before fork."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._region = mmap.mmap(-1, (count + 1) * RECORD_SIZE)
        self._words = memoryview(self._region).cast("Q")
        self._floats = memoryview(self._region).cast("d")
        self._status = _SeqRecord(self._region, self._words, count * RECORD_SIZE, _SUPERVISOR)
        self._quiet_index = (count * RECORD_SIZE + _QUIET_AT) // _WORD
        # Supervisor side: each slot's claim lock, and which have been passed since the quiet
        # request was set (a lock made while it is set needs no passing: its child reads it).
        self._locks = [_FORK.Lock() for _ in range(count)]
        self._passed: set[int] = set()

    def slot(self, index: int) -> Slot:
        """Return the slot at `index`."""
        if not 0 <= index < self.count:
            raise IndexError(index)
        offset = index * RECORD_SIZE
        control = Control(self._words, self._floats, offset)
        record = _SeqRecord(self._region, self._words, offset, _CHILD)
        return Slot(record, control, ClaimFence(self, index))

    def _new_lock(self, index: int) -> None:
        self._locks[index] = _FORK.Lock()
        if self.quiet_requested():
            self._passed.add(index)
        else:
            self._passed.discard(index)

    def quiet_requested(self) -> bool:
        """Tell whether the supervisor asked its workers to claim nothing more."""
        return self._words[self._quiet_index] != 0

    def publish_status(
        self, live_workers: int, scheduler_alive: bool, scripts_loaded: bool, quiet: bool = False
    ) -> None:
        """Record the supervisor's view of its children, and whether the host is quiet.

        `quiet` is the request: the workers see it at once. The status says quiet once no
        claim that read the host as not quiet can still answer (:meth:`_fenced`); until then
        it still says not quiet, and the next call tries again.
        """
        if quiet and not self.quiet_requested():
            self._passed.clear()
        self._words[self._quiet_index] = int(quiet)
        settled = quiet and self._fenced()
        self._status.write(time.monotonic(), live_workers, scheduler_alive, scripts_loaded, settled)

    def _fenced(self) -> bool:
        """Pass every claim lock not passed since the quiet request, without waiting; tell
        whether all are. A lock held means a claim under way: tried again next call."""
        for index, lock in enumerate(self._locks):
            if index not in self._passed and lock.acquire(block=False):
                lock.release()
                self._passed.add(index)
        return len(self._passed) == self.count

    def status(self) -> SupervisorStatus | None:
        """Return the supervisor's last published status (observability server side)."""
        record = self._status.read()
        if record is None:
            return None
        heartbeat, live, scheduler, loaded, quiet = record
        return SupervisorStatus(heartbeat, live, bool(scheduler), bool(loaded), bool(quiet))  # type: ignore[arg-type]

    def quiet(self, otherwise: bool = False) -> bool:
        """Tell whether the host is quiet as /health says it: requested, and no claim that
        read otherwise can still answer (`otherwise` when the record was being written)."""
        status = self.status()
        return otherwise if status is None else status.quiet
