"""The supervisor driven one ``step(now)`` at a time: a fake spawner records the forks and lets
a test end a child with any exit status, a test clock stands still between steps, and the
engine scripts run on the private redis-server. No process is forked here; the real-process
tests (test_crashes, test_shutdown, test_reload, ...) prove the same rules end to end."""

from __future__ import annotations

import logging
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

import workerd.slots
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import Job, JobState, validate_enqueue
from shared.settings.config import Settings
from tests.support.redis_server import RedisServer
from workerd.children import SCHEDULER, WORKER, Child
from workerd.obs_server import BusyWorkers
from workerd.supervisor import Halt, Supervisor

SLOW_TO_GO_SILENT = "1h"  # so only the silence test sees a silent child


@dataclass
class FakeSpawner:
    """Records spawns and signals; a test ends a child with `exit`, reaped at the next step.

    SIGKILL ends a child at once, as it does a real one; any other signal only is recorded,
    and the test decides whether the child obeys.
    """

    next_pid: int = 70_000
    live: dict[int, str] = field(default_factory=dict)  # pid -> child name
    exits: list[tuple[int, int]] = field(default_factory=list)  # (pid, waitpid status)
    sent: list[tuple[int, signal.Signals]] = field(default_factory=list)
    stopped_pids: set[int] = field(default_factory=set)

    def spawn(self, name: str, body: Callable[[], int]) -> int:
        self.next_pid += 1
        self.live[self.next_pid] = name
        return self.next_pid

    def reap(self) -> tuple[int, int]:
        if self.exits:
            pid, status = self.exits.pop(0)
            del self.live[pid]
            return pid, status
        if not self.live:
            raise ChildProcessError
        return 0, 0

    def kill(self, pid: int, sig: signal.Signals) -> None:
        self.sent.append((pid, sig))
        if sig == signal.SIGKILL:
            self.exit(pid, killed_by=signal.SIGKILL)

    def stopped(self, pid: int) -> bool:
        return pid in self.stopped_pids

    def exit(self, pid: int, code: int = 0, killed_by: signal.Signals | None = None) -> None:
        """End `pid` with an exit code or a signal (waitpid's status encoding)."""
        if pid in self.live and all(p != pid for p, _ in self.exits):
            self.exits.append((pid, int(killed_by) if killed_by else code << 8))

    def signals_to(self, pid: int) -> list[signal.Signals]:
        return [sig for p, sig in self.sent if p == pid]


@dataclass
class StepClock:
    """Stands still until a test moves it."""

    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    """A supervisor on a fake spawner and a test clock, with the engine on the real Redis."""

    supervisor: Supervisor
    spawner: FakeSpawner
    scripts: Scripts
    notes: list[str]  # what the supervisor sent to systemd
    clock: StepClock

    @property
    def now(self) -> float:
        return self.clock.now

    def step(self, advance: float = 0.0) -> None:
        """Move the clock on by `advance` seconds and run one step."""
        self.step_at(self.clock.now + advance)

    def step_at(self, now: float) -> None:
        """Set the clock to `now` and run one step."""
        self.clock.now = now
        self.supervisor.step(now)

    def workers(self) -> list[Child]:
        return sorted(self.supervisor.roster.of_kind(WORKER), key=lambda c: c.index)

    def scheduler(self) -> Child:
        (child,) = self.supervisor.roster.of_kind(SCHEDULER)
        return child

    def up(self, *children: Child) -> None:
        """Each child's first beat, as its process writes it once booted."""
        for child in children or list(self.supervisor.children.values()):
            self.supervisor.table.slot(child.index).beat()

    def enqueue(self, **fields: Any) -> str:
        job_id = str(uuid.uuid4())
        self.scripts.enqueue(validate_enqueue({"type": "steps.t", **fields}), job_id)
        return job_id

    def claim(self, child: Child, *, show_in_slot: bool = True) -> Job:
        """Claim a job as `child` would; its slot shows it unless it died before writing it."""
        job = self.scripts.claim(child.name)
        assert job is not None
        if show_in_slot:
            timeout = job.timeout or 0.0
            started = self.supervisor.table.slot(child.index).start_job(job.id, job.token, timeout)
            # The slot stamps the start on the real clock, later than the test clock by however
            # long the rig took to get here (CI once: over 0.1 s, and a 5 s timeout tested at
            # 5.1 s on the test clock had not run out): the test clock moves to the start.
            self.clock.now = max(self.clock.now, started)
        return job

    def job(self, job_id: str) -> Job:
        job = get_job(self.scripts.redis, self.scripts.keys, job_id)
        assert job is not None
        return job


