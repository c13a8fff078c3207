"""The job: its states, the validation of an enqueue request, and its JSON shape."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from fractions import Fraction
from typing import Annotated, Any

import msgspec
from msgspec import Meta

# The enqueue body's timeout takes every form an environment duration takes (500ms, 2s, 1m,
# 1h, 1d, bare seconds): one parser, so the two cannot drift apart.
from shared.model.durations import duration_parser
from shared.model.job_ids import CLIENT_ID_PATTERN, client_id_problem
from shared.model.queues import DEFAULT_QUEUE, QUEUE_PATTERN, QUEUE_RULE, is_queue_name


class JobState(StrEnum):
    """The canonical state strings; each names the index that holds jobs in that state."""

    PENDING = "pending"
    SCHEDULED = "scheduled"
    PROCESSING = "processing"
    RETRYING = "retrying"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELED = "canceled"


TYPE_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
# Version 4 (the server's ids) or 8 (a client's, shared.model.job_ids): both are job ids.
JOB_ID_PATTERN = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[48][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
)
# Priorities are Redis zset scores (doubles): anything within ±2^31 is exact and ordered.
PRIORITY_LIMIT = 2**31
MAX_RETRIES_RANGE = (1, 100)
DEFAULT_MAX_RETRIES = 3
# A week: longer per-job limits are almost always a unit mistake (ms given as seconds).
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600
# A leap year: "the same day next year" fits; more is likelier a unit mistake than a plan.
MAX_DELAY_SECONDS = 366 * 24 * 3600
# The text of a duration: a decimal with at most 9 decimals, then a unit (none: seconds). The
# forms of shared.settings.config's parser; the bounds are weighed in exact fractions, so 7.000000001d
# is refused however a float would round it.
DURATION_PATTERN = r"^[0-9]+(\.[0-9]{1,9})?(ms|s|m|h|d)?$"
_DURATION_TEXT = re.compile(r"([0-9]+(?:\.[0-9]{1,9})?)(ms|s|m|h|d)?", re.ASCII)
_UNIT_SECONDS = {"ms": Fraction(1, 1000), "s": Fraction(1), "m": Fraction(60)}
_UNIT_SECONDS |= {"h": Fraction(3600), "d": Fraction(86400), None: Fraction(1)}
# The bounds are checked in _seconds (and the number bounds): the parser only reads.
_parse_duration = duration_parser(positive=False)
TIMEOUT_RULE = (
    "must be seconds (a number) or a duration such as 500ms, 2s, 1m, 1h or 1d, "
    f"above 0 and at most {MAX_TIMEOUT_SECONDS} seconds (7d), with at most 9 decimals"
)
DELAY_RULE = (
    "must be seconds (a number) or a duration such as 500ms, 2s, 1m, 1h or 1d, "
    f"from 0 to {MAX_DELAY_SECONDS} seconds (366d), with at most 9 decimals"
)
# A handler's traceback is kept with its job up to this many bytes (UTF-8), cut from the start:
# the innermost frames and the exception line, at its end, are what explains a failure.
TRACEBACK_LIMIT = 8 * 1024

REQUEST_FIELDS = frozenset(
    {
        "id",
        "type",
        "payload",
        "priority",
        "max_retries",
        "scheduled_at",
        "delay",
        "timeout",
        "queue",
    }
)
LIFECYCLE_FIELDS = frozenset(
    {
        "status",
        "attempts",
        "recoveries",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "next_retry_at",
        "last_error",
        "traceback",
        "result",
        "token",
        "worker_id",
        "cancel_requested_at",
        "cancel_requested_by",
    }
)


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of a request."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ValidationError(ValueError):
    """Raised when an enqueue request is invalid; carries every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


