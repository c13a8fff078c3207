"""Request bodies: what a client sends."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from msgspec import UNSET, Meta, Struct, UnsetType

from gateway.inputs import CANCEL_BY_LIMIT, MAX_BATCH
from shared.jobs import EnqueueBody


class EnqueueRequest(EnqueueBody, forbid_unknown_fields=True, kw_only=True):
    """A job to enqueue (the fields of shared.jobs.EnqueueBody, which validates it)."""

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