def _recorder(notes: list[str]) -> Callable[[str], bool]:
    """Return a systemd notify stand-in that keeps what it was sent."""

    def send(message: str) -> bool:
        notes.append(message)
        return True

    return send


@pytest.fixture
def make_rig(r: redis.Redis, redis_server: RedisServer) -> Iterator[Callable[..., Rig]]:
    made: list[Supervisor] = []

    def make(client: redis.Redis | None = None, **env: str) -> Rig:
        """Return a rig; the supervisor talks to Redis through `client` when one is given."""
        settings = Settings.from_env(
            {
                "REDIS_URL": redis_server.url,
                "WORKER_COUNT": "2",
                "TASK_VISIBILITY_TIMEOUT": "1s",
                "WORKER_DRAIN_GRACE": "2s",
                "WORKER_HEARTBEAT_TIMEOUT": SLOW_TO_GO_SILENT,
                **env,
            }
        )
        keys, policy = Keys(settings.namespace), Policy.from_settings(settings)
        scripts = Scripts(r, keys, policy)
        own = Scripts(client, keys, policy) if client is not None else scripts
        spawner, notes = FakeSpawner(), []
        send = _recorder(notes)

        # Slots stamp heartbeats with the real monotonic clock: start the test clock there.
        clock = StepClock(time.monotonic())
        supervisor = Supervisor(
            settings, scripts=own, spawner=spawner, clock=clock, send_notify=send
        )
        made.append(supervisor)
        return Rig(supervisor, spawner, scripts, notes, clock)

    yield make
    for supervisor in made:
        supervisor.close()


@pytest.fixture
def rig(make_rig: Callable[..., Rig]) -> Rig:
    return make_rig()


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [rec for rec in caplog.records if rec.getMessage() == event]


# --- fork, readiness, registry -------------------------------------------------------------------


def test_the_first_step_forks_every_worker_and_the_scheduler_and_no_more(rig: Rig) -> None:
    rig.step()

    names = sorted(rig.spawner.live.values())
    name = rig.supervisor.name
    assert names == [f"{name}-scheduler2-3", f"{name}-worker0-1", f"{name}-worker1-2"]
    for child in rig.supervisor.children.values():
        state = rig.supervisor.table.slot(child.index).read()
        assert state is not None and state.booting  # reset before the fork
    rig.step(1.0)
    assert len(rig.spawner.live) == 3


def test_ready_goes_to_systemd_once_when_every_child_is_up(rig: Rig) -> None:
    rig.step()
    assert rig.notes == []  # all three still booting
    status = rig.supervisor.table.status()
    assert status is not None and (status.live_workers, status.scripts_loaded) == (0, True)

    rig.up(*rig.workers())
    rig.step()
    assert rig.notes == []  # the scheduler is not up yet
    rig.up(rig.scheduler())
    rig.step()
    rig.step(5.0)

    assert rig.notes == ["READY=1\nSTATUS=2 workers running"]
    status = rig.supervisor.table.status()
    assert status is not None
    assert (status.live_workers, status.scheduler_alive, status.scripts_loaded) == (2, True, True)


def test_the_registry_record_counts_live_and_busy_workers_every_interval(rig: Rig) -> None:
    keys, client = rig.scripts.keys, rig.scripts.redis
    record = keys.worker(rig.supervisor.name)
    rig.step()
    assert client.hmget(record, "workers", "busy") == [b"0", b"0"]  # booting: not live

    rig.up()
    rig.enqueue()
    rig.claim(rig.workers()[1])
    rig.step(1.0)
    assert client.hmget(record, "workers", "busy") == [b"0", b"0"]  # not due yet
    rig.step(1.0)
    assert client.hmget(record, "workers", "busy") == [b"2", b"1"]
    assert 0 < client.pttl(record) <= 10_000

    rig.supervisor.registry.leave()
    assert not client.exists(record)


