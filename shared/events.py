"""Reading the event streams: the resumable cursor, entries as events, and gaps.

The Lua scripts append one entry per transition to a capped stream (docs/EVENTS.md): one per
queue (``Keys.events``) and one for host events (``Keys.fleet_events``). A reader keeps one
position per stream; the cursor is those positions as text, ``<name>=<ms>-<seq>`` pairs joined
by ``,`` where the name is a queue or ``*`` for the fleet stream. A reader resumed from a
cursor re-reads everything after it that the streams still hold, and is told of a gap when the
cap dropped entries it had not read.

Gaps: Redis 7.0 records ``max-deleted-entry-id`` for XDEL only, not for the trimming that
``XADD MAXLEN ~`` does, so a trim is detected from ``entries-added`` > ``length`` (something
was dropped) with the reader's position older than the first entry still there. That is exact
except at one boundary: a reader that stopped on precisely the last entry dropped is told of
a gap it did not suffer (it was a full cap behind, so the warning is deserved all the same).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from shared.jobs import format_ms
from shared.keys import Keys
from shared.queues import QUEUE_PATTERN
from shared.redis_conn import is_cluster

FLEET = "*"  # the fleet stream's name in a cursor (never a queue name)
StreamId = tuple[int, int]  # (milliseconds, sequence), ordered as Redis orders entry ids
ZERO: StreamId = (0, 0)  # before every entry: a stream read from here is read whole
MAX_CURSOR_STREAMS = 1000  # pairs in one cursor (a header of some 100 kB; gunicorn allows 8 kB)
_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
# One position in a cursor; OpenAPI documents the same pattern.
CURSOR_PAIR = rf"(\*|{QUEUE_PATTERN.pattern})=(\d{{1,20}}-\d{{1,20}})"
_PAIR = re.compile(CURSOR_PAIR)
_U64 = 2**64


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


def encode_cursor(positions: Mapping[str, StreamId]) -> str:
    """Return the cursor of `positions` (stream name -> last id read), fleet stream first."""
    names = sorted(positions, key=lambda name: (name != FLEET, name))
    return ",".join(f"{name}={format_id(positions[name])}" for name in names)


def decode_cursor(text: str) -> dict[str, StreamId]:
    """Return the positions a cursor names; raise ValueError saying what is wrong with it."""
    pairs = text.strip().split(",")
    if len(pairs) > MAX_CURSOR_STREAMS:
        raise ValueError(f"more than {MAX_CURSOR_STREAMS} streams")
    positions: dict[str, StreamId] = {}
    for pair in pairs:
        match = _PAIR.fullmatch(pair)
        if match is None:
            raise ValueError(f"{pair[:80]!r} is not <queue or *>=<ms>-<seq>")
        name = match[1]
        if name in positions:
            raise ValueError(f"{name!r} is named twice")
        positions[name] = parse_id(match[2])
    return positions


def stream_key(keys: Keys, name: str) -> str:
    """Return the key of the stream a cursor calls `name` (a queue, or FLEET)."""
    return keys.fleet_events if name == FLEET else keys.for_queue(name).events


@dataclass(frozen=True)
class Event:
    """One stream entry as a client sees it."""

    stream: str  # the queue whose stream held it, or FLEET
    id: StreamId
    name: str  # the entry's `e`
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
            "queue": None if self.stream == FLEET else self.stream,
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
        """Return the gap's JSON (no queue: the fleet stream)."""
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
        return Batch(gaps, merged, any(batch.more for batch in batches))
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
    more = False
    for key, entries in read or []:
        name = by_key[key.decode() if isinstance(key, bytes) else key]
        events += [parse_entry(name, entry_id, fields) for entry_id, fields in entries]
        more = more or len(entries) >= count
    events.sort(key=lambda event: event.id)  # streams interleaved in time (ids are Redis time)
    return Batch(gaps, events, more)
