"""GET /events: job, queue and host events as Server-Sent Events, resumable, bounded per process.

Each message's ``id`` is a cursor over the streams the client reads, of a size bounded
whatever the number of queues (shared.engine.events): one stream id on one Redis. A client that
reconnects with it (``Last-Event-ID``, or ``last_event_id`` on the first connection) misses
nothing the streams still hold (on a Cluster, within the clock skew docs/EVENTS.md states), and
gets an ``event: gap`` message for a stream that dropped entries it had not read. Without one,
the stream starts now, and the first message already carries the cursor of that moment.

An open stream holds one gunicorn thread, so at most TASKFORGE_EVENTS_STREAMS are served per
process (deploy/gunicorn.conf.py adds that many threads to the 32 that answer the rest); one
more gets 503. Streams hold no pooled Redis connection while they wait: the process's one
EventTail wakes them (shared/read/event_tail.py). A stream whose client hangs up frees its slot
within gateway.hangup.POLL_SECONDS, not at its next keep-alive.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import redis
import redis.exceptions
from flask import Blueprint, Flask, Response, current_app, request

from gateway.context import Gateway, gateway
from gateway.hangup import Holders, sliced_wait, take_slot
from gateway.http_errors import ApiError, redis_unavailable
from gateway.routes import route
from shared.connect.redis_conn import like
from shared.engine.events import (
    ZERO,
    Batch,
    Cursor,
    Event,
    StreamId,
    decode_cursor,
    encode_cursor,
    latest_positions,
    per_queue_streams,
    read_events,
    reader_streams,
)
from shared.model.jobs import JOB_ID_PATTERN, TYPE_PATTERN
from shared.model.queues import QUEUE_RULE, is_queue_name
from shared.read.event_tail import BLOCK_MS, EventTail

log = logging.getLogger(__name__)

bp = Blueprint("events", __name__)

EXTENSION = "taskforge.events"
KEEPALIVE_SECONDS = 15.0  # TASKFORGE_EVENTS_KEEPALIVE's default (the route table quotes it)
RETRY_MS = 2000  # what EventSource waits before it reconnects
READ_COUNT = 100  # entries per stream per read; a reader behind reads again at once
MAX_QUEUES = 100  # queues one request may name
TAIL_SOCKET_SLACK = 1.0  # seconds the tail's socket waits beyond its XREAD BLOCK
SEND_TIMEOUT_KEEPALIVES = 2  # a write blocked this many keep-alive intervals ends the stream
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # nginx: do not buffer

# Set by deploy/gunicorn.conf.py in each worker: false once the worker is stopping (SIGTERM,
# or recycled after max_requests), so open streams end instead of holding it for the grace.
_worker_alive: Callable[[], bool] = lambda: True  # noqa: E731


def watch_worker(alive: Callable[[], bool]) -> None:
    """Let open streams end when `alive` turns false (gunicorn's worker.alive)."""
    global _worker_alive
    _worker_alive = alive


def worker_alive() -> bool:
    """Tell whether this gunicorn worker still serves (false once it is stopping)."""
    return _worker_alive()


@dataclass
class EventHub:
    """One process's event readers: the slots that bound them, the tail that wakes them."""

    tail: EventTail
    slots: threading.BoundedSemaphore
    limit: int
    keepalive: float = KEEPALIVE_SECONDS  # seconds: an idle stream sends a comment this often
    holders: Holders = field(default_factory=Holders)  # the slot holders' sockets

    def take_slot(self, sock: socket.socket | None) -> bool:
        """Take a slot for the request on `sock` (False: none free); give_slot frees it."""
        if not take_slot(self.slots, self.holders):
            return False
        self.holders.add(sock)
        return True

    def hold_slot(self, sock: socket.socket | None, serving: str, retry_after: str) -> None:
        """Take a slot for the request on `sock`, or answer 503 saying what this process
        already serves (`serving`) and when to try again; give_slot frees it."""
        if not self.take_slot(sock):
            raise ApiError(
                503,
                f"this gateway process already serves {self.limit} {serving} "
                "(TASKFORGE_EVENTS_STREAMS); try again shortly",
                headers={"Retry-After": retry_after},
            )

    def give_slot(self, sock: socket.socket | None) -> None:
        """Free the slot of the request on `sock`."""
        self.holders.discard(sock)
        self.slots.release()


def install(app: Flask, gw: Gateway) -> None:
    """Give `app` its hub (the tail starts with the first stream, not here: tests need none)."""
    limit = gw.settings.events_streams
    tail = EventTail(
        lambda: _tail_client(gw.redis),
        gw.keys,
        lambda: gw.directory.names(refresh=True),
        alive=worker_alive,
        per_queue=per_queue_streams(gw.redis),
    )
    app.extensions[EXTENSION] = EventHub(
        tail, threading.BoundedSemaphore(limit), limit, gw.settings.events_keepalive
    )


def _tail_client(pooled: redis.Redis) -> redis.Redis:
    """Return a one-connection client like `pooled`'s, whose socket outwaits XREAD BLOCK."""
    return like(pooled, max_connections=1, socket_timeout=BLOCK_MS / 1000 + TAIL_SOCKET_SLACK)


def hub() -> EventHub:
    """Return the current app's hub."""
    return current_app.extensions[EXTENSION]


@dataclass(frozen=True)
class Filters:
    """What a client asked for: queues (None: all), one job type, one job id."""

    queues: list[str] | None
    type: str | None
    job_id: str | None

    @property
    def host_events(self) -> bool:
        """Tell whether host events go to this client (they have no job and no type)."""
        return self.type is None and self.job_id is None

    def wants(self, event: Event) -> bool:
        """Tell whether an event passes the filters (host events: those without a queue)."""
        if event.queue is None:
            return self.host_events
        if self.queues is not None and event.queue not in self.queues:
            return False
        if self.job_id is not None and event.job_id != self.job_id:
            return False
        return self.type is None or event.type == self.type


def _filters() -> Filters:
    queues: list[str] = []
    for value in request.args.getlist("queue"):
        queues += [name.strip() for name in value.split(",")]
    for name in queues:
        if not is_queue_name(name):
            raise ApiError(400, f"bad queue name {name[:64]!r}: a queue name {QUEUE_RULE}")
    if len(set(queues)) > MAX_QUEUES:
        raise ApiError(400, f"at most {MAX_QUEUES} queues per stream")
    job_type = request.args.get("type")
    if job_type is not None and not TYPE_PATTERN.fullmatch(job_type):
        raise ApiError(400, f"bad type {job_type[:64]!r}: 1-128 of A-Z a-z 0-9 _ . : -")
    job_id = request.args.get("job")
    if job_id is not None:
        job_id = job_id.lower()
        if not JOB_ID_PATTERN.fullmatch(job_id):
            raise ApiError(400, f"malformed job id {job_id[:64]!r}: expected a UUIDv4")
    return Filters(sorted(set(queues)) or None, job_type, job_id)


def _cursor() -> Cursor | None:
    # The header wins: EventSource sends it on a reconnect, while the URL keeps the first one.
    text = request.headers.get("Last-Event-ID") or request.args.get("last_event_id")
    if not text:
        return None
    try:
        return decode_cursor(text)
    except ValueError as exc:
        raise ApiError(400, f"malformed Last-Event-ID: {exc}") from None


@route(bp, "GET", "/events", query=("queue", "type", "job", "last_event_id"))
def events() -> Response:
    """Stream events as text/event-stream until the client leaves or the worker stops."""
    filters = _filters()
    cursor = _cursor()
    if request.method == "HEAD":  # gunicorn would iterate the body of a HEAD too
        return Response(b"", mimetype="text/event-stream", headers=HEADERS)
    h, gw = hub(), gateway()
    sock = request.environ.get("gunicorn.socket")
    h.hold_slot(sock, "event streams", retry_after="5")
    try:
        per_queue = h.tail.per_queue
        # One Redis: one stream for all, the list of queues is never read. A Cluster: a
        # stream per queue, each listed one for an unfiltered reader.
        names = filters.queues or (gw.directory.names(refresh=True) if per_queue else [])
        streams = reader_streams(per_queue, names, filters.host_events)
        if cursor is None:  # now, pinned: the first id sent resumes from here
            positions = latest_positions(gw.redis, gw.keys, streams)
        else:
            positions = cursor.positions(streams)
    except BaseException:
        h.give_slot(sock)
        raise
    _bound_writes(h.keepalive)
    reader = Reader(h, gw, filters, positions, sock)
    response = Response(reader.messages(), mimetype="text/event-stream", headers=HEADERS)
    response.call_on_close(_once(lambda: h.give_slot(sock)))  # gunicorn, the test client
    return response


def _bound_writes(keepalive: float) -> None:
    """Give up on a client that stops reading: a write may wait SEND_TIMEOUT_KEEPALIVES
    keep-alive intervals, then fails and the stream ends, freeing its slot and thread.

    gunicorn's gthread worker writes to a blocking socket without a timeout, so a client that
    keeps its connection open but reads nothing would otherwise hold the slot forever once the
    socket's buffers fill. (A client that disconnects is noticed sooner: gateway.hangup.)
    gunicorn makes the socket non-blocking again before it reuses the connection.
    """
    sock = request.environ.get("gunicorn.socket")
    if sock is not None:
        sock.settimeout(SEND_TIMEOUT_KEEPALIVES * keepalive)


def _once(action: Callable[[], object]) -> Callable[[], None]:
    """Return `action` run at most once, however often a response is closed."""
    pending = [True]
    lock = threading.Lock()

    def run() -> None:
        with lock:
            if not pending[0]:
                return
            pending[0] = False
        action()

    return run


def sleep_on_tail(
    tail: EventTail, version: int, seconds: float, sock: socket.socket | None
) -> bool:
    """Wait on the tail for news after `version` up to `seconds` (a stream's keep-alive, a
    ?wait='s deadline); False once the client hung up (gateway.hangup)."""
    woke = lambda step: tail.wait(version, step) != version or tail.stopping  # noqa: E731
    return sliced_wait(woke, seconds, sock)


class Reader:
    """One client's stream: its positions, read whenever the tail says a stream grew."""

    def __init__(
        self,
        h: EventHub,
        gw: Gateway,
        filters: Filters,
        positions: dict[str, StreamId],
        sock: socket.socket | None = None,
    ) -> None:
        self.hub = h
        self.gw = gw
        self.filters = filters
        self.positions = positions
        self.sock = sock  # the client's (gunicorn's environ): asked whether it hung up
        self.per_queue = h.tail.per_queue

    def messages(self) -> Iterator[bytes]:
        """Yield SSE messages: the cursor first, then events, gaps and keep-alive comments."""
        tail = self.hub.tail
        tail.join(self.filters.queues)
        try:
            yield f"retry: {RETRY_MS}\nid: {self._cursor()}\n\n".encode()
            yield from self._follow(tail)
        finally:
            tail.leave()

    def _follow(self, tail: EventTail) -> Iterator[bytes]:
        read_at: int | None = None  # the tail's version at our last read; None: read all
        written = time.monotonic()
        failed = False
        while not tail.stopping:
            version = tail.version
            due = self._due(tail, read_at)
            if due:
                try:
                    batch = self._read(tail, due)
                except redis.exceptions.RedisError as exc:
                    if failed or not redis_unavailable(exc):
                        log.warning("events_read_failed", extra={"error": type(exc).__name__})
                        return  # the client reconnects with the last id it got
                    failed = True  # once more after a pause: a pool briefly busy is no outage
                    tail.wait(version, 0.5)
                    continue
                failed = False
                chunk = self._render(batch)
                if chunk:
                    yield chunk
                    written = time.monotonic()
                read_at = None if batch.more else version
                if batch.more:
                    continue
            idle = time.monotonic() - written
            if idle >= self.hub.keepalive:
                yield b": keepalive\n\n"
                written = time.monotonic()
                continue
            if not self._sleep(tail, version, self.hub.keepalive - idle):
                return  # the client hung up: free the slot now, not at the next keep-alive

    def _sleep(self, tail: EventTail, version: int, seconds: float) -> bool:
        """Wait for news up to `seconds`; False once the client hung up."""
        return sleep_on_tail(tail, version, seconds, self.sock)

    def _cursor(self) -> str:
        return encode_cursor(self.positions, self.per_queue)

    def _due(self, tail: EventTail, read_at: int | None) -> dict[str, StreamId]:
        """Return the positions of the streams to read now (new queues join at ZERO)."""
        if self.filters.queues is None and self.per_queue:
            for name in tail.queue_names():
                self.positions.setdefault(name, ZERO)
        if read_at is None:
            return dict(self.positions)
        # A queue new to the tail counts as grown when the tail lists it (it watches listed
        # queues only), so a reader that follows it from then on reads it from its start.
        grown = tail.changed_since(read_at)
        return {name: at for name, at in self.positions.items() if name in grown}

    def _read(self, tail: EventTail, due: dict[str, StreamId]) -> Batch:
        """Take what the tail holds in memory; read Redis only for streams it cannot cover."""
        held: list[Event] = []
        behind: dict[str, StreamId] = {}
        for name, position in due.items():
            newer = tail.entries_after(name, position)
            if newer is None:
                behind[name] = position
            else:
                held += newer
        if not behind:
            return Batch([], sorted(held, key=lambda event: event.id), more=False)
        batch = read_events(self.gw.redis, self.gw.keys, behind, READ_COUNT)
        # Not past what Redis left unread (Batch.until): held entries after it come next time.
        events = batch.cut(sorted(held + batch.events, key=lambda event: event.id))
        return Batch(batch.gaps, events, batch.more, batch.until)

    def _render(self, batch: Batch) -> bytes:
        """Return the batch as SSE messages; an id-only one if only filtered entries moved."""
        parts: list[str] = []
        for gap in batch.gaps:
            doc = json.dumps(gap.to_json(), separators=(",", ":"))
            parts.append(f"event: gap\ndata: {doc}\n\n")
        moved = False
        for event in batch.events:
            self.positions[event.stream] = event.id
            moved = True
            if self.filters.wants(event):
                doc = json.dumps(event.to_json(), separators=(",", ":"))
                cursor = self._cursor()
                parts.append(f"id: {cursor}\nevent: {event.name}\ndata: {doc}\n\n")
                moved = False
        if moved:  # filtered out: still move the client's cursor past them
            parts.append(f"id: {self._cursor()}\n\n")
        return "".join(parts).encode()
