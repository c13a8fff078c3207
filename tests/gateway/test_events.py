"""GET /events through Flask's test client on the private redis-server (one Redis: one stream).

Most tests append entries in the scripts' format with XADD (docs/EVENTS.md, "Writing"), to
place each entry exactly; one runs the real scripts end to end. Every read is bounded: with the keep-alive shortened
to KEEPALIVE seconds, the stream yields at least a comment that often, so a test waiting for a
message it never gets fails at its deadline instead of hanging.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from flask import Flask

from gateway import events_api as gateway_events
from shared.engine.events import (
    FLEET,
    MAX_SEEN,
    ZERO,
    Cursor,
    Event,
    StreamInfo,
    decode_cursor,
    encode_cursor,
    format_id,
    parse_id,
    read_events,
)
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import EnqueueRequest, format_ms
from shared.read import event_tail
from shared.settings.config import Settings
from tests.gateway.conftest import TOKEN
from tests.support.gateway_app import app_without_fleet_thread
from tests.support.redis_server import RedisServer
from tests.support.tools import wait_until

K = Keys()
KEEPALIVE = 0.2  # seconds: the test streams' keep-alive interval
DEADLINE = 5.0  # seconds any one expected message may take


# --- writing entries as the scripts will ---------------------------------------------------


def emit(r: redis.Redis, queue: str, event: str, job_id: str | None = None, **fields: str) -> str:
    """Append a job or queue event of `queue` as the scripts do on one Redis; return its id.

    The queue is listed first, as a producer lists it before its first job there.
    """
    r.sadd(K.queues, queue)
    entry = {"q": queue, "e": event, **({"j": job_id} if job_id else {}), **fields}
    return r.xadd(K.fleet_events, entry).decode()


def emit_host(r: redis.Redis, event: str, host: str) -> str:
    """Append a host event to the one stream (no queue); return its id."""
    return r.xadd(K.fleet_events, {"e": event, "h": host}).decode()


def new_job() -> str:
    return str(uuid.uuid4())


# --- reading a stream ------------------------------------------------------------------------


@dataclass
class Message:
    """One SSE message (or comment) as a client parses it."""

    id: str | None = None
    event: str | None = None
    data: Any = None
    retry: int | None = None
    comment: str | None = None


def parse_message(block: str) -> Message:
    message = Message()
    for line in block.split("\n"):
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "":
            message.comment = value
        elif name == "id":
            message.id = value
        elif name == "event":
            message.event = value
        elif name == "data":
            message.data = json.loads(value)
        elif name == "retry":
            message.retry = int(value)
    return message


@dataclass
class Stream:
    """An open GET /events response read message by message."""

    response: Any
    chunks: Iterator[bytes] = field(init=False)
    buffer: str = ""
    last_id: str | None = None

    def __post_init__(self) -> None:
        self.chunks = self.response.iter_encoded()

    def next(self) -> Message | None:
        """Return the next message, or None when the stream ended."""
        while "\n\n" not in self.buffer:
            try:
                self.buffer += next(self.chunks).decode()
            except StopIteration:
                return None
        block, self.buffer = self.buffer.split("\n\n", 1)
        message = parse_message(block)
        if message.id is not None:
            self.last_id = message.id
        return message

    def events(self, count: int) -> list[Message]:
        """Return the next `count` event messages (skipping comments and id-only ones)."""
        found: list[Message] = []
        deadline = time.monotonic() + DEADLINE
        while len(found) < count:
            assert time.monotonic() < deadline, f"got {len(found)} of {count} events: {found}"
            message = self.next()
            assert message is not None, f"the stream ended after {found}"
            if message.event is not None:
                found.append(message)
        return found

    def quiet_for(self, seconds: float) -> list[Message]:
        """Read for `seconds`; return the event messages that came (keep-alives bound it)."""
        found = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            message = self.next()
            if message is None:
                break
            if message.event is not None:
                found.append(message)
        return found

    def close(self) -> None:
        self.response.close()


@pytest.fixture
def app(r: redis.Redis, redis_server: RedisServer) -> Iterator[Flask]:
    yield make_app(r)


def make_app(r: redis.Redis, **env: str) -> Flask:
    settings = Settings.from_env({"REDIS_URL": "redis://unused", **env})
    application = app_without_fleet_thread(settings, scripts=Scripts(r, K))
    application.testing = True
    application.extensions[gateway_events.EXTENSION].keepalive = KEEPALIVE
    return application


@pytest.fixture
def opened(app: Flask) -> Iterator[Callable[..., Stream]]:
    """Return an opener of streams on `app`; every stream is closed after the test."""
    streams: list[Stream] = []
    client = app.test_client()

    def open_stream(query: str = "", headers: dict[str, str] | None = None) -> Stream:
        response = client.get(f"/events{query}", headers=headers or {}, buffered=False)
        assert response.status_code == 200, response.get_data(as_text=True)
        stream = Stream(response)
        streams.append(stream)
        first = stream.next()
        assert first is not None and first.retry == 2000 and first.id is not None
        return stream

    yield open_stream
    for stream in streams:
        stream.close()
    app.extensions[gateway_events.EXTENSION].tail.stop()


# --- format ----------------------------------------------------------------------------------


def test_a_job_event_is_an_sse_message_with_a_resumable_id(app: Flask, r: redis.Redis) -> None:
    response = app.test_client().get("/events", buffered=False)
    try:
        assert response.status_code == 200
        assert response.mimetype == "text/event-stream"
        assert response.headers["Cache-Control"] == "no-cache"
        assert response.headers["X-Accel-Buffering"] == "no"
        stream = Stream(response)
        first = stream.next()
        assert first is not None and first.retry == 2000
        assert decode_cursor(first.id).seq is not None  # one Redis: the one stream's id
        job = new_job()
        entry = emit(r, "default", "claimed", job, t="email.send", a="2", w="host-1-7:3")
        (message,) = stream.events(1)
        assert message.event == "claimed"
        assert message.data == {
            "event": "claimed",
            "job_id": job,
            "type": "email.send",
            "queue": "default",
            "attempt": 2,
            "worker": "host-1-7:3",
            "at": format_ms(int(entry.split("-")[0])),
        }
        assert message.id == entry
    finally:
        response.close()


def test_a_job_run_by_the_real_scripts_streams_its_whole_life(
    opened: Callable[..., Stream], app: Flask, r: redis.Redis
) -> None:
    stream = opened("?queue=default")
    answer = app.test_client().post("/enqueue", json={"type": "email.send", "payload": {}})
    assert answer.status_code == 201, answer.get_data(as_text=True)
    job = answer.get_json()["id"]
    scripts = Scripts(r, K)
    claimed = scripts.claim("host-1-7:3")
    assert claimed is not None and claimed.id == job
    scripts.complete(job, claimed.token, "{}")

    messages = stream.events(3)

    assert [(m.event, m.data["job_id"], m.data["type"]) for m in messages] == [
        ("enqueued", job, "email.send"),
        ("claimed", job, "email.send"),
        ("completed", job, "email.send"),
    ]
    assert messages[1].data["worker"] == "host-1-7:3" and messages[1].data["attempt"] == 1


def test_events_written_before_the_stream_opened_are_not_sent(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    emit(r, "default", "enqueued", new_job())
    stream = opened()
    later = new_job()
    emit(r, "default", "enqueued", later)
    (message,) = stream.events(1)
    assert message.data["job_id"] == later


def test_the_first_id_resumes_from_the_moment_the_stream_opened(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened()
    start = stream.last_id
    stream.close()
    missed = new_job()
    emit(r, "default", "enqueued", missed)
    again = opened(headers={"Last-Event-ID": start})
    (message,) = again.events(1)
    assert message.data["job_id"] == missed


# --- filters ---------------------------------------------------------------------------------


def test_a_queue_filter_sends_that_queue_and_host_events(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened("?queue=critical,low")
    parse_id(stream.last_id)  # one stream id, whatever the filter
    emit(r, "default", "enqueued", new_job())
    wanted = new_job()
    emit(r, "critical", "enqueued", wanted)
    emit_host(r, "worker_joined", "host-1-7")
    job_event, host_event = stream.events(2)
    assert (job_event.data["job_id"], job_event.data["queue"]) == (wanted, "critical")
    assert host_event.data == {
        "event": "worker_joined",
        "host": "host-1-7",
        "at": host_event.data["at"],
    }


def test_repeated_queue_parameters_add_up(opened: Callable[..., Stream], r: redis.Redis) -> None:
    stream = opened("?queue=a&queue=b,c")
    emit(r, "d", "enqueued", new_job())
    wanted = [new_job() for _ in range(3)]
    for queue, job in zip("abc", wanted, strict=True):
        emit(r, queue, "enqueued", job)
    assert [m.data["job_id"] for m in stream.events(3)] == wanted


def test_a_type_filter_sends_only_that_type_and_no_host_events(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened("?type=report")
    emit_host(r, "worker_joined", "host-1-7")
    emit(r, "default", "enqueued", new_job(), t="email")
    wanted = new_job()
    emit(r, "default", "enqueued", wanted, t="report")
    (message,) = stream.events(1)
    assert (message.data["job_id"], message.data["type"]) == (wanted, "report")


def test_a_job_filter_follows_one_job_and_still_moves_the_cursor(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    job = new_job()
    stream = opened(f"?job={job.upper()}")
    emit(r, "default", "enqueued", job, t="a")
    other = emit(r, "default", "enqueued", new_job(), t="a")
    emit(r, "default", "claimed", job, t="a", a="1")
    assert [m.event for m in stream.events(2)] == ["enqueued", "claimed"]
    last = emit(r, "default", "enqueued", new_job(), t="a")
    # Only filtered-out entries moved: an id-only message moves the cursor past them.
    deadline = time.monotonic() + DEADLINE
    while stream.last_id != last:
        assert time.monotonic() < deadline, "the cursor did not move past filtered entries"
        assert stream.next() is not None
    assert parse_id(other) < parse_id(last)


# --- resuming and gaps -----------------------------------------------------------------------


@pytest.mark.parametrize("how", ["header", "query"])
def test_a_client_resumed_from_any_id_misses_nothing_and_repeats_nothing(
    opened: Callable[..., Stream], r: redis.Redis, how: str
) -> None:
    r.sadd(K.queues, "critical")  # listed before the stream opens: it reads it from the start
    stream = opened()
    jobs = [new_job() for _ in range(6)]
    written = [
        emit(r, "critical" if i % 2 else "default", "enqueued", j) for i, j in enumerate(jobs[:4])
    ]
    written.append(emit_host(r, "worker_left", "host-2-9"))
    seen = stream.events(5)
    resume_at = seen[1].id
    stream.close()
    written.append(emit(r, "critical", "enqueued", jobs[4]))
    written.append(emit(r, "default", "enqueued", jobs[5]))
    if how == "header":
        again = opened(headers={"Last-Event-ID": resume_at})
    else:
        again = opened(f"?last_event_id={resume_at}")
    rest = again.events(5)
    assert again.quiet_for(3 * KEEPALIVE) == []
    # Each message's id names the entry it carries: its stream's position in the cursor.
    delivered = [entry_of(m) for m in seen[:2] + rest]
    assert delivered == written  # every entry once, in order: none missed, none repeated
    assert [m.data["job_id"] for m in rest if m.data.get("job_id") in jobs[4:]] == jobs[4:]


def entry_of(message: Message) -> str:
    """Return the id of the entry a message carries: on one Redis, the message's id itself."""
    assert message.id is not None
    return format_id(parse_id(message.id))


