"""Helpers for the process-fault scenarios (docs/RELIABILITY.md, scenarios 2, 3, 4 and 6).

A steady producer thread, a chaos killer with a seeded random cadence, "a host that claimed
jobs and vanished" (orphaned leases), an incremental log reader fast enough to land a kill
while a scheduler is still reporting a batch, and per-job event counts across supervisors.
Every wait polls a condition against a deadline; the only sleeps are fault or load cadences.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.faults.checker import EnqueueRecord, Execution
from tests.faults.harness import (
    Kill,
    busy_workers,
    enqueue_one,
    journaled_body,
    running_jobs,
)
from tests.support.tools import alive
from tests.support.workerd import Workerd

KEYS = Keys()
# The fake host that claims jobs and vanishes: its claims are only ever ended by a scheduler.
VANISHED_WORKER = "faults-vanished-host-worker0-1"
ENQUEUE_CHUNK = 500  # jobs per MULTI/EXEC when seeding many at once


class Producer(threading.Thread):
    """Enqueue journaled jobs at a steady rate, on a client of its own, until stopped."""

    def __init__(self, url: str, journal: Path, *, rate: float, sleep: float) -> None:
        super().__init__(name="fault-producer", daemon=True)
        self.url = url
        self.body = journaled_body(journal, sleep)
        self.interval = 1.0 / rate
        self.records: list[EnqueueRecord] = []
        self.error: Exception | None = None
        self._stop_requested = threading.Event()

    def run(self) -> None:
        """Enqueue one job per interval (the load cadence) until stop() is called."""
        client = redis.Redis.from_url(self.url, socket_timeout=2.0)
        scripts = Scripts(client, KEYS)
        due = time.monotonic()
        try:
            while not self._stop_requested.is_set():
                self.records.append(enqueue_one(scripts, self.body))
                due += self.interval
                self._stop_requested.wait(max(0.0, due - time.monotonic()))
        except Exception as exc:  # reported by stop(): a thread's exception is otherwise lost
            self.error = exc
        finally:
            client.close()

    def stop(self, timeout: float = 10.0) -> list[EnqueueRecord]:
        """Stop producing; return every enqueue record (raise what the thread raised)."""
        self._stop_requested.set()
        self.join(timeout)
        assert not self.is_alive(), "the producer did not stop"
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error
        return list(self.records)


def chaos_kills(
    workerd: Workerd, *, duration: float, rng: random.Random, cadence: tuple[float, float]
) -> tuple[list[Kill], int]:
    """SIGKILL a random busy worker after every pause drawn from `cadence`, for `duration` s.

    Returns the kills and how many ticks found no busy worker to kill. Only workers that
    started a job are chosen, so no child dies while booting (five boot failures in a row halt
    the supervisor, which is not this fault).
    """
    kills: list[Kill] = []
    idle_ticks = 0
    deadline = time.monotonic() + duration
    while True:
        pause = rng.uniform(*cadence)
        if time.monotonic() + pause > deadline:
            return kills, idle_ticks
        time.sleep(pause)  # the fault cadence, not a synchronisation
        if workerd.proc.poll() is not None:
            raise AssertionError(f"workerd exited ({workerd.proc.returncode})\n{workerd.tail()}")
        candidates = busy_workers(workerd)
        if not candidates:
            idle_ticks += 1
            continue
        pid = rng.choice(sorted(candidates))
        if alive(pid):
            # Timed before the signal: the test thread may be descheduled after os.kill
            # returns, and by then the job can have started again elsewhere.
            at = time.time()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                kills.append(Kill(pid, at, candidates[pid]))


def jobs_held_at_death(workerd: Workerd, kills: Sequence[Kill]) -> list[Kill]:
    """Return the kills, each with the job its worker was running when it died (or None;
    with WORKER_THREADS, the one started last: :func:`jobs_cut_by` gives every one).

    The job chosen at kill time can be stale: a 50 ms job may finish between the log read and
    the signal. A killed worker's own log ends where it died, so its last started and
    unfinished job is the one the kill interrupted.
    """
    running = running_jobs(workerd.logs())
    return [Kill(kill.pid, kill.at, (running.get(kill.pid) or [None])[-1]) for kill in kills]


def jobs_cut_by(workerd: Workerd, kills: Sequence[Kill]) -> list[Kill]:
    """Return one Kill per job a killed worker process was running when it died (every job
    thread's, with WORKER_THREADS; none for a kill between jobs)."""
    running = running_jobs(workerd.logs())
    return [Kill(k.pid, k.at, job_id) for k in kills for job_id in running.get(k.pid, [])]


# -- seeding many jobs ---------------------------------------------------------------------------


def enqueue_bulk(
    scripts: Scripts,
    count: int,
    journal: Path,
    *,
    due_ms: int | None = None,
    sleep: float = 0.0,
) -> list[EnqueueRecord]:
    """Enqueue `count` journaled jobs fast (MULTI/EXEC chunks), all due at `due_ms` if given,
    each sleeping `sleep` seconds."""
    request = validate_enqueue(journaled_body(journal, sleep))
    if due_ms is not None:
        request = dataclasses.replace(request, scheduled_at_ms=due_ms)
    records: list[EnqueueRecord] = []
    for start in range(0, count, ENQUEUE_CHUNK):
        batch = [(request, str(uuid.uuid4())) for _ in range(min(ENQUEUE_CHUNK, count - start))]
        results = scripts.enqueue_many(batch)
        assert all(result.created for result in results), results
        records += [EnqueueRecord(job_id, "ok") for _, job_id in batch]
    return records


def claim_and_vanish(client: redis.Redis, count: int, *, lease_s: float) -> list[tuple[str, int]]:
    """Claim `count` pending jobs for a host that then vanishes; return (job id, token) pairs.

    Nobody renews these leases: a scheduler must recover every one after `lease_s` seconds,
    exactly as after a host lost all at once (power cut, network partition).
    """
    scripts = Scripts(client, KEYS, Policy(lease_ms=int(lease_s * 1000)))
    claimed = []
    for _ in range(count):
        job = scripts.claim(VANISHED_WORKER)
        assert job is not None, f"only {len(claimed)} of {count} jobs were claimable"
        claimed.append((job.id, job.token))
    return claimed


def expire_leases(client: redis.Redis, leases: Sequence[tuple[str, int]], in_s: float) -> None:
    """Have the vanished host renew its leases one last time, to end `in_s` seconds from now.

    One renew call for them all, so every lease ends at the same moment and the schedulers
    race for the whole lot (renew.lua: only the token holder may do this).
    """
    scripts = Scripts(client, KEYS, Policy(lease_ms=max(1, int(in_s * 1000))))
    codes = scripts.renew(list(leases))
    assert {int(code) for code in codes} == {1}, Counter(codes)


def job_fields(client: redis.Redis, job_ids: Sequence[str], *names: str) -> list[list[Any]]:
    """Return HMGET `names` of every job, decoded (one pipeline)."""
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hmget(KEYS.job(job_id), *names)
    return [
        [v.decode() if isinstance(v, bytes) else v for v in values] for values in pipe.execute()
    ]


# -- logs -------------------------------------------------------------------------------------


class LogTail:
    """Read a workerd's JSON-lines log incrementally (cheap enough to poll every 10 ms)."""

    def __init__(self, workerd: Workerd) -> None:
        self.path = workerd.log_path
        self.offset = 0
        self.partial = b""

    def new_records(self) -> list[dict[str, Any]]:
        """Return the complete lines written since the last call."""
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            data = log.read()
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        records = []
        for raw in lines:
            with contextlib.suppress(ValueError):
                record = json.loads(raw)
                if isinstance(record, dict):
                    records.append(record)
        return records


def event_counts(workerds: Iterable[Workerd], event: str, **match: Any) -> Counter[str]:
    """Count `event` lines per job id across supervisors."""
    return Counter(rec["job_id"] for workerd in workerds for rec in workerd.events(event, **match))


def event_pids(workerd: Workerd, event: str, **match: Any) -> Counter[int]:
    """Count `event` lines per logging process."""
    return Counter(rec["pid"] for rec in workerd.events(event, **match))


# -- the frozen worker ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Freeze:
    """One worker the test SIGSTOPped mid-job, and when it was let go again."""

    pid: int
    job_id: str
    stopped_at: float  # time.time()
    continued_at: float


def explained_by_freeze(executions: Sequence[Execution], freezes: Sequence[Freeze]) -> list[str]:
    """Return the jobs whose executions overlap only because one of them was frozen.

    Explained: the frozen worker's execution and the others of its job overlap in wall time,
    but every other execution lies wholly inside the freeze, so no two executions of the job
    ever ran instructions at the same time.
    """
    explained = []
    for freeze in freezes:
        runs = [ex for ex in executions if ex.job_id == freeze.job_id]
        frozen = [ex for ex in runs if ex.pid == freeze.pid]
        others = [ex for ex in runs if ex.pid != freeze.pid]
        if (
            len(frozen) == 1
            and others
            and all(
                freeze.stopped_at <= ex.start and ex.end <= freeze.continued_at for ex in others
            )
        ):
            explained.append(freeze.job_id)
    return explained


def tally(rows: Iterable[Sequence[Any]]) -> dict[str, int]:
    """Count rows of job fields as "a/b" strings (a missing field reads 0)."""
    counts = Counter("/".join("0" if v is None else str(v) for v in row) for row in rows)
    return dict(sorted(counts.items()))


def all_recovered(client: redis.Redis, job_ids: Sequence[str]) -> bool:
    """Tell whether every job has been recovered at least once (its lease was taken back)."""
    return all(int(n or 0) >= 1 for (n,) in job_fields(client, job_ids, "recoveries"))
