"""A job's history: the transitions its hash keeps, read for ``GET /jobs/<id>/history``.

The transition scripts write it (lua/includes/common.lua, history_add): the
``history`` field of the job's hash, one line per transition, oldest first::

    <event><actor><ms since created_at>|<attempt>|<worker id>|<error type>

with empty fields at the end left out, and event and actor one letter each (EVENTS, ACTORS).
The last field is the error's type, except in two entries of a cancel while the job runs
(DETAIL): a request names who asked, and the end of the execution it stopped says how.
An entry that ends an execution (ENDS_EXECUTION) names no attempt and no worker: they are the
claim's just before it. Past CAP entries the oldest go, and a first line ``+<n>`` counts them.
The field lives and dies with the job (the same hash, so the same retention).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.model.jobs import format_ms

CAP = 50  # HISTORY_CAP in lua/includes/common.lua


class Actor(StrEnum):
    """Who asked for a transition."""

    API = "api"
    SCHEDULER = "scheduler"
    SUPERVISOR = "supervisor"
    WORKER = "worker"


# The one-letter codes the scripts store (a transition a caller reports passes its actor's).
ACTOR_CODES = {Actor.API: "a", Actor.SCHEDULER: "s", Actor.SUPERVISOR: "v", Actor.WORKER: "w"}
ACTORS = {code: actor for actor, code in ACTOR_CODES.items()}
EVENTS = {
    "q": "enqueued",
    "s": "scheduled",
    "p": "promoted",
    "c": "claimed",
    "d": "completed",
    "r": "retrying",
    "x": "dead",
    "l": "recovered",
    "h": "released",
    "k": "canceled",
    "y": "replayed",
    "n": "cancel_requested",  # a running job was asked to stop (cancel.lua)
    "o": "canceled",  # a running job stopped for its cancel: ends the execution
    "b": "held",
}
ENDS_EXECUTION = "drxlho"  # ENDS_EXECUTION in lua/includes/common.lua
# The entries whose last field is not an error's type: which Entry field it is.
DETAIL = {"n": "by", "o": "stopped"}
ENTRY = re.compile(r"([a-z])([a-z])(-?\d+)(?:\|(\d*)(?:\|([^|]*)(?:\|(.*))?)?)?")
# A worker id is <host>-<pid>-<kind><slot>-<generation> (workerd/supervisor.py).
WORKER_ID = re.compile(r"(?P<host>.+)-\d+-[a-z]+\d+-\d+")


def host_of(worker_id: str | None) -> str | None:
    """Return the host a worker id names, or None (no worker, or an id of another shape)."""
    match = WORKER_ID.fullmatch(worker_id) if worker_id else None
    return match.group("host") if match else None


@dataclass(frozen=True)
class Entry:
    """One transition of a job."""

    event: str
    at_ms: int  # on Redis's clock
    actor: str
    attempt: int | None = None
    worker: str | None = None
    # The type of the error, for retrying and dead; for held, why: concurrency or rate (its
    # type's limit, docs/QUEUES.md "Concurrency and rate limits"), shown as `reason`.
    error: str | None = None
    by: str | None = None  # cancel_requested: who asked
    stopped: str | None = None  # canceled while running: handler, sigterm, sigkill, ...

    def to_json(self) -> dict[str, Any]:
        """Return the entry's JSON: fields that do not apply are left out, as in a job's."""
        doc: dict[str, Any] = {"event": self.event, "at": format_ms(self.at_ms)}
        optional = {
            "attempt": self.attempt,
            "worker": self.worker,
            "host": host_of(self.worker),
            "error": self.error if self.event != "held" else None,
            "reason": self.error if self.event == "held" else None,
            "by": self.by,
            "stopped": self.stopped,
        }
        doc.update({k: v for k, v in optional.items() if v is not None})
        doc["actor"] = self.actor
        return doc


@dataclass(frozen=True)
class History:
    """A job's kept transitions, oldest first, and how many older ones the cap dropped."""

    entries: list[Entry]
    dropped: int = 0

    def to_json(self) -> list[dict[str, Any]]:
        """Return the entries as JSON, oldest first."""
        return [entry.to_json() for entry in self.entries]


def parse(value: bytes | str | None, created_at_ms: int) -> History:
    """Return the history a field's value holds (None: a job from before history, none)."""
    text = value.decode() if isinstance(value, bytes) else value or ""
    lines = text.split("\n") if text else []
    dropped = 0
    if lines and lines[0].startswith("+"):
        dropped = int(lines.pop(0)[1:])
    entries: list[Entry] = []
    claim: Entry | None = None
    for line in lines:
        entry = _entry(line, created_at_ms, claim)
        if entry is None:
            continue  # not written by a script (an edit by hand): left out, not a 500
        if entry.event == "claimed":
            claim = entry
        entries.append(entry)
    return History(entries, dropped)


def _entry(line: str, created_at_ms: int, claim: Entry | None) -> Entry | None:
    match = ENTRY.fullmatch(line)
    if match is None or match.group(1) not in EVENTS or match.group(2) not in ACTORS:
        return None
    code, actor, delta, attempt, worker, last = match.groups()
    detail = {DETAIL.get(code, "error"): last or None}
    entry = Entry(
        event=EVENTS[code],
        at_ms=created_at_ms + int(delta),
        actor=str(ACTORS[actor]),
        attempt=int(attempt) if attempt else None,
        worker=worker or None,
        **detail,
    )
    if code in ENDS_EXECUTION and claim is not None:
        entry = dataclasses.replace(entry, attempt=claim.attempt, worker=claim.worker)
    return entry


def read(client: redis.Redis, keys: Keys, job_id: str, queue: str) -> History | None:
    """Return the history of a job in `queue`, or None when there is no such job (one HMGET)."""
    value, created = client.hmget(keys.for_queue(queue).job(job_id), "history", "created_at")
    return None if created is None else parse(value, int(created))
