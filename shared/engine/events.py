"""Reading the event streams: the resumable cursor, entries as events, and gaps.

The Lua scripts append one entry per transition to a capped stream (docs/EVENTS.md). On one
Redis (and Sentinel) there is one stream for every queue and the hosts (``Keys.fleet_events``),
each entry naming its queue (``q``); a Redis Cluster script touches one slot, so there each
queue has its own stream (``Keys.events``) beside the hosts' one. A reader keeps one position
per stream it reads (``FLEET`` names the global one); the cursor it hands a client is bounded
whatever the number of queues:

- one Redis: the global stream's last id read, ``<ms>-<seq>``. A resume is exact.
- Cluster: ``t<ms>`` then ``,<name>=<seq>`` for each stream whose position is in that
  millisecond, the latest of all positions (at most MAX_SEEN names; beyond, the names are left
  out and a resume re-sends that millisecond). A resume reads each stream from that moment:
  it re-sends nothing read, and misses only an entry stamped earlier than the cursor's
  millisecond yet written after the cursor was sent (a master whose clock is behind another's,
  or a transition still in flight): docs/EVENTS.md, "Resuming".

Gaps: Redis 7.0 records ``max-deleted-entry-id`` for XDEL only, not for the trimming that
``XADD MAXLEN ~`` does, so a trim is detected from ``entries-added`` > ``length`` (something
was dropped) with the reader's position older than the first entry still there. That is exact
except at one boundary: a reader that stopped on precisely the last entry dropped is told of
a gap it did not suffer (it was a full cap behind, so the warning is deserved all the same).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.connect.redis_conn import is_cluster
from shared.engine.keys import Keys
from shared.model.jobs import format_ms
from shared.model.queues import QUEUE_PATTERN
from shared.model.u64 import U64_PATTERN

FLEET = "*"  # the global stream's name (never a queue name): all events on one Redis
StreamId = tuple[int, int]  # (milliseconds, sequence), ordered as Redis orders entry ids
ZERO: StreamId = (0, 0)  # before every entry: a stream read from here is read whole
MAX_SEQ = 2**64 - 1
MAX_SEEN = 32  # streams a Cluster cursor names (some 2.8 kB; gunicorn allows 8 kB a header)
_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
_U64 = 2**64
# The two forms of a cursor, every number one Redis stream ids can hold (below 2^64, as the
# cursor is read back into ids); OpenAPI documents the same pattern, so a cursor the document
# allows is one the gateway accepts.
_NUMBER = U64_PATTERN
_SEEN = rf"(\*|{QUEUE_PATTERN.pattern})={_NUMBER}"
EVENT_CURSOR_PATTERN = rf"{_NUMBER}-{_NUMBER}|t{_NUMBER}(,{_SEEN}){{0,{MAX_SEEN}}}"
_CURSOR = re.compile(EVENT_CURSOR_PATTERN, re.ASCII)


def parse_id(text: str) -> StreamId:
    """Return a stream entry id ``<ms>-<seq>`` as a tuple; raise ValueError otherwise."""
    match = _ID.fullmatch(text)
    if match is None or int(match[1]) >= _U64 or int(match[2]) >= _U64:
        raise ValueError(f"not a stream id: {text[:48]!r}")
    return int(match[1]), int(match[2])


def format_id(stream_id: StreamId) -> str:
    """Return a stream id as Redis writes it."""
    return f"{stream_id[0]}-{stream_id[1]}"


def id_of(raw: bytes | str) -> StreamId:
    """Return the id of an entry as redis-py gives it (bytes, or text when decoding)."""
    return parse_id(raw.decode() if isinstance(raw, bytes) else raw)


def per_queue_streams(client: redis.Redis) -> bool:
    """Tell whether each queue writes its own stream (a Cluster) or all write one."""
    return is_cluster(client)


def reader_streams(per_queue: bool, queues: Iterable[str], host_events: bool) -> list[str]:
    """Return the streams a reader of `queues` (and of host events, or not) reads."""
    if not per_queue:
        return [FLEET]
    return [FLEET, *queues] if host_events else list(queues)


def stream_of(queue: str, per_queue: bool) -> str:
    """Return the name of the stream that holds a queue's events."""
    return queue if per_queue else FLEET


@dataclass(frozen=True)
class Cursor:
    """A decoded cursor: a position in the one stream, or a Cluster's moment and names."""

    ms: int
    seq: int | None = None  # one Redis's form: the global stream's id is (ms, seq)
    seen: Mapping[str, int] = field(default_factory=dict)  # Cluster: streams read into `ms`

    def positions(self, streams: Iterable[str]) -> dict[str, StreamId]:
        """Return where each of `streams` resumes: right after what the cursor covers."""
        if self.seq is not None and list(streams) == [FLEET]:
            return {FLEET: (self.ms, self.seq)}
        # A stream the cursor does not name resumes at the start of its millisecond (also
        # what a one-Redis cursor means on a Cluster, and the reverse: that millisecond again).
        start = (self.ms - 1, MAX_SEQ) if self.ms > 0 else ZERO
        return {
            name: (self.ms, self.seen[name]) if name in self.seen else start for name in streams
        }


