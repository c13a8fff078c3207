"""What the route table is made of: parameters, answers, operations; and the shared ones.

A parameter's schema is generated from its type (msgspec's JSON Schema of an ``Annotated``
type), as the bodies' are from their models; the rules come from the modules that enforce
them (imported, never copied), so the document cannot drift from the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from msgspec import Meta

from gateway import queue_page
from gateway.body import MAX_BODY_BYTES
from gateway.contract.error_models import Error
from gateway.contract.types import JobId
from gateway.inputs import DLQ_LIMIT_RANGE
from gateway.waiting import MAX_WAIT_SECONDS, WAIT_PATTERN
from shared.engine.queries import CURSOR_PATTERN
from shared.model.jobs import TYPE_PATTERN, JobState
from shared.model.queues import QUEUE_PATTERN
from shared.model.schedules import NAME_PATTERN
from shared.read import listing, listing_states, throughput
from shared.read.hosts import HOST_NAME_PATTERN

HOST_EXAMPLE = "worker-1-4242"  # a registry name as GET /workers shows one
SCHEDULE_EXAMPLE = "nightly-report"  # the schedule path parameter's example
STATES = [str(state) for state in JobState]


def whole(pattern: str) -> Any:
    """Return the type of a string that matches `pattern` whole."""
    return Annotated[str, Meta(pattern=f"^{pattern}$")]


@dataclass(frozen=True)
class Param:
    """One parameter of an operation: where it goes, its type, and what to tell a reader."""

    name: str
    where: str  # "path", "query" or "header"
    kind: Any  # a type msgspec renders as JSON Schema
    description: str | None = None
    default: Any = None  # shown in the schema; None: no default
    example: str | None = None


@dataclass(frozen=True)
class Answer:
    """One answer of an operation: what it means and what its body is."""

    description: str
    model: type | str | None = Error  # a contract model or a component's name; None: no body
    headers: dict[str, type] = field(default_factory=dict)
    media: str = "application/json"
    schema: dict[str, Any] | None = None  # an inline schema, instead of a model


@dataclass(frozen=True)
class Shared:
    """An answer many operations give, declared once (components/responses)."""

    status: str
    answer: Answer


@dataclass(frozen=True)
class Operation:
    """One route of the gateway: method, path, what it takes and every answer it gives."""

    method: str
    path: str
    op_id: str
    summary: str
    # status -> its answer, or the name of a Shared one (see `use`)
    answers: dict[str, Answer | str]
    params: tuple[Param | str, ...] = ()  # inline, or the name of a shared one
    body: type | str | None = None  # a request model or a component's name
    body_required: bool = True
    public: bool = False  # no token needed, whatever the gateway's setting


def retrying(description: str) -> Answer:
    """Return an error answer that says when to try again (Retry-After, seconds)."""
    return Answer(description, headers={"Retry-After": int})


PARAMETERS: dict[str, Param] = {
    "JobId": Param("job_id", "path", JobId),
    "Limit": Param(
        "limit",
        "query",
        Annotated[int, Meta(ge=DLQ_LIMIT_RANGE[0], le=DLQ_LIMIT_RANGE[1])],
        default=DLQ_LIMIT_RANGE[1],
    ),
    "Wait": Param(
        "wait",
        "query",
        Annotated[str, Meta(pattern=WAIT_PATTERN, examples=["30s"])],
        "Answer once the job is completed, dead or canceled, or when this much time has "
        "passed (then with the job as it is): seconds (2.5) or a duration (500ms, 30s, 1m), "
        f"at most {MAX_WAIT_SECONDS} s; ask again to wait longer. Absent or 0: answer at once. "
        "docs/API.md.",
    ),
    "Cursor": Param(
        "cursor",
        "query",
        whole(CURSOR_PATTERN.pattern),
        "The next_cursor of the previous page, as it was returned.",
    ),
    "QueueName": Param("name", "path", whole(QUEUE_PATTERN.pattern), example="critical"),
    "QueueLimit": Param(
        "limit",
        "query",
        Annotated[int, Meta(ge=1, le=queue_page.MAX_LIMIT)],
        "Queues per page: every queue is listed (and the totals read live) while they fit; "
        "past that, about this many per page.",
        default=queue_page.DEFAULT_LIMIT,
    ),
    "QueueCursor": Param(
        "cursor",
        "query",
        Annotated[str, Meta(pattern=queue_page.CURSOR_PATTERN)],
        "The next_cursor of the previous page, as it was returned.",
    ),
    "QueueSearch": Param(
        "q",
        "query",
        Annotated[str, Meta(min_length=1, max_length=queue_page.SEARCH_MAX)],
        "Only queues whose name contains this.",
    ),
    "TypeName": Param("job_type", "path", whole(TYPE_PATTERN.pattern), example="generate_pdf"),
    "HostName": Param(
        "name",
        "path",
        whole(HOST_NAME_PATTERN.pattern),
        "A workerd host's registry name, <hostname>-<pid> (GET /workers).",
        example=HOST_EXAMPLE,
    ),
    "IdempotencyKey": Param(
        "Idempotency-Key",
        "header",
        Annotated[str, Meta(pattern="^[\\x21-\\x7e]{1,255}$")],
        "Same key and body within the key's TTL: 200 with the job (or a batch's jobs) the "
        "first request created; the same key with another body: 409.",
    ),
    "State": Param(
        "state",
        "query",
        Annotated[str, Meta(extra_json_schema={"enum": STATES})],
        "The state to list, in its own order. Absent: every state, in lifecycle order "
        "(processing, pending, scheduled, retrying, completed, dead, canceled), each in its "
        "own order; each job's status says its state.",
    ),
    "Queue": Param(
        "queue",
        "query",
        whole(QUEUE_PATTERN.pattern),
        "One queue, any listed one. Absent: all queues while there are at most "
        f"{listing.EVERY_QUEUE_CAP}; past that a bounded set (the reply's every_queue is "
        "false): the queues hosts serve and, for a listing, the busiest (and the soonest "
        "due, for scheduled). docs/API.md.",
    ),
    "JobType": Param(
        "type",
        "query",
        whole(TYPE_PATTERN.pattern),
        f"Only jobs of this type; a page examines at most {listing.TYPE_SCAN_MAX} entries "
        "per queue, so it may hold fewer than limit jobs (even none) and still give a "
        "next_cursor.",
    ),
    "ListLimit": Param(
        "limit",
        "query",
        Annotated[int, Meta(ge=listing.LIMIT_RANGE[0], le=listing.LIMIT_RANGE[1])],
        default=listing.DEFAULT_LIMIT,
    ),
    "Minutes": Param(
        "minutes",
        "query",
        Annotated[int, Meta(ge=1, le=throughput.MAX_MINUTES)],
        "How many minutes, the current one last.",
        default=throughput.MAX_MINUTES,
    ),
    "ListCursor": Param(
        "cursor",
        "query",
        whole(f"(?:{listing_states.PLACE_PATTERN.pattern})"),
        "The next_cursor of the previous page of the same listing, as returned (opaque).",
    ),
    "ScheduleName": Param("name", "path", whole(NAME_PATTERN.pattern), example=SCHEDULE_EXAMPLE),
}

SHARED: dict[str, Shared] = {
    "BadRequest": Shared("400", Answer("Malformed or invalid input; the message says what.")),
    "Unauthorized": Shared(
        "401",
        Answer(
            "Missing or wrong bearer token (when TASKFORGE_API_TOKEN is set).",
            headers={"WWW-Authenticate": str},
        ),
    ),
    "TooManyFailures": Shared(
        "429",
        retrying(
            "Too many failed authentications from this client address (gateway/lockout.py): "
            "refused, right token or not, for Retry-After seconds."
        ),
    ),
    "NotFound": Shared("404", Answer('No such job: {"error": "job not found"}.')),
    "HostNotFound": Shared(
        "404", Answer('No live workerd host has that name: {"error": "workerd host not found"}.')
    ),
    "Conflict": Shared("409", Answer("The job is not in a state this action starts from.")),
    "QueueNotFound": Shared(
        "404", Answer('No queue of that name is listed: {"error": "queue not found"}.')
    ),
    "QueueKept": Shared(
        "409",
        Answer(
            "The queue is kept: it holds jobs (counts in `jobs`), is paused or limited, a "
            "workerd host serves it (`served_by`), or it is the default queue."
        ),
    ),
    "TooLarge": Shared(
        "413", Answer(f"Body over {MAX_BODY_BYTES} bytes; refused without reading it.")
    ),
    "Unsupported": Shared("415", Answer("A Content-Encoding other than identity.")),
    "Unavailable": Shared(
        "503", retrying("Redis is unreachable; try again after Retry-After seconds.")
    ),
    "ScheduleNotFound": Shared(
        "404", Answer('No published schedule has that name: {"error": "schedule not found"}.')
    ),
}


def use(*names: str) -> dict[str, str]:
    """Return the answers of these shared responses, by their status."""
    return {SHARED[name].status: name for name in names}
