"""The one error body every refusal answers with (gateway/http_errors.py renders it)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, Struct, UnsetType

from gateway.contract.types import Count, JobId


class FieldProblem(Struct, kw_only=True):
    """One bad field of a request (`index`: which job of a batch)."""

    index: Count | UnsetType = UNSET
    field: str
    message: str


class Error(Struct, kw_only=True):
    """What went wrong; the fields beyond `error` appear where they apply."""

    error: Annotated[str, Meta(description="What is wrong, for a person.")]
    fields: list[FieldProblem] | UnsetType = UNSET
    errors: list[FieldProblem] | UnsetType = UNSET
    job_id: JobId | UnsetType = UNSET
    status: str | UnsetType = UNSET
    redis: str | UnsetType = UNSET
    code: (
        Annotated[
            str, Meta(description="A stable code for a program: not_replicated (durable mode).")
        ]
        | UnsetType
    ) = UNSET
    job_ids: list[JobId] | UnsetType = UNSET
    replicas: Count | UnsetType = UNSET
    wanted: Annotated[int, Meta(ge=1)] | UnsetType = UNSET
    jobs: (
        Annotated[
            dict[str, Count],
            Meta(
                description="DELETE /queues/{name}'s 409: the jobs that keep the queue, "
                "per state (pending, held, scheduled, retrying, processing, dead)."
            ),
        ]
        | UnsetType
    ) = UNSET
    paused: bool | UnsetType = UNSET
    limited: bool | UnsetType = UNSET
    served_by: (
        Annotated[
            list[str],
            Meta(description="The live workerd hosts whose WORKER_QUEUES name the queue."),
        ]
        | UnsetType
    ) = UNSET
