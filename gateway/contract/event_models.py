"""The data of a GET /events message (Server-Sent Events): a job, queue or host event, or a gap."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import UNSET, Struct, UnsetType

from gateway.contract.types import Timestamp


class Event(Struct, forbid_unknown_fields=True, kw_only=True):
    """A job, queue or workerd host event; the job's fields appear for a job's."""

    event: str
    at: Timestamp
    job_id: str | UnsetType = UNSET
    type: str | UnsetType = UNSET
    queue: str | UnsetType = UNSET
    attempt: int | UnsetType = UNSET
    worker: str | UnsetType = UNSET
    host: str | UnsetType = UNSET
    reason: Literal["concurrency", "rate"] | UnsetType = UNSET


class Gap(Struct, forbid_unknown_fields=True, kw_only=True):
    """Events a reader's cursor was too old for were dropped: where to go on from."""

    event: Literal["gap"]
    queue: str | UnsetType = UNSET
    from_: str = msgspec.field(name="from")
    first: str | None
