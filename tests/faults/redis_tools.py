"""Helpers for the Redis fault scenarios: production-like server settings, and producers that
record every enqueue (through the engine, or POST /enqueue: status, latency, job ids).

The session ``redis_server`` (tests/conftest.py) is shared by the whole run and must not be
killed; each Redis scenario starts a tests.support RedisServer of its own, on its own port and
directory, with the persistence and memory settings the scenario is about.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.faults.checker import OK, EnqueueRecord
from tests.faults.harness import enqueue_one, journaled_body, log_time
from tests.support.redis_server import NO_RETRY
from tests.support.stats import percentile

# What deploy/redis.conf sets for durability and memory (no RDB snapshots: the AOF is what the
# scenarios are about); a scenario overrides what it tests.
PRODUCTION_LIKE = {
    "save": "",
    "appendonly": "yes",
    "appendfsync": "everysec",
    "maxmemory-policy": "noeviction",
}


def between(records: Iterable[dict[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """Return the log records stamped in [start, end] (Unix times)."""
    return [rec for rec in records if start <= log_time(rec) <= end]


# -- producers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """One enqueue of the engine producer: its record and when it was answered (Unix time)."""

    record: EnqueueRecord
    answered: float


class EngineLoad:
    """A thread that enqueues ``journaled`` jobs through the engine's scripts at a steady pace.

    Its client has short timeouts and no retries, so an outage shows at once as unknown
    outcomes (harness.enqueue_one) instead of stalling the producer.
    """

    def __init__(self, url: str, journal: Path, *, interval: float = 0.01, sleep: float = 0.01):
        self.client = redis.Redis.from_url(
            url, socket_timeout=1.0, socket_connect_timeout=0.5, retry=NO_RETRY
        )
        self.scripts = Scripts(self.client)
        self.body = journaled_body(journal, sleep)
        self.interval = interval
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-load", daemon=True)

    def __enter__(self) -> EngineLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            record = enqueue_one(self.scripts, self.body)
            with self._lock:
                self.sent.append(Sent(record, time.time()))
            self._stop.wait(self.interval)  # the load's pace

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread (after its enqueue in flight) and close the client."""
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"engine producer still running {timeout:g}s after stop")
        self.client.close()

    def snapshot(self) -> list[Sent]:
        """Return the enqueues so far."""
        with self._lock:
            return list(self.sent)

    def acknowledged_since(self, start: float) -> int:
        """Return how many enqueues answered at or after `start` were acknowledged."""
        return sum(1 for s in self.snapshot() if s.answered >= start and s.record.outcome == OK)


# -- an HTTP producer --------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One POST to the gateway and what came back."""

    request: str  # the client's own id for the request, carried in each job's payload
    sent: float  # time.time() before the request
    latency: float  # seconds until the answer (or the failure)
    status: int | None  # None: no HTTP answer at all (refused, reset, timed out)
    job_ids: tuple[str, ...]
    body: Any


