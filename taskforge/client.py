"""``Client``: every gateway endpoint a program needs, as typed Python calls.

One client holds one connection pool and is safe to share between threads (each request takes a
pooled connection for its own duration only). Create it once per process and reuse it.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from taskforge.errors import JobCanceled, JobFailed, WaitTimeout
from taskforge.models import BulkResult, History, Host, Job, JobPage, Limits, Queue, Schedule, Stats
from taskforge.transport import DEFAULT_URL, Replay, Transport

Duration = float | int | str | timedelta
BATCH_MAX = 1000  # jobs per POST /enqueue/batch (the gateway's limit)
QUEUE_PAGE_MAX = 1000  # queues per GET /queues page (the gateway's limit)
WAIT_STEP = 30.0  # seconds one GET /jobs/<id>?wait= may take; a longer wait asks again
DEFAULT_QUEUE = "default"  # the gateway's, for a job that names no queue
# Seconds after its first try that an enqueue is tried again at most. The gateway remembers a
# job's id while the job exists and at least 5 minutes after it finished (docs/API.md), so a
# retry sent within this window finds the job its first try made, and never makes a second.
# The default policy (5 tries of at most 10 s connect + 10 s read, pauses up to 5 s) fits in it.
ENQUEUE_RETRY_WINDOW = 120.0


def new_job_id(queue: str = DEFAULT_QUEUE) -> str:
    """Return a new job id of `queue` for ``enqueue(id=...)``, as the gateway takes one.

    A UUID of version 8 (RFC 9562, the layout left to its users), 90 random bits, whose first
    8 hex digits are the queue's tag: BLAKE2b of the queue's UTF-8 name with a 4-byte digest,
    which is how the gateway finds a job's queue from its id alone.
    """
    tag = hashlib.blake2b(queue.encode(), digest_size=4).digest()
    raw = bytearray(tag + os.urandom(12))
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant 10
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _duration(value: Duration | None, name: str) -> float | str | None:
    """Return a duration as the gateway takes it: seconds (a number) or a text such as "5m"."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(
            f"{name} must be seconds, a timedelta or a text such as '5m', not {value!r}"
        )
    return value