def encode_cursor(positions: Mapping[str, StreamId], per_queue: bool) -> str:
    """Return the cursor of `positions` (stream name -> last id read), bounded in size."""
    if not per_queue:
        return format_id(positions.get(FLEET, ZERO))
    ms = max((position[0] for position in positions.values()), default=0)
    seen = sorted(name for name, position in positions.items() if position[0] == ms and ms)
    if len(seen) > MAX_SEEN:  # left out: a resume re-sends this millisecond, loses nothing
        return f"t{ms}"
    return f"t{ms}" + "".join(f",{name}={positions[name][1]}" for name in seen)


def decode_cursor(text: str) -> Cursor:
    """Return the cursor `text` states; raise ValueError saying what is wrong with it."""
    text = text.strip()
    if _CURSOR.fullmatch(text) is None:
        raise ValueError(
            f"{text[:80]!r} is neither <ms>-<seq> nor t<ms> with at most {MAX_SEEN} "
            "<queue or *>=<seq> after it, each number below 2^64"
        )
    if not text.startswith("t"):
        ms, seq = parse_id(text)
        return Cursor(ms, seq)
    head, *pairs = text.split(",")
    seen: dict[str, int] = {}
    for pair in pairs:
        name, seq_text = pair.split("=")
        # A stream named twice resumes from the earlier of its two positions: re-sending
        # what the client may have read loses nothing, skipping what it may not have would.
        seen[name] = min(int(seq_text), seen.get(name, MAX_SEQ))
    return Cursor(int(head[1:]), None, seen)


def stream_key(keys: Keys, name: str) -> str:
    """Return the key of the stream a reader calls `name` (a queue, or FLEET)."""
    return keys.fleet_events if name == FLEET else keys.for_queue(name).events


@dataclass(frozen=True)
class Event:
    """One stream entry as a client sees it."""

    stream: str  # the stream that held it: FLEET, or a queue's on a Cluster
    id: StreamId
    name: str  # the entry's `e`
    queue: str | None = None  # None: a host event
    job_id: str | None = None
    type: str | None = None
    attempt: int | None = None
    worker: str | None = None
    host: str | None = None
    reason: str | None = None  # held: why (concurrency or rate)

    def to_json(self) -> dict[str, Any]:
        """Return the event's JSON: absent fields left out, `at` from the entry id's clock."""
        doc: dict[str, Any] = {
            "event": self.name,
            "job_id": self.job_id,
            "type": self.type,
            "queue": self.queue,
            "attempt": self.attempt,
            "worker": self.worker,
            "host": self.host,
            "reason": self.reason,
            "at": format_ms(self.id[0]),
        }
        return {key: value for key, value in doc.items() if value is not None}


def parse_entry(stream: str, entry_id: bytes | str, fields: Mapping[bytes, bytes]) -> Event:
    """Return the event of one stream entry (fields as the scripts write them)."""

    def text(name: bytes) -> str | None:
        value = fields.get(name)
        return None if value is None else value.decode("utf-8", errors="replace")

    attempt = text(b"a")
    return Event(
        stream=stream,
        id=id_of(entry_id),
        name=text(b"e") or "unknown",
        queue=text(b"q") or (None if stream == FLEET else stream),
        job_id=text(b"j"),
        type=text(b"t"),
        attempt=int(attempt) if attempt and attempt.isdigit() else None,
        worker=text(b"w"),
        host=text(b"h"),
        reason=text(b"r"),
    )


@dataclass(frozen=True)
class StreamInfo:
    """What XINFO STREAM says about one stream, reduced to what gap checks need."""

    last_generated: StreamId
    first: StreamId | None  # the oldest entry still there; None when empty
    dropped: bool  # entries were trimmed or deleted since the stream began
    max_deleted: StreamId

    @classmethod
    def from_reply(cls, reply: dict[str, Any]) -> StreamInfo:
        """Read redis-py's parsed XINFO STREAM reply."""
        first = reply.get("first-entry")
        return cls(
            last_generated=id_of(reply["last-generated-id"]),
            first=id_of(first[0]) if first else None,
            dropped=int(reply.get("entries-added", 0)) > int(reply["length"]),
            max_deleted=id_of(reply.get("max-deleted-entry-id", b"0-0")),
        )

    def lost_after(self, position: StreamId) -> bool:
        """Tell whether entries after `position` were dropped before a reader got them."""
        if self.max_deleted > position:  # XDEL (Redis records those exactly)
            return True
        if not self.dropped:
            return False
        # An empty stream that dropped entries dropped everything up to its last id.
        oldest = self.first if self.first is not None else self.last_generated
        return position < oldest


@dataclass(frozen=True)
class Gap:
    """A stream dropped entries after a reader's position: `first` is the oldest still there."""

    stream: str
    since: StreamId
    first: StreamId | None

    def to_json(self) -> dict[str, Any]:
        """Return the gap's JSON (no queue: the global stream, every queue's on one Redis)."""
        doc: dict[str, Any] = {"event": "gap"}
        if self.stream != FLEET:
            doc["queue"] = self.stream
        doc["from"] = format_id(self.since)
        doc["first"] = None if self.first is None else format_id(self.first)
        return doc