class HttpLoad:
    """Threads that POST ``journaled`` jobs to a gateway at a steady pace until stopped.

    A 2xx answer acknowledges its jobs; any other outcome leaves them unknown: a 503 after a
    timed-out Redis call does not prove the script did not run (it may run once Redis
    answers), so such jobs may execute. Each job's payload carries its request's id, so an
    execution nobody acknowledged can be traced back to the unanswered request that made it.
    """

    def __init__(
        self,
        port: int,
        journal: Path,
        *,
        threads: int = 3,
        interval: float = 0.05,
        sleep: float = 0.01,
        batch_every: int = 0,
        batch_size: int = 5,
        timeout: float = 10.0,
    ) -> None:
        self.port = port
        self.journal = journal
        self.interval = interval
        self.sleep = sleep
        self.batch_every = batch_every
        self.batch_size = batch_size
        self.timeout = timeout
        self.replies: list[Reply] = []
        self._cond = threading.Condition()
        self._open = True  # requests may be sent (pause() closes the gate)
        self._stopping = False
        self._in_flight = 0
        self._threads = [
            threading.Thread(target=self._run, args=(n,), name=f"http-load-{n}", daemon=True)
            for n in range(threads)
        ]

    def __enter__(self) -> HttpLoad:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _payload(self, request: str) -> dict[str, Any]:
        return {"file": str(self.journal), "sleep": self.sleep, "request": request}

    def _run(self, index: int) -> None:
        count = 0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._open or self._stopping)
                if self._stopping:
                    return
                self._in_flight += 1
            try:
                count += 1
                batch = self.batch_every and count % self.batch_every == 0
                self._post(self.batch_size if batch else 0)
            finally:
                with self._cond:
                    self._in_flight -= 1
                    self._cond.notify_all()
            time.sleep(self.interval)  # the load's pace, not a synchronisation

    def _post(self, batch: int) -> None:
        request = uuid.uuid4().hex
        if batch:
            path = "/enqueue/batch"
            body: Any = {
                "jobs": [
                    {"type": "journaled", "payload": self._payload(request)} for _ in range(batch)
                ]
            }
        else:
            path, body = "/enqueue", {"type": "journaled", "payload": self._payload(request)}
        sent, began = time.time(), time.monotonic()
        status, doc = None, None
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            response = conn.getresponse()
            status, raw = response.status, response.read()
            with contextlib.suppress(ValueError):
                doc = json.loads(raw)
        except OSError as exc:
            doc = repr(exc)
        finally:
            conn.close()
        latency = time.monotonic() - began
        ids: tuple[str, ...] = ()
        if status is not None and 200 <= status < 300 and isinstance(doc, dict):
            jobs = doc.get("jobs", [doc])
            ids = tuple(job["id"] for job in jobs)
        with self._cond:
            self.replies.append(Reply(request, sent, latency, status, ids, doc))

    def pause(self, timeout: float = 15.0) -> None:
        """Stop sending; return once no request is in flight."""
        with self._cond:
            self._open = False
            if not self._cond.wait_for(lambda: self._in_flight == 0, timeout):
                raise AssertionError(f"requests still in flight {timeout:g}s after pause")

    def resume(self) -> None:
        """Send again."""
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def stop(self, timeout: float = 15.0) -> None:
        """Stop every thread (each finishes its request in flight); raise if one hangs."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            raise AssertionError(f"load threads still running {timeout:g}s after stop: {stuck}")

    # -- what happened ---------------------------------------------------------------------

    def snapshot(self) -> list[Reply]:
        """Return the replies so far."""
        with self._cond:
            return list(self.replies)

    def records(self) -> list[EnqueueRecord]:
        """Return one acknowledged record per job of every 2xx answer (for the checker)."""
        return [EnqueueRecord(job_id, OK) for rep in self.snapshot() for job_id in rep.job_ids]

    def unanswered(self) -> set[str]:
        """Return the ids of the requests that got no 2xx (their jobs may exist or not)."""
        return {rep.request for rep in self.snapshot() if rep.status is None or rep.status >= 300}

    def acknowledged_since(self, start: float) -> int:
        """Return how many 2xx answers came to requests sent at or after `start`."""
        return sum(
            1 for rep in self.snapshot() if rep.sent >= start and rep.status and rep.status < 300
        )


def statuses(replies: Sequence[Reply]) -> dict[str, int]:
    """Count replies by HTTP status ("none": no answer)."""
    counts: dict[str, int] = {}
    for rep in replies:
        key = "none" if rep.status is None else str(rep.status)
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def latency_figures(replies: Sequence[Reply]) -> dict[str, float | None]:
    """Return the p50 and max latency (seconds, 3 decimals) of `replies`."""
    latencies = [rep.latency for rep in replies]
    p50 = percentile(latencies, 0.5)
    return {
        "p50_s": None if p50 is None else round(p50, 3),
        "max_s": round(max(latencies), 3) if latencies else None,
    }


def requests_of(client: redis.Redis, job_ids: Iterable[str], keys: Keys | None = None) -> set[str]:
    """Return the client request ids stored in these jobs' payloads (raw HGETs)."""
    keys = keys or Keys()
    found = set()
    for job_id in job_ids:
        raw = client.hget(keys.job(job_id), "payload")
        if raw is not None:
            found.add(json.loads(raw).get("request", ""))
    return found