def _moment(value: datetime | str | None) -> str | None:
    """Return an absolute time as RFC 3339; refuse a naive datetime (its zone would be a guess)."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError("at must be an aware datetime (with a zone), e.g. datetime.now(UTC)")
    return value.isoformat()


@dataclass(frozen=True)
class JobSpec:
    """One job to enqueue, for ``Client.enqueue_many`` (None means the gateway's default)."""

    type: str
    payload: dict[str, Any] | None = None
    queue: str | None = None
    priority: int | None = None
    max_retries: int | None = None
    at: datetime | str | None = None
    delay: Duration | None = None
    timeout: Duration | None = None
    id: str | None = None  # the job's id (new_job_id); None: Client.enqueue_many makes one

    def body(self) -> dict[str, Any]:
        """Return the enqueue body for this job (only the fields that were given)."""
        if self.at is not None and self.delay is not None:
            raise ValueError("give at or delay, not both")
        fields = {
            "type": self.type,
            "payload": self.payload,
            "queue": self.queue,
            "priority": self.priority,
            "max_retries": self.max_retries,
            "scheduled_at": _moment(self.at),
            "delay": _duration(self.delay, "delay"),
            "timeout": _duration(self.timeout, "timeout"),
            "id": self.id,
        }
        return {name: value for name, value in fields.items() if value is not None}


class Client:
    """A TaskForge gateway, reached over HTTP.

    ``url`` and ``token`` default to ``TASKFORGE_URL`` (else http://127.0.0.1:8080) and
    ``TASKFORGE_API_TOKEN``. ``timeout`` bounds each try (connect, then each read); a failed try
    is repeated up to ``retries`` times with exponential backoff from ``backoff`` seconds, when
    repeating is safe (see taskforge.transport).
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 4,
        backoff: float = 0.2,
        max_backoff: float = 2.0,
        pool_size: int = 10,
    ) -> None:
        self._http = Transport(
            url or os.environ.get("TASKFORGE_URL") or DEFAULT_URL,
            token=token if token is not None else os.environ.get("TASKFORGE_API_TOKEN"),
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            pool_size=pool_size,
        )

    @property
    def url(self) -> str:
        """Return the gateway's base URL."""
        return self._http.url

    def close(self) -> None:
        """Close the pooled connections (the client can still be used: it reconnects)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- enqueue -----------------------------------------------------------------------------

    def enqueue(
        self,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        max_retries: int | None = None,
        at: datetime | str | None = None,
        delay: Duration | None = None,
        timeout: Duration | None = None,
        id: str | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Create one job and return it (status pending, or scheduled for ``at`` or ``delay``).

        Every call names its job: the id is made here (``new_job_id``) unless given, and a
        try that fails is repeated with the same id, for at most ENQUEUE_RETRY_WINDOW seconds:
        a reply lost on the way never makes a second job. Give an ``idempotency_key``
        instead (a key of yours, remembered a day) to make a repeat of the whole call, after a
        crash, safe too; the gateway takes an id or a key, not both.
        """
        if id is not None and idempotency_key is not None:
            raise ValueError("give id or idempotency_key, not both")
        spec = JobSpec(type, payload, queue, priority, max_retries, at, delay, timeout)
        body = spec.body()
        if idempotency_key is not None:
            doc = self._http.request(
                "POST", "/enqueue", body=body, headers={"Idempotency-Key": idempotency_key}
            )
        else:
            body["id"] = id or new_job_id(queue or DEFAULT_QUEUE)
            doc = self._http.request("POST", "/enqueue", body=body, within=ENQUEUE_RETRY_WINDOW)
        return Job.from_json(doc)

    def enqueue_many(
        self, jobs: Iterable[JobSpec | dict[str, Any]], *, idempotency_key: str | None = None
    ) -> list[Job]:
        """Create many jobs, 1,000 per request, each request all or none; return them in order.

        Every job is named by an id made here (``new_job_id``; a dict's own ``id`` is kept), and
        a try that fails is repeated with the same ids, for at most ENQUEUE_RETRY_WINDOW
        seconds: a reply lost on the way never makes a batch twice. Give an idempotency key
        instead (no ids are made then) to make a repeat of the whole call safe too: request
        ``i`` (the jobs from ``i * 1000``) sends ``f"{idempotency_key}.{i}"`` (so at most 255
        characters of printable ASCII in all), and the same jobs in the same order are answered
        with the jobs first made.
        """
        bodies = [job.body() if isinstance(job, JobSpec) else dict(job) for job in jobs]
        if idempotency_key is None:
            for body in bodies:  # each job named here, so a retry names the same ones
                body.setdefault("id", new_job_id(body.get("queue") or DEFAULT_QUEUE))
        created: list[Job] = []
        for index, start in enumerate(range(0, len(bodies), BATCH_MAX)):
            chunk = bodies[start : start + BATCH_MAX]
            if idempotency_key is None:
                # The jobs' ids make a repeat answer the same jobs.
                doc = self._http.request(
                    "POST", "/enqueue/batch", body={"jobs": chunk}, within=ENQUEUE_RETRY_WINDOW
                )
            else:
                doc = self._http.request(
                    "POST",
                    "/enqueue/batch",
                    body={"jobs": chunk},
                    headers={"Idempotency-Key": f"{idempotency_key}.{index}"},
                )
            created += [Job.from_json(job) for job in doc["jobs"]]
        return created

    # --- one job -----------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """Return a job; ``NotFound`` if there is none (or it has expired)."""
        return Job.from_json(self._http.request("GET", f"/jobs/{_seg(job_id)}"))

    def wait(self, job_id: str, timeout: float | None = None) -> Job:
        """Return the job once it has completed; ``timeout`` None waits as long as it takes.

        Raises ``JobFailed`` if it died, ``JobCanceled`` if it was canceled and ``WaitTimeout``
        if it was still unfinished after ``timeout`` seconds; each carries the job. The gateway
        holds each request until the job finishes (``GET /jobs/<id>?wait=``), so nothing polls.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = WAIT_STEP if deadline is None else max(0.0, deadline - time.monotonic())
            step = min(WAIT_STEP, left)
            doc = self._http.request(
                "GET",
                f"/jobs/{_seg(job_id)}",
                query={"wait": f"{step:.3f}"},
                read_timeout=step + self._http.timeout,
            )
            job = Job.from_json(doc)
            if job.status == "completed":
                return job
            if job.status == "dead":
                error = f": {job.last_error}" if job.last_error else ""
                tries = f"{job.attempts} attempt{'' if job.attempts == 1 else 's'}"
                raise JobFailed(job, f"job {job.id} is dead after {tries}{error}")
            if job.status == "canceled":
                raise JobCanceled(job, f"job {job.id} was canceled")
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(job, f"job {job.id} is still {job.status} after {timeout:g} s")

    def cancel(self, job_id: str, *, by: str | None = None) -> Job:
        """Cancel a job; return it. ``Conflict`` once it has completed or died.

        A job that has not started comes back ``canceled``. A running one comes back still
        ``processing`` with ``cancel_requested_at`` set (the gateway's 202): its worker is
        stopped within seconds and the job ends ``canceled`` — unless it completes first.
        ``wait`` tells which (``JobCanceled``, or the completed job). `by` names who asks (kept
        with a running job's request and in its history; default: "api" and this client's
        address). Safe to repeat.
        """
        body = None if by is None else {"by": by}
        doc = self._http.request("POST", f"/jobs/{_seg(job_id)}/cancel", body=body)
        return Job.from_json(doc)

    def history(self, job_id: str) -> History:
        """Return what happened to a job, oldest first (the last 50 transitions)."""
        return History.from_json(self._http.request("GET", f"/jobs/{_seg(job_id)}/history"))

    # --- listings ----------------------------------------------------------------------------

    def iter_jobs(
        self,
        state: str | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Job]:
        """Yield every job in one state (every state without one), page by page (each
        listed once; see ``list``)."""
        cursor: str | None = None
        while True:
            page = self.list(state, queue=queue, type=type, limit=page_size, cursor=cursor)
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def dlq(self, *, limit: int | None = None, cursor: str | None = None) -> JobPage:
        """Return a page of dead jobs, newest first."""
        doc = self._http.request("GET", "/dlq", query={"limit": limit, "cursor": cursor})
        return JobPage.from_json(doc)

    # --- the dead-letter queue ---------------------------------------------------------------

    def replay(self, job_id: str) -> Job:
        """Send one dead job back to pending with its attempts at 0; return it."""
        doc = self._http.request("POST", f"/dlq/{_seg(job_id)}/retry", replay=Replay.UNSENT)
        return Job.from_json(doc)

    def purge(self, job_id: str) -> None:
        """Delete one dead job for good."""
        self._http.request("DELETE", f"/dlq/{_seg(job_id)}", replay=Replay.UNSENT)

    def replay_dead(
        self,
        ids: Iterable[str] | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        all: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BulkResult:
        """Replay dead jobs: these ``ids``, or one page of those a filter matches.

        Follow ``next_cursor`` (with the same filter) until it is None. A repeat acts on no job
        twice (what it already replayed is skipped as "not dead"), so it is retried freely.
        """
        body = _bulk_body(ids, queue, type, all, limit, cursor)
        return BulkResult.from_json(self._http.request("POST", "/dlq/retry", body=body))

    def purge_dead(
        self,
        ids: Iterable[str] | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        all: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BulkResult:
        """Delete dead jobs: these ``ids``, or one page of those a filter matches."""
        body = _bulk_body(ids, queue, type, all, limit, cursor)
        return BulkResult.from_json(self._http.request("POST", "/dlq/purge", body=body))

    # --- queues, workers, statistics ---------------------------------------------------------

    def stats(self) -> Stats:
        """Return jobs per state (all queues and each), the oldest pending age, worker counts."""
        return Stats.from_json(self._http.request("GET", "/stats"))

    def throughput(self, *, queue: str | None = None, minutes: int | None = None) -> dict[str, Any]:
        """Return jobs completed and failed per minute (``GET /stats/throughput``), as JSON."""
        query = {"queue": queue, "minutes": minutes}
        doc: dict[str, Any] = self._http.request("GET", "/stats/throughput", query=query)
        return doc

    def queue_page(
        self, *, limit: int | None = None, cursor: str | None = None, search: str | None = None
    ) -> tuple[list[Queue], str | None]:
        """Return one page of queues (every queue while they fit in `limit`), and the cursor
        of the next page (None: the last). `search`: names containing it."""
        query = {"limit": limit, "cursor": cursor, "q": search}
        doc = self._http.request("GET", "/queues", query=query)
        return [Queue.from_json(queue) for queue in doc["queues"]], doc.get("next_cursor")

    def queues(self, *, search: str | None = None) -> list[Queue]:
        """Return every queue (following the pages): counts per state, paused or not, the last
        minute's throughput. `search`: names containing it."""
        entries = self._every_entry("/queues", "queues", q=search)
        # A page may repeat a name (the set changed between pages): the last one read stands.
        found = {queue.name: queue for queue in map(Queue.from_json, entries)}
        return sorted(found.values(), key=lambda queue: queue.name)

    def pause_queue(self, name: str) -> Queue:
        """Pause a queue: jobs still arrive, no worker claims them until it is resumed."""
        return Queue.from_json(self._http.request("POST", f"/queues/{_seg(name)}/pause"))

    def resume_queue(self, name: str) -> Queue:
        """Resume a paused queue (resuming one that runs changes nothing)."""
        return Queue.from_json(self._http.request("POST", f"/queues/{_seg(name)}/resume"))

    def delete_queue(self, name: str) -> None:
        """Delete an empty queue, its finished jobs and events with it.

        Raises Conflict while it holds a pending, held, scheduled, retrying, processing or dead
        job (``body["jobs"]`` counts them), is paused or limited, or a workerd host serves it;
        NotFound for a name no queue has. Not resent once sent: a repeat would answer 404.
        """
        self._http.request("DELETE", f"/queues/{_seg(name)}", replay=Replay.UNSENT)

    def limits(self) -> list[Limits]:
        """Return every queue that has limits (following the pages of ``GET /limits``), with
        running and held counts per scope, by name."""
        entries = self._every_entry("/limits", "queues")
        found = {entry["queue"]: Limits.from_json(entry) for entry in entries}
        return [found[name] for name in sorted(found)]

    def _every_entry(self, path: str, key: str, **query: str | None) -> Iterator[dict[str, Any]]:
        """Yield the entries under `key` of every page of a queue-named listing (``GET /queues``,
        ``GET /limits``), following ``next_cursor`` to the end, the largest pages first."""
        cursor: str | None = None
        while True:
            page_query = {"limit": QUEUE_PAGE_MAX, "cursor": cursor, **query}
            doc = self._http.request("GET", path, query=page_query)
            yield from doc[key]
            cursor = doc.get("next_cursor")
            if cursor is None:
                return

    def queue_limits(self, queue: str) -> Limits:
        """Return one queue's limits (every field None when it has none)."""
        return Limits.from_json(self._http.request("GET", f"/queues/{_seg(queue)}/limits"))

    def set_limits(
        self,
        queue: str,
        *,
        type: str | None = None,
        concurrency: int | None = None,
        rate: str | None = None,
    ) -> Limits:
        """Set a queue's own limits, or with `type` one job type's in it; return them all.

        `rate` is ``"N/PERIOD"`` (``"100/1m"``, ``"5/500ms"``). Setting the queue's own limits
        keeps its types' (and the reverse); a value left None is no limit of that kind.
        """
        body = {"concurrency": concurrency, "rate": rate}
        path = f"/queues/{_seg(queue)}/limits"
        if type is not None:
            path += f"/types/{_seg(type)}"
        # Without "types", PUT /queues/<q>/limits sets the queue's own and keeps its types'.
        return Limits.from_json(self._http.request("PUT", path, body=body))

    def clear_limits(self, queue: str, *, type: str | None = None) -> Limits:
        """Remove a queue's limits (all of them), or with `type` that type's only."""
        path = f"/queues/{_seg(queue)}/limits"
        if type is not None:
            path += f"/types/{_seg(type)}"
        return Limits.from_json(self._http.request("DELETE", path))

    def workers(self) -> list[Host]:
        """Return every live workerd host with its worker processes and what each runs."""
        doc = self._http.request("GET", "/workers")
        return [Host.from_json(host) for host in doc["hosts"]]

    def quiet_worker(self, name: str) -> Host:
        """Ask a workerd host to finish its jobs and claim no more (within 2 s)."""
        return Host.from_json(self._http.request("POST", f"/workers/{_seg(name)}/quiet"))

    def resume_worker(self, name: str) -> Host:
        """Ask a quiet workerd host to claim again."""
        return Host.from_json(self._http.request("POST", f"/workers/{_seg(name)}/resume"))

    def schedules(self) -> list[Schedule]:
        """Return every periodic schedule: definition, paused, last tick, the next runs."""
        doc = self._http.request("GET", "/schedules")
        return [Schedule.from_json(schedule) for schedule in doc["schedules"]]

    def schedule(self, name: str) -> Schedule:
        """Return one periodic schedule (``NotFound`` when no workerd published it)."""
        return Schedule.from_json(self._http.request("GET", f"/schedules/{_seg(name)}"))

    def pause_schedule(self, name: str) -> Schedule:
        """Pause a schedule: its ticks pass without jobs until it is resumed."""
        return Schedule.from_json(self._http.request("POST", f"/schedules/{_seg(name)}/pause"))

    def resume_schedule(self, name: str) -> Schedule:
        """Resume a schedule at its next tick (the ticks it was paused for do not run)."""
        return Schedule.from_json(self._http.request("POST", f"/schedules/{_seg(name)}/resume"))

    def health(self) -> dict[str, Any]:
        """Return ``GET /ready``: the gateway answers and reaches Redis (else ``Unavailable``)."""
        doc: dict[str, Any] = self._http.request("GET", "/ready")
        return doc

    # Last: inside the class body, the name ``list`` is this method from here on.
    def list(
        self,
        state: str | None = None,
        *,
        queue: str | None = None,
        type: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> JobPage:
        """Return one page of the jobs in ``state`` (optionally of one queue and one type).

        Without ``state``, jobs of every state, in lifecycle order (processing, pending,
        scheduled, retrying, completed, dead, canceled), each state in its own order. Pass
        ``next_cursor`` back as ``cursor`` for the next page (``iter_jobs`` does it).
        """
        query = {"state": state, "queue": queue, "type": type, "limit": limit, "cursor": cursor}
        return JobPage.from_json(self._http.request("GET", "/jobs", query=query))


def _seg(value: str) -> str:
    """Return a path segment quoted, so an odd id or name cannot reach another route."""
    return quote(value, safe="")


def _bulk_body(
    ids: Iterable[str] | None,
    queue: str | None,
    type: str | None,
    all: bool,
    limit: int | None,
    cursor: str | None,
) -> dict[str, Any]:
    """Return a bulk DLQ body; the gateway refuses one that names no jobs."""
    if ids is not None:
        return {"ids": [str(job_id) for job_id in ids]}
    fields = {"queue": queue, "type": type, "limit": limit, "cursor": cursor}
    body = {name: value for name, value in fields.items() if value is not None}
    if all:
        body["all"] = True
    return body
