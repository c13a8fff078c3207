"""Field types shared by the models: what a job id, a timestamp or a queue name look like."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

from shared.model.jobs import TYPE_PATTERN
from shared.model.queues import QUEUE_PATTERN

# Case-insensitive on input (UUIDs are); the server answers in lower case. Version 4 (the
# server's ids) or 8 (a client's: shared.model.job_ids).
JOB_ID_PATTERN = (
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[48][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"
)
JobId = Annotated[str, Meta(pattern=JOB_ID_PATTERN)]
Timestamp = Annotated[str, Meta(extra_json_schema={"format": "date-time"})]
QueueName = Annotated[
    str, Meta(extra_json_schema={"pattern": f"^{QUEUE_PATTERN.pattern}$", "maxLength": 64})
]
JobType = Annotated[str, Meta(extra_json_schema={"pattern": f"^{TYPE_PATTERN.pattern}$"})]
Count = Annotated[int, Meta(ge=0)]
Nullable = str | None
TimestampOrNull = Annotated[str | None, Meta(extra_json_schema={"format": "date-time"})]


def said(kind: Any, description: str) -> Any:
    """Return `kind` with a description for the document."""
    return Annotated[kind, Meta(description=description)]


def whole_number(low: int, high: int) -> Any:
    """Return the type of a JSON Schema integer from `low` to `high`: 8.0 is one too (clients
    that hold numbers as doubles write it so). The document shows it as an integer."""
    return Annotated[float, Meta(ge=low, le=high, multiple_of=1)]