@dataclass(frozen=True)
class EnqueueRequest:
    """A validated enqueue request, normalised for storage and idempotency comparison."""

    type: str
    payload_json: str
    priority: int = 0
    max_retries: int = DEFAULT_MAX_RETRIES
    scheduled_at_ms: int | None = None
    timeout: float | None = None
    queue: str = DEFAULT_QUEUE
    # Run this long after Redis's clock at enqueue (enqueue.lua adds it); never with
    # scheduled_at_ms, which is the client's absolute time.
    delay_ms: int | None = None
    # The job id the client chose (version 8, its queue's tag: shared.model.job_ids), or None
    # for one the server makes. Not part of what the job means: canonical() leaves it out.
    id: str | None = None

    def canonical(self) -> str:
        """Return one string that is equal for two requests exactly when they mean the same."""
        doc: dict[str, Any] = {
            "type": self.type,
            "payload": json.loads(self.payload_json),
            "priority": self.priority,
            "max_retries": self.max_retries,
            "scheduled_at_ms": self.scheduled_at_ms,
            "timeout": self.timeout,
            "queue": self.queue,
        }
        # Only when given: a request without one keeps the digest it had before delays existed,
        # so an Idempotency-Key reserved then still matches its repeat.
        if self.delay_ms is not None:
            doc["delay_ms"] = self.delay_ms
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def digest(self) -> str:
        """Return the hash that tells a repeat of this request from another under the same
        Idempotency-Key or client id: equal exactly when canonical() is."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def scheduled_at_for(self, created_at_ms: int) -> int | None:
        """Return the scheduled_at the job stores, given its created_at (Redis's now)."""
        if self.delay_ms is None:
            return self.scheduled_at_ms
        return created_at_ms + self.delay_ms


# One encoder for every call: json.dumps with arguments of its own builds a JSONEncoder each
# time, half the cost of a small value's dump (a worker dumps each job's result). It holds only
# its settings, so threads share it as json.dumps shares its default one.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dump_json(value: Any) -> str:
    """Serialise a payload or result compactly; refuses NaN and Infinity (not JSON)."""
    return _COMPACT.encode(value)


def _integer(value: Any) -> int | None:
    """Return `value` as an int when JSON Schema calls it an integer, else None."""
    # JSON Schema's integer is any number without a fraction, so 8.0 is one: clients that hold
    # numbers as doubles (JavaScript, Go's float64) may write it so. bool is a Python int, but
    # `true` is not a priority.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)
# 9999-12-31T23:59:59.999Z: a later moment (9999-12-31T23:59:59-00:01) has no RFC 3339 form
# to answer with, and formatting it failed every read of the job with a 500.
LATEST_MS = 253_402_300_799_999


def parse_rfc3339_ms(text: str) -> int:
    """Return epoch milliseconds for an RFC 3339 timestamp that names its zone."""
    # fromisoformat alone also takes ISO 8601 forms RFC 3339 excludes (week dates, no seconds).
    if not isinstance(text, str) or not RFC3339.fullmatch(text):
        raise ValueError("must be an RFC 3339 timestamp with a zone, such as 2026-08-19T15:30:00Z")
    date, _, rest = text.upper().partition("T")
    fraction = re.search(r"\.(\d+)", rest)
    if fraction:  # Python takes at most 6 fractional digits; milliseconds need only 3
        rest = rest.replace(fraction.group(0), "." + fraction.group(1)[:6].ljust(6, "0"))
    moment = datetime.fromisoformat(f"{date}T{rest.replace('Z', '+00:00')}")
    return math.floor(moment.timestamp() * 1000)


def _shown(value: Any) -> str:
    """Return a refused value as the client wrote it (JSON), cut short: errors quote, not echo."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _duration_text(most: int) -> dict[str, Any]:
    """Return the document's schema of a duration text: its shape, and its bound (parsed)."""
    # The bound goes in an extension keyword: a regex that weighs numbers was 2,000 characters.
    return {"pattern": DURATION_PATTERN, "x-maximum-seconds": most}


def _scheduled_at_pattern() -> str:
    """Return the pattern of the date-times parse_scheduled_at accepts (for the document).

    On top of RFC 3339 it refuses a moment before 1970-01-01T00:00:00Z or after
    9999-12-31T23:59:59.999Z, a leap second, and more than 9 fractional digits. On the first
    and the last day an offset can cross those bounds; a regex cannot weigh the time against
    the offset, so there only the offsets that cannot cross are documented.
    """
    time = r"[Tt]\d{2}:\d{2}:[0-5]\d(\.\d{1,9})?"
    years = r"(19[89]\d|197[1-9]|[2-8]\d{3}|9[0-8]\d{2}|99[0-8]\d|999[0-8])-\d{2}-\d{2}"
    in_1970 = r"1970-(0[2-9]|1[0-2])-\d{2}|1970-01-(0[2-9]|[12]\d|3[01])"
    in_9999 = r"9999-(0\d|1[01])-\d{2}|9999-12-([0-2]\d|30)"
    first_day = rf"1970-01-01{time}([Zz]|-\d{{2}}:\d{{2}}|\+00:00)"
    last_day = rf"9999-12-31{time}([Zz]|\+\d{{2}}:\d{{2}}|-00:00)"
    any_zone = r"([Zz]|[+-]\d{2}:\d{2})"
    return rf"^(({years}|{in_1970}|{in_9999}){time}{any_zone}|{first_day}|{last_day})$"


SCHEDULED_AT_PATTERN = _scheduled_at_pattern()


def _whole(low: int, high: int) -> Any:
    """Return the type of a JSON Schema integer from `low` to `high`: 8.0 is one too (clients
    that hold numbers as doubles write it so). The document shows it as an integer."""
    return Annotated[float, Meta(ge=low, le=high, multiple_of=1)]


class EnqueueBody(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A job to enqueue: the body of ``POST /enqueue``, one of a batch's, a schedule's job.

    The one declaration of the request: validate_enqueue converts a body through it, and the
    OpenAPI document's EnqueueRequest is generated from it (gateway/contract).
    """

    # Patterns are only documented here (Meta's pattern searches, so its `$` would let a
    # trailing newline through): _converted matches them whole.
    id: Annotated[
        str | None,
        Meta(
            description="The job's id, chosen by the client so that a retried enqueue finds "
            "the job its first try made: a UUID of version 8, its first 8 hex digits its "
            "queue's tag (BLAKE2b of the queue's UTF-8 name, 4-byte digest, in hex; a 400 "
            "names the tag). The same id and body again: 200 with that job; another body: "
            "409. Remembered while the job exists, and at least 5 minutes after it finished. "
            "Null or none: the server makes one.",
            extra_json_schema={
                "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-8[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}"
                "-[0-9a-fA-F]{12}$"
            },
        ),
    ] = None
    type: Annotated[str, Meta(extra_json_schema={"pattern": f"^{TYPE_PATTERN.pattern}$"})]
    queue: Annotated[
        str,
        Meta(
            extra_json_schema={"pattern": f"^{QUEUE_PATTERN.pattern}$", "maxLength": 64},
            description="The queue it waits in; the workers that serve it run it.",
        ),
    ] = DEFAULT_QUEUE
    payload: Annotated[
        dict[str, Any], Meta(description="A JSON object, handed to the handler; absent means {}.")
    ] = {}
    priority: _whole(-PRIORITY_LIMIT, PRIORITY_LIMIT) = 0
    max_retries: _whole(*MAX_RETRIES_RANGE) = DEFAULT_MAX_RETRIES
    # Checked by parse_scheduled_at; the pattern only documents it.
    scheduled_at: Annotated[
        str | None,
        Meta(
            description="When to run it: RFC 3339 with a zone, from 1970-01-01T00:00:00Z to "
            "9999-12-31T23:59:59.999Z, on the client's clock. A moment already past, null or "
            "none: now. Or give `delay` instead (not both).",
            extra_json_schema={"format": "date-time", "pattern": SCHEDULED_AT_PATTERN},
        ),
    ] = None
    delay: Annotated[
        Annotated[float, Meta(ge=0, le=MAX_DELAY_SECONDS)]
        | Annotated[str, Meta(extra_json_schema=_duration_text(MAX_DELAY_SECONDS))]
        | None,
        Meta(
            description="Run it this long after enqueue, counted on Redis's clock (a "
            "producer's clock does not move it): seconds (a number) or a duration (500ms, 2s, "
            "1m, 1h, 1d, bare seconds as text), from 0 (now) to 366 days, kept in whole "
            "milliseconds. The job shows the resulting `scheduled_at`. Null or none: no "
            "delay. Not with `scheduled_at`."
        ),
    ] = None
    timeout: Annotated[
        Annotated[float, Meta(gt=0, le=MAX_TIMEOUT_SECONDS)]
        | Annotated[str, Meta(extra_json_schema=_duration_text(MAX_TIMEOUT_SECONDS))]
        | None,
        Meta(
            description="Seconds (a number), or a duration as the environment takes one "
            "(500ms, 2s, 1m, 1h, 1d, bare seconds as text): above 0, at most 7 days. The job "
            "shows it in seconds."
        ),
    ] = None


def _converted(body: dict[str, Any]) -> EnqueueRequest | None:
    """Return the request of a body the model and the parsers accept, else None."""
    try:
        given = msgspec.convert(body, EnqueueBody)
    except (msgspec.ValidationError, TypeError, ValueError):
        return None
    return request_from(given)


def request_from(given: EnqueueBody) -> EnqueueRequest | None:
    """Return the request of a body the model accepted, or None when a parser refuses it
    (a pattern matched whole, a duration, a date-time: what a JSON Schema type cannot say)."""
    try:
        if given.delay is not None and given.scheduled_at is not None:
            return None
        if not (TYPE_PATTERN.fullmatch(given.type) and is_queue_name(given.queue)):
            return None
        job_id = None if given.id is None else given.id.lower()
        if job_id is not None and client_id_problem(job_id, given.queue) is not None:
            return None
        return EnqueueRequest(
            type=given.type,
            payload_json=dump_json(given.payload),
            priority=int(given.priority),
            max_retries=int(given.max_retries),
            scheduled_at_ms=None
            if given.scheduled_at is None
            else parse_scheduled_at(given.scheduled_at),
            timeout=None if given.timeout is None else parse_timeout(given.timeout),
            queue=given.queue,
            delay_ms=None if given.delay is None else parse_delay(given.delay),
            id=job_id,
        )
    except (TypeError, ValueError):
        return None


def validate_enqueue(body: Any) -> EnqueueRequest:
    """Validate the body of ``POST /enqueue``; raise ValidationError naming every bad field."""
    # Through the model: one C-level pass for the common, valid body. A refused one goes
    # through the field checks below, which name every problem (the model stops at the first).
    if type(body) is dict and (request := _converted(body)) is not None:
        return request
    return _checked(body)


def _checked(body: Any) -> EnqueueRequest:
    """Check a body field by field; raise ValidationError naming every bad one."""
    if not isinstance(body, Mapping):
        raise ValidationError([FieldError("body", "must be a JSON object")])
    errors: list[FieldError] = []
    # One entry per field, so a client matching on field names finds each.
    for name in sorted(set(body) & LIFECYCLE_FIELDS):
        errors.append(FieldError(name, "set by the server and cannot be given by a client"))
    for name in sorted(set(body) - REQUEST_FIELDS - LIFECYCLE_FIELDS):
        errors.append(FieldError(name, "unknown field"))

    job_type = body.get("type")
    if job_type is None:
        errors.append(FieldError("type", "is required"))
    elif not isinstance(job_type, str):
        errors.append(FieldError("type", f"must be a string, not {_shown(job_type)}"))
    elif not TYPE_PATTERN.fullmatch(job_type):
        errors.append(FieldError("type", "must be 1-128 characters of A-Z a-z 0-9 _ . : -"))

    payload_json = "{}"  # absent means an empty object: a handler always gets a mapping
    if "payload" in body:
        if not isinstance(body["payload"], Mapping):
            errors.append(FieldError("payload", "must be a JSON object"))
        else:
            try:
                payload_json = dump_json(body["payload"])
            except (TypeError, ValueError):
                errors.append(FieldError("payload", "must be JSON (no NaN or Infinity)"))

    priority = _integer(given := body.get("priority", 0))
    if priority is None or not -PRIORITY_LIMIT <= priority <= PRIORITY_LIMIT:
        errors.append(
            FieldError("priority", f"must be an integer from -2^31 to 2^31, not {_shown(given)}")
        )

    max_retries = _integer(given := body.get("max_retries", DEFAULT_MAX_RETRIES))
    low, high = MAX_RETRIES_RANGE
    if max_retries is None or not low <= max_retries <= high:
        errors.append(
            FieldError(
                "max_retries", f"must be an integer from {low} to {high}, not {_shown(given)}"
            )
        )

    scheduled_at_ms, delay_ms, when_errors = _when(body)
    errors += when_errors

    timeout = None
    if body.get("timeout") is not None:
        try:
            timeout = parse_timeout(body["timeout"])
        except ValueError as exc:
            errors.append(FieldError("timeout", str(exc)))

    queue = body.get("queue", DEFAULT_QUEUE)
    if not is_queue_name(queue):
        errors.append(FieldError("queue", f"{QUEUE_RULE}, not {_shown(queue)}"))

    job_id, problem = _client_id(body.get("id"), queue)
    if problem is not None:
        errors.append(FieldError("id", problem))

    if errors:
        raise ValidationError(errors)
    return EnqueueRequest(
        type=job_type,
        payload_json=payload_json,
        priority=priority,
        max_retries=max_retries,
        scheduled_at_ms=scheduled_at_ms,
        timeout=timeout,
        queue=queue,
        delay_ms=delay_ms,
        id=job_id,
    )


def _client_id(given: Any, queue: Any) -> tuple[str | None, str | None]:
    """Return (the client's job id in lower case or None, why it is refused or None)."""
    if given is None:
        return None, None
    if not isinstance(given, str):
        return None, f"must be a string, not {_shown(given)}"
    job_id = given.lower()
    if not is_queue_name(queue):  # the queue's own error says why; its tag cannot be checked
        return job_id, None if CLIENT_ID_PATTERN.fullmatch(job_id) else client_id_problem(
            job_id, DEFAULT_QUEUE
        )
    return job_id, client_id_problem(job_id, queue)


_EITHER = (("delay", "scheduled_at"), ("scheduled_at", "delay"))


def _when(body: Mapping[str, Any]) -> tuple[int | None, int | None, list[FieldError]]:
    """Return (scheduled_at ms, delay ms, errors) of a body: at most one of the two is given."""
    given_at, given_delay = body.get("scheduled_at"), body.get("delay")  # null: not given
    if given_at is not None and given_delay is not None:
        # One entry per field, so a client matching on field names finds each.
        both = "cannot be given with {}: give one of the two"
        refused = [FieldError(name, both.format(other)) for name, other in _EITHER]
        return None, None, refused
    try:
        if given_delay is not None:
            return None, parse_delay(given_delay), []
        if given_at is not None:
            return parse_scheduled_at(given_at), None, []
    except ValueError as exc:
        name = "delay" if given_delay is not None else "scheduled_at"
        return None, None, [FieldError(name, str(exc))]
    return None, None, []


def parse_scheduled_at(value: Any) -> int:
    """Return epoch milliseconds of a scheduled_at: RFC 3339 with a zone, 1970 to 9999."""
    try:
        scheduled_at_ms = parse_rfc3339_ms(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(str(exc) or "is not a valid timestamp") from None
    if not 0 <= scheduled_at_ms <= LATEST_MS:  # before 1970 means "now" anyway
        raise ValueError("must be from 1970 to 9999-12-31T23:59:59.999Z")
    return scheduled_at_ms


def _seconds(value: Any, *, above_zero: bool, most: int) -> float:
    """Return the seconds of a number or a duration text within (0 or above 0) to `most`;
    NaN for anything else."""
    if isinstance(value, str):
        match = _DURATION_TEXT.fullmatch(value)
        if not match:
            return math.nan
        exact = Fraction(match[1]) * _UNIT_SECONDS[match[2]]
        if exact > most or (above_zero and exact == 0):
            return math.nan
        return _parse_duration(value)  # the very float the environment's parser gives
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):  # an integer past any float
            return float(value)
    return math.nan


def parse_timeout(value: Any) -> float:
    """Return a job timeout in seconds: a number of seconds or a duration text such as "5s"."""
    seconds = _seconds(value, above_zero=True, most=MAX_TIMEOUT_SECONDS)
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_SECONDS):
        raise ValueError(TIMEOUT_RULE)
    return seconds


def parse_delay(value: Any) -> int:
    """Return a delay in whole milliseconds (Redis's clock's unit, rounded to the nearest): a
    number of seconds or a duration text such as "5m"."""
    seconds = _seconds(value, above_zero=False, most=MAX_DELAY_SECONDS)
    if not (math.isfinite(seconds) and 0 <= seconds <= MAX_DELAY_SECONDS):
        raise ValueError(DELAY_RULE)
    return round(seconds * 1000)


def cap_traceback(text: str, limit: int = TRACEBACK_LIMIT) -> str:
    """Return a traceback within `limit` UTF-8 bytes: its end kept, and a first line saying so."""
    data = text.encode()
    if len(data) <= limit:
        return text
    # The note's length depends on the number it holds: reserve room for the largest.
    budget = limit - len(_cut_note(limit, len(data)).encode())
    tail = data[len(data) - budget :]
    # Start on a whole frame (its "File" line), else on a whole line, when the tail has one.
    for mark in (b'\n  File "', b"\n"):
        start = tail.find(mark)
        if 0 <= start < len(tail) - len(mark):
            tail = tail[start + 1 :]
            break
    kept = tail.decode(errors="ignore")  # a character cut in two at the start is dropped
    return _cut_note(limit, len(data) - len(kept.encode())) + kept


def _cut_note(limit: int, cut_bytes: int) -> str:
    return f"[traceback cut to {limit} bytes: its first {cut_bytes} bytes are left out]\n"


def wall_clock_ms() -> int:
    """Return this host's wall clock in epoch milliseconds (Redis's clock decides what the
    scripts record; this one names what a process saw or sent: docs/RELIABILITY.md)."""
    return time.time_ns() // 1_000_000


# The jobs of a batch share a few milliseconds: strftime once per distinct stamp, not per job.
@functools.lru_cache(maxsize=1024)
def format_ms(ms: int | None) -> str | None:
    """Return epoch milliseconds as RFC 3339 UTC with millisecond precision."""
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    # strftime's %Y does not pad years before 1000; RFC 3339 needs four digits.
    return f"{moment.year:04d}-" + moment.strftime("%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _text(raw: Mapping[bytes, bytes], name: str) -> str | None:
    value = raw.get(name.encode())
    return None if value is None else value.decode()


def _int(raw: Mapping[bytes, bytes], name: str) -> int | None:
    value = raw.get(name.encode())
    return None if value is None else int(value)


@dataclass(frozen=True)
class Job:
    """One job's metadata as stored in its Redis hash."""

    id: str
    type: str
    status: JobState
    priority: int
    max_retries: int
    attempts: int
    recoveries: int
    payload_json: str
    created_at: int
    updated_at: int
    token: int = 0
    scheduled_at: int | None = None
    started_at: int | None = None
    finished_at: int | None = None
    next_retry_at: int | None = None
    last_error: str | None = None
    traceback: str | None = None
    result_json: str | None = None
    timeout: float | None = None
    worker_id: str | None = None
    # A request to stop the job while it ran (cancel.lua): when, and who asked ("" for nobody
    # named). It stays once the job ended, whichever way.
    cancel_requested_at: int | None = None
    cancel_requested_by: str | None = None
    # The key a job's hash lives under names its queue; the hash does not repeat it.
    queue: str = DEFAULT_QUEUE
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def from_hash(
        cls, raw: Mapping[bytes, bytes], job_id: str = "", queue: str = DEFAULT_QUEUE
    ) -> Job:
        """Build a Job from HGETALL output (bytes keys and values) of the key of `job_id`.

        A completed job's hash has no ``id`` field (complete.lua drops it: the key holds it).
        """
        timeout = _text(raw, "timeout")
        return cls(
            id=_text(raw, "id") or job_id,
            type=_text(raw, "type") or "",
            status=JobState(_text(raw, "status")),
            priority=_int(raw, "priority") or 0,
            max_retries=_int(raw, "max_retries") or DEFAULT_MAX_RETRIES,
            attempts=_int(raw, "attempts") or 0,
            recoveries=_int(raw, "recoveries") or 0,
            payload_json=_text(raw, "payload") or "{}",
            created_at=_int(raw, "created_at") or 0,
            updated_at=_int(raw, "updated_at") or 0,
            token=_int(raw, "token") or 0,
            scheduled_at=_int(raw, "scheduled_at"),
            started_at=_int(raw, "started_at"),
            finished_at=_int(raw, "finished_at"),
            next_retry_at=_int(raw, "next_retry_at"),
            last_error=_text(raw, "last_error"),
            traceback=_text(raw, "traceback"),
            result_json=_text(raw, "result"),
            timeout=float(timeout) if timeout is not None else None,
            worker_id=_text(raw, "worker_id"),
            cancel_requested_at=_int(raw, "cancel_requested_at"),
            cancel_requested_by=_text(raw, "cancel_requested_by"),
            queue=queue,
        )

    @property
    def payload(self) -> Any:
        """Return the decoded payload."""
        return json.loads(self.payload_json)

    def to_json(self) -> dict[str, Any]:
        """Return the job's public JSON shape; optional fields only when they apply.

        ``traceback`` is always there (null when the last failure had none, or none failed).
        """
        doc: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "queue": self.queue,
            "status": str(self.status),
            "priority": self.priority,
            "max_retries": self.max_retries,
            "attempts": self.attempts,
            "recoveries": self.recoveries,
            "payload": self.payload,
            "created_at": format_ms(self.created_at),
            "updated_at": format_ms(self.updated_at),
            "traceback": self.traceback,
        }
        optional = {
            "scheduled_at": format_ms(self.scheduled_at),
            "started_at": format_ms(self.started_at),
            "finished_at": format_ms(self.finished_at),
            "next_retry_at": format_ms(self.next_retry_at),
            "last_error": self.last_error,
            "result": json.loads(self.result_json) if self.result_json is not None else None,
            "timeout": self.timeout,
            "cancel_requested_at": format_ms(self.cancel_requested_at),
            "cancel_requested_by": self.cancel_requested_by or None,
        }
        doc.update({k: v for k, v in optional.items() if v is not None})
        if self.result_json == "null":
            doc["result"] = None
        return doc
