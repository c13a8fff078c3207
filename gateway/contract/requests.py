"""Request bodies: what a client sends."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from gateway.contract.queue_models import Concurrency, NullableRate
from gateway.contract.types import JobId, JobType, QueueName, said, whole_number
from shared.model.jobs import EnqueueBody
from shared.read import bulk, listing

MAX_BATCH = 1000  # jobs in one POST /enqueue/batch
CANCEL_BY_LIMIT = 64  # characters of a cancel's `by` (kept to 64 bytes: shared.engine.scripts)


class EnqueueRequest(EnqueueBody, forbid_unknown_fields=True, kw_only=True):
    """A job to enqueue (the fields of shared.model.jobs.EnqueueBody, which validates it)."""

    # What a JSON Schema cannot say through the fields' types, added to the generated schema.
    json_schema_extra: ClassVar[dict[str, Any]] = {
        # delay and scheduled_at exclude each other; either may be null, which is not giving it.
        "not": {
            "required": ["delay", "scheduled_at"],
            "properties": {
                "delay": {"not": {"type": "null"}},
                "scheduled_at": {"not": {"type": "null"}},
            },
        },
        "examples": [{"type": "send_email", "payload": {"to": "ada@example.com"}, "priority": 5}],
    }


class BatchRequest(Struct, forbid_unknown_fields=True):
    """Jobs to enqueue together: all of them, or none when one is invalid."""

    jobs: Annotated[list[EnqueueRequest], Meta(min_length=1, max_length=MAX_BATCH)]


class CancelRequest(Struct, forbid_unknown_fields=True):
    """An optional cancel body: who asks."""

    by: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=CANCEL_BY_LIMIT,
                description="Who asks, kept with a running job's request and in its history "
                "(its first 64 bytes; '|' and control characters become spaces). Without it: "
                "api and the client's address.",
            ),
        ]
        | UnsetType
    ) = UNSET


class BulkByIds(Struct, forbid_unknown_fields=True):
    """A bulk DLQ action on these dead jobs."""

    ids: Annotated[
        list[JobId],
        Meta(
            min_length=1,
            max_length=bulk.MAX_LIMIT,
            description="These dead jobs (a repeated id counts once), in any queue.",
        ),
    ]


class BulkByFilter(Struct, forbid_unknown_fields=True, kw_only=True):
    """A bulk DLQ action on one page of the dead jobs a filter matches."""

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "anyOf": [{"required": [name]} for name in ("queue", "type", "all")]
    }

    queue: said(QueueName, "One queue's dead jobs; absent: every queue's.") | UnsetType = UNSET
    type: JobType | UnsetType = UNSET
    all: (
        Annotated[
            Literal[True],
            Meta(
                description="Every dead job (with queue or type: all of those). A body must "
                "name ids, queue, type or all: an empty one, or a cursor alone, is refused."
            ),
        ]
        | UnsetType
    ) = UNSET
    limit: whole_number(1, bulk.MAX_LIMIT) = bulk.DEFAULT_LIMIT
    cursor: (
        Annotated[
            str,
            Meta(
                pattern=f"^{listing.CURSOR_PATTERN.pattern}$",
                description="The next_cursor of the previous call with the same filter.",
            ),
        ]
        | UnsetType
    ) = UNSET


# Two shapes no field tells apart (a JSON Schema oneOf, not a tagged union): composed here,
# of the two models' generated schemas.
BULK_REQUEST = {
    "description": "Either ids, or a filter as GET /jobs?state=dead takes one: a call acts on "
    "one page of it (newest death first); next_cursor goes on.",
    "oneOf": [
        {"$ref": "#/components/schemas/BulkByIds"},
        {"$ref": "#/components/schemas/BulkByFilter"},
    ],
    "examples": [
        {"ids": ["0b8a4c4e-9d6f-4a57-9d0e-3c1f1d2b7a10"]},
        {"type": "pdf"},
        {"all": True, "limit": 1000},
    ],
}


class TypeLimitInput(Struct, forbid_unknown_fields=True, kw_only=True):
    """One job type's limits to set: at least one of the two."""

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"required": ["concurrency"], "properties": {"concurrency": {"type": "integer"}}},
            {"required": ["rate"], "properties": {"rate": {"type": "string"}}},
        ],
        "examples": [{"concurrency": 5, "rate": "10/1s"}],
    }

    concurrency: Concurrency | UnsetType = UNSET
    rate: NullableRate | UnsetType = UNSET


class LimitsInput(Struct, forbid_unknown_fields=True, kw_only=True):
    """A queue's limits to set; with types, every type's limits are replaced."""

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "examples": [
            {"concurrency": 10, "rate": "100/1m", "types": {"generate_pdf": {"concurrency": 5}}}
        ]
    }

    concurrency: Concurrency | UnsetType = UNSET
    rate: NullableRate | UnsetType = UNSET
    types: (
        said(
            dict[JobType, TypeLimitInput],
            "Per job type, in this queue; a type with no limit is left out.",
        )
        | UnsetType
    ) = UNSET