def test_without_redis_scripts_stay_unloaded_and_ready_is_never_sent() -> None:
    notes: list[str] = []
    now = time.monotonic()
    unreachable = Settings.from_env({"REDIS_URL": "redis://127.0.0.1:1/0", "WORKER_COUNT": "2"})
    offline = Supervisor(unreachable, spawner=FakeSpawner(), send_notify=_recorder(notes))
    try:
        offline.step(now)
        for child in offline.children.values():
            offline.table.slot(child.index).beat()
        offline.step(now + 10.0)
        status = offline.table.status()
        assert status is not None and status.live_workers == 2 and not status.scripts_loaded
        assert notes == []
    finally:
        offline.close()


# --- deaths and respawns -----------------------------------------------------------------------------


def test_a_worker_killed_mid_job_gives_its_job_back_at_once_and_is_replaced(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.step()
    rig.up()
    job_id = rig.enqueue()
    worker = rig.workers()[0]
    rig.claim(worker)

    rig.spawner.exit(worker.pid, killed_by=signal.SIGKILL)  # the OOM killer, say
    with caplog.at_level(logging.INFO):
        rig.step()

    job = rig.job(job_id)
    assert (job.status, job.recoveries) == (JobState.PENDING, 1)
    (recovered,) = events(caplog, "job_recovered")
    assert (recovered.job_id, recovered.reason) == (job_id, "worker died")  # type: ignore[attr-defined]
    (exited,) = events(caplog, "child_exited")
    assert exited.levelno == logging.ERROR
    assert exited.cause == "killed by SIGKILL (out of memory?)"  # type: ignore[attr-defined]
    assert worker.pid not in rig.supervisor.children
    assert [c.index for c in rig.workers()] == [0, 1]  # slot 0 refilled in the same step


def test_a_worker_that_died_inside_its_claim_gives_back_the_job_its_slot_never_showed(
    rig: Rig,
) -> None:
    rig.step()
    rig.up()
    job_id = rig.enqueue()
    worker = rig.workers()[1]
    rig.claim(worker, show_in_slot=False)  # the claim's reply never reached the worker

    rig.spawner.exit(worker.pid, code=1)
    rig.step()

    job = rig.job(job_id)
    # Back at once, and uncounted: a job its worker never started cannot have killed it.
    assert (job.status, job.recoveries, job.attempts) == (JobState.PENDING, 0, 0)


def test_a_dead_workers_slot_shows_no_job_even_before_it_is_replaced(rig: Rig) -> None:
    # taskforge_busy_workers counts slots that show a job (workerd.obs_server.BusyWorkers).
    busy = BusyWorkers(rig.supervisor.table)
    rig.step()
    for _ in range(2):  # the second quick death of slot 0 waits before its respawn
        (worker,) = [c for c in rig.workers() if c.index == 0]
        rig.up(worker)
        rig.enqueue()
        rig.claim(worker)
        assert busy.count() == 1
        rig.step(1.0)
        rig.spawner.exit(worker.pid, code=1)
        rig.step()

    assert not any(c.index == 0 for c in rig.workers())  # not replaced yet
    assert busy.count() == 0


def _respawn_delays(rig: Rig, *, booting: bool, deaths: int) -> list[float]:
    """Let slot 0's child die `deaths` times, each after a second of life; return how long
    each replacement took to be forked (found by stepping just before and at the delay)."""
    delays = []
    rig.step()
    for _ in range(deaths):
        (child,) = [c for c in rig.workers() if c.index == 0]
        if not booting:
            rig.up(child)
        rig.step(1.0)  # one second of life: a quick death
        rig.spawner.exit(child.pid, code=1)
        died_at = rig.now
        rig.step()
        if not any(c.index == 0 for c in rig.workers()):
            due = rig.supervisor.respawns.at[0]
            rig.step_at(due - 0.001)
            assert not any(c.index == 0 for c in rig.workers()), "forked before its delay"
            rig.step_at(due)
            assert any(c.index == 0 for c in rig.workers()), "not forked once due"
        delays.append(round(rig.now - died_at, 3))
    return delays


def test_a_worker_killed_while_serving_waits_at_most_a_second_to_come_back(rig: Rig) -> None:
    delays = _respawn_delays(rig, booting=False, deaths=8)
    assert delays == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


def test_children_dying_while_booting_back_off_then_halt_the_supervisor(rig: Rig) -> None:
    assert _respawn_delays(rig, booting=True, deaths=4) == [0.0, 0.1, 0.2, 0.4]
    with pytest.raises(Halt, match="5 children in a row died before they were up"):
        _respawn_delays(rig, booting=True, deaths=1)


def test_a_silent_child_is_killed_and_replaced_without_a_backoff(
    make_rig: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    rig = make_rig(WORKER_HEARTBEAT_TIMEOUT="2s")
    rig.step()
    rig.up()
    before = set(rig.spawner.live)
    with caplog.at_level(logging.INFO):
        rig.step(1.9)
        assert rig.spawner.sent == []
        rig.step(0.2)
    assert sorted(sig for _, sig in rig.spawner.sent) == [signal.SIGKILL] * 3
    assert len(events(caplog, "child_silent")) == 3
    assert {c.kill_reason for c in rig.supervisor.children.values()} == {"silent"}

    rig.step()  # reaped, and every slot forked again at once: a kill is not a failure
    assert set(rig.spawner.live).isdisjoint(before) and len(rig.spawner.live) == 3


def test_a_worker_past_its_cancel_grace_is_killed_unless_its_handler_has_returned(
    make_rig: Callable[..., Rig],
) -> None:
    rig = make_rig(WORKER_CANCEL_GRACE="1s")
    rig.step()
    rig.up()
    writing, stuck = rig.workers()
    slots = {}
    for child in (writing, stuck):
        rig.enqueue()
        job = rig.scripts.claim(child.name)
        assert job is not None
        slots[child.pid] = slot = rig.supervisor.table.slot(child.index)
        slot.start_job(job.id, job.token, 0.0)
        state = slot.read()
        assert state is not None and not state.writing_outcome
        rig.supervisor.cancels.request(child, child.index, state, rig.now)
    # One handler stopped (or finished) within the grace; its outcome's write waits on Redis.
    slots[writing.pid].handler_returned(write_limit=600.0)
    state = slots[writing.pid].read()
    assert state is not None and state.writing_outcome
    rig.clock.now = max(rig.clock.now, state.heartbeat)  # the slots stamp the real clock
    rig.step(1.1)
    assert rig.spawner.signals_to(writing.pid) == [signal.SIGTERM]
    assert rig.spawner.signals_to(stuck.pid) == [signal.SIGTERM, signal.SIGKILL]
    # The renewals still say the cancel is asked while the write waits: no second signal.
    rig.supervisor.cancels.request(writing, writing.index, state, rig.now)
    rig.step(1.0)
    assert rig.spawner.signals_to(writing.pid) == [signal.SIGTERM]


@pytest.fixture
def three_threads(make_rig: Callable[..., Rig], monkeypatch: pytest.MonkeyPatch) -> Rig:
    """One worker process of three job threads, each slot beaten once; slots stamp their
    beats on the rig's clock, so a test can let one thread's go stale while another's is new."""
    rig = make_rig(
        WORKER_COUNT="1",
        WORKER_THREADS="3",
        WORKER_HEARTBEAT_TIMEOUT="2s",
        WORKER_DRAIN_GRACE="5s",
    )
    monkeypatch.setattr(workerd.slots, "time", SimpleNamespace(monotonic=rig.clock))
    rig.step()
    (child,) = rig.workers()
    for index in child.slots:
        rig.supervisor.table.slot(index).beat()
    return rig


def _stuck_beside_a_beating_sibling(rig: Rig) -> tuple[Child, str, float]:
    """Thread 0 runs a job, thread 1 beats between jobs, thread 2 stops beating: step until
    the supervisor acts (twice the 2 s silence timeout; 5 s at most); return the child, the
    running job's id and when it acted."""
    (child,) = rig.workers()
    runner, beating, _stuck = child.slots
    job_id = rig.enqueue()
    job = rig.scripts.claim(child.worker_id(runner))
    assert job is not None and job.id == job_id
    rig.supervisor.table.slot(runner).start_job(job.id, job.token, 0.0)
    began = rig.now
    while not rig.spawner.signals_to(child.pid) and rig.now - began < 5.0:
        rig.clock.now += 0.1
        rig.supervisor.table.slot(beating).beat()
        rig.step()
    assert rig.now - began > 4.0, "acted before twice the silence timeout"
    return child, job_id, rig.now


def test_a_job_thread_stuck_between_jobs_drains_its_process_then_it_is_replaced(
    three_threads: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig = three_threads
    with caplog.at_level(logging.INFO):
        child, _, _ = _stuck_beside_a_beating_sibling(rig)
        # Not killed (that would take thread 0's job): drained, its slots told so.
        assert rig.spawner.signals_to(child.pid) == [signal.SIGTERM]
        (stuck,) = events(caplog, "child_thread_stuck")
        assert stuck.__dict__["worker_id"] == child.worker_id(child.index + 2)
        control = rig.supervisor.table.slot(child.index).control
        assert control is not None and control.drain_requested()
        rig.step(1.0)  # thread 0's job still runs: no kill yet
        assert rig.spawner.signals_to(child.pid) == [signal.SIGTERM]
        rig.supervisor.table.slot(child.index).beat()  # its job done, between jobs again
        rig.step()  # no sibling runs a job: the stuck thread would never let it exit
    assert rig.spawner.signals_to(child.pid) == [signal.SIGTERM, signal.SIGKILL]
    assert child.kill_reason == "stuck" and child.culprit == child.index + 2
    assert len(events(caplog, "child_thread_stuck")) == 1
    rig.step()  # reaped, and forked again at once: a kill is not a failure
    (replacement,) = rig.workers()
    assert replacement.pid != child.pid


def test_a_stuck_thread_that_beats_again_is_not_blamed_and_its_process_drains_alone(
    three_threads: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig = three_threads
    child, _, drained_at = _stuck_beside_a_beating_sibling(rig)
    rig.supervisor.table.slot(child.index + 2).beat()  # slow, not stuck
    with caplog.at_level(logging.INFO):
        rig.step()
    assert len(events(caplog, "child_thread_unstuck")) == 1
    while rig.now < drained_at + 6.0:  # past the 5 s grace, both threads beating: no kill
        rig.clock.now += 0.5
        for index in (child.index + 1, child.index + 2):
            rig.supervisor.table.slot(index).beat()
        rig.step()
    assert rig.spawner.signals_to(child.pid) == [signal.SIGTERM]
    assert child.kill_reason is None


def test_a_job_still_running_when_a_stuck_threads_drain_ends_goes_back_uncounted(
    three_threads: Rig,
) -> None:
    rig = three_threads
    child, job_id, drained_at = _stuck_beside_a_beating_sibling(rig)
    rig.step_at(drained_at + 4.9)
    assert rig.spawner.signals_to(child.pid) == [signal.SIGTERM]
    rig.step_at(drained_at + 5.0)  # the drain's 5 s grace is over
    assert rig.spawner.signals_to(child.pid) == [signal.SIGTERM, signal.SIGKILL]
    rig.step()  # reaped: the job thread 0 ran died for no fault of its own
    job = rig.job(job_id)
    assert (job.status, job.recoveries) == (JobState.PENDING, 0)


# --- leases and timeouts ------------------------------------------------------------------------


def test_leases_of_running_jobs_are_renewed_but_not_a_stopped_workers(rig: Rig) -> None:
    rig.step()
    rig.up()
    running, paused = rig.workers()
    jobs = [rig.enqueue(), rig.enqueue()]
    for child in (running, paused):
        rig.claim(child)
    processing = rig.scripts.keys.processing
    for job_id in jobs:  # seed lease deadlines long past, so a renewal is plain to see
        rig.scripts.redis.zadd(processing, {job_id: 1})
    rig.spawner.stopped_pids.add(paused.pid)  # SIGSTOP: not working on its job

    rig.step(rig.supervisor.renew_interval)

    assert rig.scripts.redis.zscore(processing, jobs[0]) > time.time() * 1000
    assert rig.scripts.redis.zscore(processing, jobs[1]) == 1


def test_a_lost_lease_kills_the_worker_which_gives_back_only_the_job_it_claimed_since(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Its slot's job belongs to another worker now, but a job it claimed after resuming
    (SIGSTOP, SIGCONT, a refused complete, a new claim) is still its own: release that one."""
    rig.step()
    rig.up()
    worker = rig.workers()[0]
    lost = rig.enqueue()
    rig.claim(worker)
    # Its lease runs out; a scheduler recovers the job and another worker claims it.
    rig.scripts.recover(now_ms=int(time.time() * 1000) + 60_000)
    taken = rig.scripts.claim("elsewhere-w9")
    assert taken is not None and taken.id == lost
    since = rig.enqueue()
    assert rig.scripts.claim(worker.name) is not None  # its slot still shows the lost job

    with caplog.at_level(logging.INFO):
        rig.step(rig.supervisor.renew_interval)
        assert rig.spawner.signals_to(worker.pid) == [signal.SIGKILL]
        assert worker.kill_reason == "lease lost"
        rig.step()

    assert [rec.job_id for rec in events(caplog, "lease_lost")] == [lost]  # type: ignore[attr-defined]
    again = rig.job(lost)
    assert (again.status, again.worker_id, again.token) == (
        JobState.PROCESSING,
        "elsewhere-w9",
        taken.token,
    )
    assert rig.job(since).status is JobState.PENDING
    (exited,) = events(caplog, "child_exited")
    assert exited.cause == "killed by SIGKILL"  # type: ignore[attr-defined]  # not "out of memory?"


def test_a_job_past_its_timeout_is_killed_and_failed_as_a_timeout(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.step()
    rig.up()
    job_id = rig.enqueue(timeout="5s")
    worker = rig.workers()[0]
    rig.claim(worker)

    rig.step(4.9)
    assert rig.spawner.sent == []
    with caplog.at_level(logging.INFO):
        rig.step(0.2)
        assert rig.spawner.signals_to(worker.pid) == [signal.SIGKILL]
        rig.step()

    job = rig.job(job_id)
    assert (job.status, job.attempts) == (JobState.RETRYING, 1)
    assert job.last_error == "Timeout: timed out after 5s; its worker was killed"
    # One line about the job, with its outcome; the kill itself is a child_killed line.
    (outcome,) = events(caplog, "job_timed_out")
    assert (outcome.job_id, outcome.result) == (job_id, "retrying")  # type: ignore[attr-defined]
    assert outcome.timeout_s == 5.0  # type: ignore[attr-defined]
    (killed,) = events(caplog, "child_killed")
    assert (killed.job_id, killed.reason) == (job_id, "timeout")  # type: ignore[attr-defined]


# --- drain ----------------------------------------------------------------------------------------


def test_sigterm_drains_idle_workers_go_and_a_busy_one_is_killed_after_the_grace(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.step()
    rig.up()
    idle, busy = rig.workers()
    job_id = rig.enqueue()
    rig.claim(busy)

    with caplog.at_level(logging.INFO):
        rig.supervisor.record_signal(signal.SIGTERM)
        rig.step()
        assert rig.notes == ["STOPPING=1"]  # and never READY=1 from now on
        assert [rig.spawner.signals_to(c.pid) for c in (idle, busy)] == [[signal.SIGTERM]] * 2
        rig.spawner.exit(idle.pid, code=0)  # finished: it was between jobs
        rig.step(1.9)
        assert rig.workers() == [busy] and not rig.supervisor.finished  # no respawn
        rig.step(0.2)  # the grace is over
        assert rig.spawner.signals_to(busy.pid) == [signal.SIGTERM, signal.SIGKILL]
        rig.step()

    assert rig.supervisor.finished
    job = rig.job(job_id)
    assert (job.status, job.recoveries) == (JobState.PENDING, 0)  # a drain is not its fault
    (released,) = events(caplog, "job_released")
    assert (released.job_id, released.reason) == (job_id, "drain")  # type: ignore[attr-defined]
    assert [rec.child for rec in events(caplog, "child_killed")] == [busy.name]  # type: ignore[attr-defined]
    assert "READY=1" not in "".join(rig.notes)


def test_a_second_sigterm_ends_the_grace_at_once(rig: Rig) -> None:
    rig.step()
    rig.up()
    rig.supervisor.record_signal(signal.SIGTERM)
    rig.step()
    rig.supervisor.record_signal(signal.SIGINT)
    rig.step(0.1)
    for worker in rig.workers():
        assert rig.spawner.signals_to(worker.pid) == [signal.SIGTERM, signal.SIGKILL]
    rig.step()
    assert rig.supervisor.finished
    assert rig.notes == ["STOPPING=1"]


# --- Redis outages -----------------------------------------------------------------------------


@pytest.fixture
def outage(r: redis.Redis, redis_server: RedisServer) -> Iterator[tuple[redis.Redis, Outage]]:
    """A client of the private server as its own ACL user, and a switch that locks it out."""
    user, password = f"arbiter-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    r.acl_setuser(user, enabled=True, passwords=[f"+{password}"], commands=["+@all"], keys=["*"])
    client = redis.Redis(
        host=redis_server.host,
        port=redis_server.port,
        username=user,
        password=password,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        retry=Retry(NoBackoff(), 0),  # redis-py's own retries would only slow the test down
    )
    try:
        yield client, Outage(r, user)
    finally:
        client.close()
        r.acl_deluser(user)


@dataclass
class Outage:
    """Locks one ACL user out of Redis (its connections dropped, new ones refused) and back."""

    admin: redis.Redis
    user: str

    def begin(self) -> None:
        self.admin.acl_setuser(self.user, enabled=False)
        self.admin.client_kill_filter(user=self.user)

    def end(self) -> None:
        self.admin.acl_setuser(self.user, enabled=True)


def _kill_a_busy_worker_during_an_outage(
    make_rig: Callable[..., Rig], outage: tuple[redis.Redis, Outage]
) -> tuple[Rig, str]:
    """Return a rig whose worker died holding a job while Redis refuses the supervisor."""
    client, switch = outage
    rig = make_rig(client)
    rig.step()
    rig.up()
    job_id = rig.enqueue()
    worker = rig.workers()[0]
    rig.claim(worker)
    switch.begin()
    rig.spawner.exit(worker.pid, killed_by=signal.SIGKILL)
    rig.step()
    return rig, job_id


def test_a_job_an_outage_keeps_from_release_goes_back_once_redis_answers(
    make_rig: Callable[..., Rig], outage: tuple[redis.Redis, Outage]
) -> None:
    _, switch = outage
    rig, job_id = _kill_a_busy_worker_during_an_outage(make_rig, outage)
    rig.step(1.0)
    assert rig.job(job_id).status is JobState.PROCESSING  # owed, not lost
    assert [c.index for c in rig.workers()] == [0, 1]  # the outage does not stop respawning

    switch.end()
    rig.step(1.0)
    job = rig.job(job_id)
    assert (job.status, job.recoveries) == (JobState.PENDING, 1)


def test_at_exit_a_release_redis_never_takes_is_abandoned_with_a_line(
    make_rig: Callable[..., Rig],
    outage: tuple[redis.Redis, Outage],
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, switch = outage
    rig, job_id = _kill_a_busy_worker_during_an_outage(make_rig, outage)

    with caplog.at_level(logging.ERROR):
        rig.supervisor.release.settle(deadline=rig.now)  # the final window is already over

    assert job_id in [rec.job_id for rec in events(caplog, "requeue_abandoned")]  # type: ignore[attr-defined]
    switch.end()
    rig.step()
    assert rig.job(job_id).status is JobState.PROCESSING  # left to its lease and a scheduler


def test_at_exit_only_a_worker_known_to_hold_a_job_gets_the_line(
    make_rig: Callable[..., Rig],
    outage: tuple[redis.Redis, Outage],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Worker 0 died holding a job during the outage; worker 1, idle, exits cleanly.
    rig, job_id = _kill_a_busy_worker_during_an_outage(make_rig, outage)
    idle = [c for c in rig.workers() if c.index == 1]
    assert len(idle) == 1
    rig.spawner.exit(idle[0].pid)
    rig.step()
    owed = rig.supervisor.release.owed
    assert [orphan.job_id or None for orphan in owed] == [job_id, None]

    with caplog.at_level(logging.ERROR):
        rig.supervisor.release.settle(deadline=rig.now)

    lines = events(caplog, "requeue_abandoned")
    assert [rec.job_id for rec in lines] == [job_id]  # type: ignore[attr-defined]
    assert rig.supervisor.release.owed == []


# --- quiet: SIGTSTP / SIGCONT and the API's request ------------------------------------------


def _record(rig: Rig) -> dict[bytes, bytes]:
    return rig.scripts.redis.hgetall(rig.scripts.keys.worker(rig.supervisor.name))


def _published_quiet(rig: Rig) -> bool:
    status = rig.supervisor.table.status()
    assert status is not None
    return status.quiet


def test_sigtstp_quiets_the_host_at_once_and_sigcont_resumes_it(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rig.step()
    rig.up()
    rig.step()
    assert not _published_quiet(rig) and _record(rig)[b"quiet"] == b"0"

    rig.supervisor.record_signal(signal.SIGTSTP)
    rig.step(0.1)  # long before the next heartbeat is due (2 s)

    assert _published_quiet(rig)  # what the workers read before their next claim
    assert _record(rig)[b"quiet"] == b"1"  # reported in the same step
    assert [r.cause for r in events(caplog, "supervisor_quiet")] == ["SIGTSTP"]  # type: ignore[attr-defined]
    assert rig.scripts.stats()[1].quiet == 1

    rig.supervisor.record_signal(signal.SIGCONT)
    rig.step(0.1)

    assert not _published_quiet(rig) and _record(rig)[b"quiet"] == b"0"
    assert [r.cause for r in events(caplog, "supervisor_resumed")] == ["SIGCONT"]  # type: ignore[attr-defined]


def test_an_api_request_is_applied_at_the_next_heartbeat(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rig.step()
    rig.up()
    name = rig.supervisor.name

    assert rig.scripts.quiet_host(name, True) is False
    rig.step(1.9)
    assert not _published_quiet(rig)  # the heartbeat is not due yet
    rig.step(0.1)

    assert _published_quiet(rig)  # in the step that applied it
    assert [r.cause for r in events(caplog, "supervisor_quiet")] == ["api"]  # type: ignore[attr-defined]
    rig.step(0.1)  # reported back at once: the record drops the request it carried out
    assert _record(rig)[b"quiet"] == b"1" and b"quiet_request" not in _record(rig)

    rig.scripts.quiet_host(name, False)
    rig.step(2.0)
    assert not _published_quiet(rig)


def test_a_signal_wins_over_an_api_request_made_before_it(rig: Rig) -> None:
    rig.step()
    rig.up()
    rig.scripts.quiet_host(rig.supervisor.name, True)

    rig.supervisor.record_signal(signal.SIGCONT)  # the operator changed their mind
    rig.step(0.1)
    rig.step(2.0)

    assert not _published_quiet(rig)
    assert _record(rig)[b"quiet"] == b"0" and b"quiet_request" not in _record(rig)


def test_the_registry_record_names_the_queues_the_host_serves(make_rig: Callable[..., Rig]) -> None:
    rig = make_rig(WORKER_QUEUES="critical:6,default:3,low:1")
    rig.step()
    assert _record(rig)[b"plan"] == b"critical:6,default:3,low:1"
    assert _record(rig)[b"queues"] == b"critical,default,low"  # what routing reads