@dataclass(frozen=True)
class Batch:
    """One read: the gaps found, then the events in id order; `more` when a stream had more."""

    gaps: list[Gap]
    events: list[Event]
    more: bool
    # With `more`: the id up to which every stream read was read whole (events after it were
    # left out). A reader of several streams must not pass a stream's unread entries, or a
    # cursor of its latest moment (a Cluster's) would skip them on a resume.
    until: StreamId | None = None

    def cut(self, events: list[Event]) -> list[Event]:
        """Return `events` up to `until` (all of them without a cut)."""
        if self.until is None:
            return events
        until = self.until
        return [event for event in events if event.id <= until]


def _no_stream(reply: Any) -> bool:
    return isinstance(reply, redis.exceptions.ResponseError) and "no such key" in str(reply)


def _infos(replies: Iterable[Any], names: Iterable[str]) -> dict[str, StreamInfo | None]:
    infos: dict[str, StreamInfo | None] = {}
    for name, reply in zip(names, replies, strict=True):
        if _no_stream(reply):
            infos[name] = None
        elif isinstance(reply, Exception):
            raise reply
        else:
            infos[name] = StreamInfo.from_reply(reply)
    return infos


def _parsed_info(reply: Any) -> Any:
    """Return an XINFO STREAM reply with text field names (errors and None pass through)."""
    if not isinstance(reply, dict):
        return reply
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in reply.items()}


def _parsed_read(reply: Any) -> list[tuple[Any, list[tuple[Any, dict[bytes, bytes]]]]]:
    """Return an XREAD reply as [(stream, [(id, {field: value})])] from its raw shape."""
    if not reply:
        return []
    pairs = reply.items() if isinstance(reply, dict) else reply
    return [
        (key, [(entry_id, _fields(fields)) for entry_id, fields in entries])
        for key, entries in pairs
    ]


def _fields(fields: Any) -> dict[bytes, bytes]:
    if isinstance(fields, dict):
        return fields
    return dict(zip(fields[::2], fields[1::2], strict=True))


def latest_positions(client: redis.Redis, keys: Keys, names: Iterable[str]) -> dict[str, StreamId]:
    """Return each stream's last id now (ZERO for a stream not written yet): one round trip."""
    names = list(names)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.xinfo_stream(stream_key(keys, name))
    infos = _infos(pipe.execute(raise_on_error=False), names)
    return {name: ZERO if info is None else info.last_generated for name, info in infos.items()}


def read_events(
    client: redis.Redis, keys: Keys, positions: Mapping[str, StreamId], count: int
) -> Batch:
    """Read up to `count` entries per stream after `positions`, and the gaps before them.

    One MULTI round trip: XINFO STREAM of each stream, then one XREAD of all, so a trim cannot
    fall between the check and the read. On a Redis Cluster, where a transaction cannot span
    slots (every queue's stream has its own), one MULTI per stream, merged.
    """
    if is_cluster(client) and len(positions) > 1:
        batches = [read_events(client, keys, {n: p}, count) for n, p in positions.items()]
        merged = sorted((e for b in batches for e in b.events), key=lambda event: event.id)
        gaps = [gap for batch in batches for gap in batch.gaps]
        cuts = [batch.until for batch in batches if batch.until is not None]
        batch = Batch(gaps, merged, bool(cuts), min(cuts) if cuts else None)
        return Batch(gaps, batch.cut(merged), batch.more, batch.until)
    names = list(positions)
    pipe = client.pipeline(transaction=True)
    for name in names:
        pipe.xinfo_stream(stream_key(keys, name))
    pipe.xread({stream_key(keys, name): format_id(positions[name]) for name in names}, count=count)
    *info_replies, read = pipe.execute(raise_on_error=False)
    if isinstance(read, Exception):
        raise read
    if is_cluster(client):
        # redis-py's cluster transaction hands back the replies unparsed: bytes field names,
        # XREAD as a dict of [id, [field, value, ...]] lists. The shapes of one Redis, then.
        info_replies = [_parsed_info(reply) for reply in info_replies]
        read = _parsed_read(read)
    infos = _infos(info_replies, names)
    gaps = [
        Gap(name, positions[name], info.first)
        for name, info in infos.items()
        if info is not None and info.lost_after(positions[name])
    ]
    by_key = {stream_key(keys, name): name for name in names}
    events: list[Event] = []
    cuts: list[StreamId] = []  # the last id of each stream that may hold more
    for key, entries in read or []:
        name = by_key[key.decode() if isinstance(key, bytes) else key]
        events += [parse_entry(name, entry_id, fields) for entry_id, fields in entries]
        if entries and len(entries) >= count:
            cuts.append(id_of(entries[-1][0]))
    events.sort(key=lambda event: event.id)  # streams interleaved in time (ids are Redis time)
    batch = Batch(gaps, events, bool(cuts), min(cuts) if cuts else None)
    return Batch(gaps, batch.cut(events), batch.more, batch.until)
