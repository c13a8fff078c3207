"""``GET /jobs/<id>?wait=``: answer when the job finishes, or when the wait ends, without polling.

A waiting request holds a gunicorn thread like an open event stream, so it takes a slot of
the same bound (TASKFORGE_EVENTS_STREAMS, gateway/events_api.py) and never one of the threads
that answer the rest. It holds no Redis connection while it waits: the process's EventTail
wakes it when the event stream holding the job's queue grows, and a pooled connection serves
only the short reads of the job. A wait whose client hangs up ends (and frees its slot) within
gateway.hangup.POLL_SECONDS, not when the wait would have ended.

No lost wake-up: the wait takes the tail's position in that stream, THEN reads the job.
Every transition script writes its event in the same atomic step as the transition, so a
finish after that read has an entry after that position, which the tail holds in memory
(or, if the reader fell out of the tail's window, the wait reads the job again and re-pins).

With TASKFORGE_EVENTS=off no event is written: the wait reads the job every POLL_SECONDS.
"""

from __future__ import annotations

import re
import socket
import time

from flask import request

from gateway.context import Gateway
from gateway.events_api import EventHub, sleep_on_tail, worker_alive
from gateway.hangup import client_gone
from gateway.http_errors import ApiError
from gateway.inputs import bad_field
from shared.engine.events import StreamId
from shared.engine.queries import get_job
from shared.model.durations import duration_parser
from shared.model.jobs import Job, JobState
from shared.obs import metrics
from shared.read.event_tail import EventTail

# A proxy commonly closes a connection idle for 60 s (nginx's proxy_read_timeout, AWS ALB's
# idle timeout): a longer wait would be cut there. A client wanting longer asks again.
MAX_WAIT_SECONDS = 60
POLL_SECONDS = 0.5  # events off: how often a wait reads the job again
RETRY_AFTER = "1"  # a wait's slot frees within MAX_WAIT_SECONDS, usually far sooner
FINISHED = frozenset({JobState.COMPLETED, JobState.DEAD, JobState.CANCELED})
# After these events of the job it may be finished or gone: the wait reads it again. Not
# `replayed`: it takes a dead job back to pending, and a wait that saw it dead has answered.
FINISHING_EVENTS = frozenset({"completed", "dead", "canceled", "purged"})
# What duration_parser reads, limited to ms, s and m and to 0..60 s by the pattern itself, so
# that the OpenAPI document can state the very rule the server applies (schemathesis checks
# both ways). ASCII digits only: Python's \d and float() also take other scripts' digits.
_FRACTION = r"(\.[0-9]+)?"
_ZEROS = r"(\.0+)?"
WAIT_PATTERN = (
    rf"^(0*([0-5]?[0-9]{_FRACTION}|60{_ZEROS})s?"
    rf"|0*([0-9]{{1,4}}{_FRACTION}|[1-5][0-9]{{4}}{_FRACTION}|60000{_ZEROS})ms"
    rf"|(0+{_FRACTION}|0*1{_ZEROS})m)$"
)
WAIT_RULE = "must be seconds (2.5) or a duration (500ms, 30s, 1m) from 0 to 60s"

_wait = re.compile(WAIT_PATTERN)
_duration = duration_parser(positive=False)


def parse_wait(text: str) -> float | None:
    """Return the seconds a ``wait`` value asks for, or None when the value is not allowed."""
    return _duration(text) if _wait.fullmatch(text) else None


def wait_seconds() -> float:
    """Return how long the request asks to wait (0 without ``wait``); refuse a bad value.

    Over 60 s is refused, not clamped: a client that asked for more than it can get learns it
    here, instead of taking the end of a shorter wait for the end of its own.
    """
    given = request.args.getlist("wait")
    if not given:
        return 0.0
    if len(given) > 1:
        raise bad_field("wait", "is given more than once; give it at most once")
    text = given[0]
    seconds = parse_wait(text)
    if seconds is None:
        raise bad_field("wait", f"{WAIT_RULE} (ask again to wait longer), got {text[:20]!r}")
    return seconds


def finished(job: Job) -> bool:
    """Tell whether a job will not change state again by itself."""
    return job.status in FINISHED


def read_job(gw: Gateway, job_id: str, queue: str) -> Job:
    """Return the job as Redis holds it now (one short pooled read); 404 once it is gone."""
    job = get_job(gw.redis, gw.keys, job_id, [queue])
    if job is None:
        raise ApiError(404, "job not found")
    return job


def wait_for(gw: Gateway, hub: EventHub, job: Job, seconds: float) -> Job:
    """Return `job` once finished, or as it is after `seconds`; 503 when no slot is free."""
    if seconds <= 0 or finished(job):
        return job
    sock = request.environ.get("gunicorn.socket")
    hub.hold_slot(sock, "event streams and waits", retry_after=RETRY_AFTER)
    metrics.JOB_WAITS.inc()
    try:
        deadline = time.monotonic() + seconds
        if gw.scripts.policy.events_cap == 0:
            return _poll(gw, job, deadline, sock)
        return _follow(gw, hub.tail, job, deadline, sock)
    finally:
        metrics.JOB_WAITS.dec()
        hub.give_slot(sock)


def _follow(
    gw: Gateway, tail: EventTail, job: Job, deadline: float, sock: socket.socket | None
) -> Job:
    """Wait on the tail: pin the stream's position, read the job, wake on its finishing event."""
    queue = job.queue
    stream = tail.stream_of(queue)  # on one Redis the stream of every queue
    # Naming the queue makes a tail that does not watch it yet list it now, not within 5 s.
    tail.join([queue] if tail.position(stream) is None else None)
    try:
        while not tail.stopping:
            version = tail.version  # before the look: a pin right after it still wakes us
            position = tail.position(stream)
            if position is not None:
                job = read_job(gw, job.id, queue)
                if finished(job):
                    return job
                if not _until_news(tail, job.id, stream, position, deadline, sock):
                    break
                continue  # news (or the window lost our place): pin again, read again
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sleep_on_tail(tail, version, remaining, sock):
                break  # until the tail watches the stream, or the client hung up
    finally:
        tail.leave()
    if client_gone(sock):
        return job  # nobody to answer: no read (the write that follows fails quietly)
    return read_job(gw, job.id, queue)


def _until_news(
    tail: EventTail,
    job_id: str,
    stream: str,
    position: StreamId,
    deadline: float,
    sock: socket.socket | None,
) -> bool:
    """Wait for a finishing event of the job after `position`; False when the wait ends.

    True also when the tail's memory no longer covers `position` (the reader fell more than
    its window behind, or the tail restarted after an error): the caller reads the job again.
    False too once the client hung up.
    """
    while True:
        version = tail.version  # before entries_after: an entry added after it wakes us
        newer = tail.entries_after(stream, position)
        if newer is None:
            return True
        if any(e.job_id == job_id and e.name in FINISHING_EVENTS for e in newer):
            return True
        if newer:
            position = newer[-1].id
        remaining = deadline - time.monotonic()
        if remaining <= 0 or tail.stopping:
            return False
        if not sleep_on_tail(tail, version, remaining, sock):
            return False


def _poll(gw: Gateway, job: Job, deadline: float, sock: socket.socket | None) -> Job:
    """Events off: read the job every POLL_SECONDS until it finishes or the wait ends."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not worker_alive() or client_gone(sock):
            return job
        time.sleep(min(POLL_SECONDS, remaining))  # a pause between reads, nothing to wake it
        job = read_job(gw, job.id, job.queue)
        if finished(job):
            return job