def test_the_header_wins_over_the_query_parameter(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    old = emit(r, "default", "enqueued", new_job())
    newer_job = new_job()
    newer = emit(r, "default", "enqueued", newer_job)
    header, query = old, newer
    stream = opened(f"?last_event_id={query}", headers={"Last-Event-ID": header})
    (message,) = stream.events(1)
    assert message.data["job_id"] == newer_job and message.id.endswith(newer)


def test_a_client_behind_the_cap_is_told_of_the_gap_then_gets_what_is_left(
    app: Flask, opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened()
    cursor = stream.last_id
    stream.close()
    tail = app.extensions[gateway_events.EXTENSION].tail
    wait_until(lambda: not tail.running, DEADLINE, "the tail to stop with its last reader")
    ids = [emit(r, "default", "enqueued", new_job()) for _ in range(event_tail.WINDOW + 10)]
    r.xtrim(K.fleet_events, maxlen=3, approximate=False)
    again = opened(headers={"Last-Event-ID": cursor})
    gap, *rest = again.events(4)
    assert gap.event == "gap" and gap.id is None  # the cursor stays where the client was
    assert gap.data == {"event": "gap", "from": cursor, "first": ids[-3]}
    assert [m.id for m in rest] == ids[-3:]


def test_a_live_client_that_falls_behind_is_told_too(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened("?queue=q")
    emit(r, "q", "enqueued", new_job())
    stream.events(1)
    # The test client runs the stream only when read: entries pile up unread, more than the
    # tail keeps in memory, and are trimmed.
    jobs = [new_job() for _ in range(event_tail.WINDOW + 100)]
    ids = [emit(r, "q", "enqueued", job) for job in jobs]
    r.xtrim(K.fleet_events, maxlen=5, approximate=False)
    gap, *rest = stream.events(6)
    assert gap.event == "gap" and "queue" not in gap.data and gap.data["first"] == ids[-5]
    assert [m.data["job_id"] for m in rest] == jobs[-5:]


def test_entries_the_tail_holds_reach_a_reader_even_after_redis_trimmed_them(
    app: Flask, opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened("?queue=q")
    position = parse_id(stream.last_id)
    tail = app.extensions[gateway_events.EXTENSION].tail
    wait_until(lambda: tail.entries_after(FLEET, position) == [], DEADLINE, "the tail to watch")
    jobs = [new_job() for _ in range(20)]
    for job in jobs:
        emit(r, "q", "enqueued", job)
    wait_until(
        lambda: len(tail.entries_after(FLEET, position) or []) == 20, DEADLINE, "the tail to read"
    )
    r.xtrim(K.fleet_events, maxlen=5, approximate=False)
    received = stream.events(20)
    assert [m.data["job_id"] for m in received] == jobs  # from memory: no gap, nothing lost


def test_a_trimmed_stream_the_client_kept_up_with_has_no_gap(
    opened: Callable[..., Stream], r: redis.Redis
) -> None:
    for _ in range(10):
        emit(r, "default", "enqueued", new_job())
    r.xtrim(K.fleet_events, maxlen=2, approximate=False)
    stream = opened()
    job = new_job()
    emit(r, "default", "enqueued", job)
    (message,) = stream.events(1)
    assert message.event == "enqueued" and message.data["job_id"] == job


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "1-2-3",
        "12",
        "default=1-1",
        "t5,bad queue=1",
        "t5,*=1,",
        "99999999999999999999999-0",
        "18446744073709551616-0",
        "t18446744073709551616",
        "t5," + ",".join(f"q{i}=1" for i in range(MAX_SEEN + 1)),
    ],
)
def test_a_malformed_last_event_id_is_a_400(app: Flask, cursor: str) -> None:
    for response in (
        app.test_client().get("/events", headers={"Last-Event-ID": cursor}),
        app.test_client().get("/events", query_string={"last_event_id": cursor}),
    ):
        assert response.status_code == 400
        assert response.get_json()["error"].startswith("malformed Last-Event-ID: ")


@pytest.mark.parametrize(
    ("query", "names"),
    [("queue=a%20b", "queue name"), ("type=a%20b", "type"), ("job=123", "job id")],
)
def test_a_bad_filter_is_a_400(app: Flask, query: str, names: str) -> None:
    response = app.test_client().get(f"/events?{query}")
    assert response.status_code == 400 and names in response.get_json()["error"]


# --- queues, keep-alive, bound, shutdown, outage ---------------------------------------------


def test_a_new_queue_reaches_an_unfiltered_stream_at_once(
    app: Flask, opened: Callable[..., Stream], r: redis.Redis
) -> None:
    stream = opened()
    job = new_job()
    # Not even listed: on one Redis every queue writes the one stream the tail follows.
    r.xadd(K.fleet_events, {"q": "fresh", "e": "enqueued", "j": job})
    (message,) = stream.events(1)
    assert (message.data["queue"], message.data["job_id"]) == ("fresh", job)
    tail = app.extensions[gateway_events.EXTENSION].tail
    assert tail.queue_names() == []  # the list of queues is never read on one Redis


def test_many_queues_keep_the_id_small_and_a_resume_exact(
    app: Flask, opened: Callable[..., Stream], r: redis.Redis
) -> None:
    """2,000 queues, each with a job: the id stays one stream id, and a Last-Event-ID resume
    delivers exactly the events after it (the 650-queue id used to be 14,408 bytes)."""
    queues = [f"q{i}" for i in range(2000)]
    scripts = Scripts(r, K)
    r.sadd(K.queues, *queues)  # listed, as producers list them
    stream = opened()
    for queue in queues[:1000]:
        scripts.enqueue(EnqueueRequest(type="t", payload_json="{}", queue=queue), new_job())
    seen = stream.events(1000)
    assert max(len(m.id or "") for m in seen) <= 41  # <ms>-<seq>, 20 digits each at most
    resume_at = seen[499].id
    stream.close()
    for queue in queues[1000:]:
        scripts.enqueue(EnqueueRequest(type="t", payload_json="{}", queue=queue), new_job())
    again = opened(headers={"Last-Event-ID": resume_at})
    rest = again.events(1500)
    assert again.quiet_for(3 * KEEPALIVE) == []
    assert [m.data["queue"] for m in rest] == queues[500:]  # exactly those after it, in order
    assert max(len(m.id or "") for m in rest) <= 41


def test_an_idle_stream_sends_a_keepalive_comment(opened: Callable[..., Stream]) -> None:
    stream = opened()
    started = time.monotonic()
    message = stream.next()
    assert message is not None and message.comment == "keepalive"
    assert KEEPALIVE * 0.9 <= time.monotonic() - started < DEADLINE


def test_streams_beyond_the_bound_get_503_and_a_closed_one_frees_its_slot(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    application = make_app(r, TASKFORGE_EVENTS_STREAMS="2")
    client = application.test_client()
    first = client.get("/events", buffered=False)
    second = client.get("/events", buffered=False)
    try:
        assert (first.status_code, second.status_code) == (200, 200)
        refused = client.get("/events", buffered=False)
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "5"
        assert "TASKFORGE_EVENTS_STREAMS" in refused.get_json()["error"]
        assert client.head("/events").status_code == 200  # HEAD takes no slot and no thread
        first.close()
        third = client.get("/events", buffered=False)
        assert third.status_code == 200
        third.close()
    finally:
        first.close()
        second.close()
        application.extensions[gateway_events.EXTENSION].tail.stop()


def test_streams_end_when_the_worker_stops(
    opened: Callable[..., Stream], monkeypatch: pytest.MonkeyPatch
) -> None:
    alive = [True]
    monkeypatch.setattr(gateway_events, "_worker_alive", lambda: alive[0])
    stream = opened()
    alive[0] = False  # gunicorn's worker.alive after SIGTERM or at its max_requests
    deadline = time.monotonic() + DEADLINE
    while stream.next() is not None:
        assert time.monotonic() < deadline, "the stream outlived its worker"


def test_a_stream_ends_when_redis_goes_away(
    opened: Callable[..., Stream], redis_server: RedisServer
) -> None:
    stream = opened()
    redis_server.stop()
    try:
        deadline = time.monotonic() + DEADLINE
        while stream.next() is not None:
            assert time.monotonic() < deadline, "the stream outlived Redis"
    finally:
        redis_server.start()


def test_with_redis_down_a_new_stream_is_503(app: Flask, redis_server: RedisServer) -> None:
    redis_server.stop()
    try:
        response = app.test_client().get("/events")
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    finally:
        redis_server.start()
    # The slot it took was given back.
    hub = app.extensions[gateway_events.EXTENSION]
    assert hub.slots._value == hub.limit


def test_with_a_token_the_stream_needs_it(r: redis.Redis, redis_server: RedisServer) -> None:
    application = make_app(r, TASKFORGE_API_TOKEN=TOKEN)
    client = application.test_client()
    assert client.get("/events").status_code == 401
    response = client.get("/events", headers={"Authorization": f"Bearer {TOKEN}"}, buffered=False)
    try:
        assert response.status_code == 200
    finally:
        response.close()


# --- the pieces: cursor, gap rule, memory window ---------------------------------------------


def test_a_one_redis_cursor_is_the_one_streams_id() -> None:
    assert encode_cursor({FLEET: (1764645600000, 3)}, per_queue=False) == "1764645600000-3"
    cursor = decode_cursor("1764645600000-3")
    assert cursor == Cursor(1764645600000, 3)
    assert cursor.positions([FLEET]) == {FLEET: (1764645600000, 3)}


def test_a_cluster_cursor_names_only_the_streams_of_its_millisecond() -> None:
    positions = {"low": (5, 0), FLEET: (9, 2), "critical": (9, 4), "idle": (0, 0)}
    text = encode_cursor(positions, per_queue=True)
    assert text == "t9,*=2,critical=4"
    cursor = decode_cursor(text)
    # Named streams resume after what they read; the others from the millisecond's start.
    assert cursor.positions([FLEET, "critical", "low", "new"]) == {
        FLEET: (9, 2),
        "critical": (9, 4),
        "low": (8, 2**64 - 1),
        "new": (8, 2**64 - 1),
    }


def test_a_cluster_cursor_stays_bounded_however_many_streams_share_a_millisecond() -> None:
    positions = {f"q{i}": (7, i) for i in range(5000)}
    text = encode_cursor(positions, per_queue=True)
    assert text == "t7"  # left out: a resume re-sends millisecond 7, loses nothing
    assert decode_cursor(text).positions(["q1"]) == {"q1": (6, 2**64 - 1)}
    few = encode_cursor({f"q{i}": (7, i) for i in range(MAX_SEEN)}, per_queue=True)
    assert len(few) < 8190 - 100 and decode_cursor(few).seen["q3"] == 3


def test_a_read_of_several_streams_stops_where_one_was_cut_short(r: redis.Redis) -> None:
    """A Cluster reader's cursor is its latest moment: had it sent B's 3-1 while A still held
    unread entries before it (A read only up to its count), a resume would skip those."""
    for ms in range(1, 6):
        r.xadd(K.for_queue("a").events, {"q": "a", "e": "enqueued"}, id=f"{ms}-0")
    r.xadd(K.for_queue("b").events, {"q": "b", "e": "enqueued"}, id="3-1")
    batch = read_events(r, K, {"a": ZERO, "b": ZERO}, count=2)
    assert [(e.stream, e.id) for e in batch.events] == [("a", (1, 0)), ("a", (2, 0))]
    assert batch.more and batch.until == (2, 0)
    whole = read_events(r, K, {"a": (2, 0), "b": ZERO}, count=10)
    assert [e.id for e in whole.events] == [(3, 0), (3, 1), (4, 0), (5, 0)]
    assert not whole.more and whole.until is None


@pytest.mark.parametrize(
    ("dropped", "first", "position", "lost"),
    [
        (False, (10, 0), (5, 0), False),  # nothing ever dropped: an old position lost nothing
        (True, (10, 0), (5, 0), True),  # dropped, and the client is older than what is left
        (True, (10, 0), (10, 0), False),  # the client read the oldest entry still there
        (True, (10, 0), (12, 0), False),
        (True, None, (5, 0), True),  # emptied entirely after the client's position
        (True, None, (20, 0), False),  # ... or before it (20-0 is the last id)
    ],
)
def test_the_gap_rule(
    dropped: bool, first: tuple[int, int] | None, position: tuple[int, int], lost: bool
) -> None:
    info = StreamInfo(last_generated=(20, 0), first=first, dropped=dropped, max_deleted=(0, 0))
    assert info.lost_after(position) is lost


def test_an_xdel_past_the_client_is_a_gap_even_without_a_trim() -> None:
    info = StreamInfo(last_generated=(20, 0), first=(1, 0), dropped=True, max_deleted=(7, 0))
    assert info.lost_after((6, 0)) and not info.lost_after((7, 0))


def test_a_window_serves_only_positions_it_covers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(event_tail, "WINDOW", 3)
    window = event_tail.Window(floor=(1, 0))
    for ms in range(2, 7):  # entries 2..6; the window keeps 4..6, so covers after 3
        window.add(Event(stream="q", id=(ms, 0), name="enqueued"))
    assert window.floor == (3, 0)
    assert window.after((2, 0)) is None  # entry 3 is gone from memory: read Redis
    assert [e.id for e in window.after((3, 0))] == [(4, 0), (5, 0), (6, 0)]
    assert [e.id for e in window.after((5, 0))] == [(6, 0)]
    assert window.after((9, 0)) == []  # ahead of the tail: nothing yet


def test_the_tail_survives_an_unexpected_error(r: redis.Redis) -> None:
    """A failure that is not Redis's (here: listing the queues) must not end the tail for good:
    it would stay marked running, no join would start another, and every stream would go silent.
    """
    failures = [RuntimeError("listing failed")]

    def names() -> list[str]:
        if failures:
            raise failures.pop()
        return ["mail"]

    # The tail's client is its own: the tail closes that client's pool when it ends.
    own = redis.Redis(connection_pool=redis.ConnectionPool(**r.connection_pool.connection_kwargs))
    tail = event_tail.EventTail(lambda: own, K, names, block_ms=50, per_queue=True)
    tail.join()
    try:
        # The tail retries after its pause and watches the queue...
        wait_until(lambda: tail.queue_names() == ["mail"], DEADLINE, "the tail watching mail")
        # ...and still follows it: an entry written now reaches its window.
        job_id = new_job()
        r.xadd(K.for_queue("mail").events, {"e": "enqueued", "j": job_id})
        wait_until(
            lambda: [e.job_id for e in tail.entries_after("mail", (0, 0)) or []] == [job_id],
            DEADLINE,
            "the entry in the tail's window",
        )
        assert tail.running
    finally:
        tail.leave()
        tail.stop()
