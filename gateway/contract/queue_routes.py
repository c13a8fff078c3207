"""The route table's second half: queues, limits, workerd hosts, schedules and operations.

gateway/contract/route_table.py merges it in; its tuples of shared error names are passed in
so both halves say "a read's errors" and "a body's errors" alike.
"""

from __future__ import annotations

from gateway.contract.ops import Host, Hosts, Probe, Schedule, Schedules
from gateway.contract.queue_models import Limits, LimitsList, Queue, Queues, Stats, Throughput
from gateway.contract.requests import LimitsInput, TypeLimitInput
from gateway.contract.route_params import Answer, Operation, use
from shared.read.schedule_state import NEXT_RUNS

QUEUE_PAGE = ("QueueLimit", "QueueCursor", "QueueSearch")
CONFLICT = "409: the limits kept changing under this request (another change won); retry."


def _queues(read: tuple[str, ...]) -> tuple[Operation, ...]:
    queue = Answer("The queue as it is now.", Queue)
    return (
        Operation(
            "get",
            "/queues",
            "listQueues",
            "Every queue, or a page of them: jobs per state, paused, oldest pending age, the "
            "last minute.",
            {"200": Answer("A page of queues, by name.", Queues), **use(*read)},
            params=QUEUE_PAGE,
        ),
        Operation(
            "delete",
            "/queues/{name}",
            "deleteQueue",
            "Delete an empty queue: no pending, held, scheduled, retrying, processing or dead "
            "job, not paused, not limited, served by no workerd host. Its completed and "
            "canceled jobs and its events go with it.",
            {"204": Answer("Deleted.", None), **use(*read, "QueueNotFound", "QueueKept")},
            params=("QueueName",),
        ),
        Operation(
            "post",
            "/queues/{name}/pause",
            "pauseQueue",
            "Pause a queue: jobs still arrive, no worker claims them until resumed.",
            {"200": queue, **use(*read)},
            params=("QueueName",),
        ),
        Operation(
            "post",
            "/queues/{name}/resume",
            "resumeQueue",
            "Resume a paused queue.",
            {"200": queue, **use(*read)},
            params=("QueueName",),
        ),
    )


def _limits(read: tuple[str, ...], body: tuple[str, ...]) -> tuple[Operation, ...]:
    state = Answer("The queue's limits as they are now, with their use.", Limits)
    changed = {"200": state, **use(*body, "Conflict")}
    cleared = {"200": state, **use(*read, "Conflict")}
    queue, job_type = ("QueueName",), ("QueueName", "TypeName")
    return (
        Operation(
            "get",
            "/limits",
            "listLimits",
            "A page of the queues that have limits (every one while they fit in limit): their "
            "own and their job types', running and held.",
            {"200": Answer("Queues with limits, by name.", LimitsList), **use(*read)},
            params=QUEUE_PAGE,
        ),
        Operation(
            "get",
            "/queues/{name}/limits",
            "getLimits",
            "One queue's limits and their use (all null when it has none).",
            {"200": state, **use(*read)},
            params=queue,
        ),
        Operation(
            "put",
            "/queues/{name}/limits",
            "putLimits",
            "Set a queue's own limits; with types, replace every job type's too (without, they "
            "stay). " + CONFLICT,
            changed,
            params=queue,
            body=LimitsInput,
        ),
        Operation(
            "delete",
            "/queues/{name}/limits",
            "clearLimits",
            "Remove every limit of a queue; held jobs become claimable at once.",
            cleared,
            params=queue,
        ),
        Operation(
            "put",
            "/queues/{name}/limits/types/{job_type}",
            "putTypeLimit",
            "Set one job type's limits in a queue; the others stay. " + CONFLICT,
            changed,
            params=job_type,
            body=TypeLimitInput,
        ),
        Operation(
            "delete",
            "/queues/{name}/limits/types/{job_type}",
            "clearTypeLimit",
            "Remove one job type's limits in a queue.",
            cleared,
            params=job_type,
        ),
    )


def _workers(read: tuple[str, ...]) -> tuple[Operation, ...]:
    asked = Answer("Asked; the host applies it at its next heartbeat (within 2 s).", Host)
    by_host = {"202": asked, **use(*read, "HostNotFound")}
    return (
        Operation(
            "get",
            "/workers",
            "listWorkers",
            "Every live workerd host: workers and what each runs, quiet, queues served.",
            {
                "200": Answer("Every live workerd host, by name.", Hosts),
                **use("Unauthorized", "Unavailable"),
            },
        ),
        Operation(
            "post",
            "/workers/{name}/quiet",
            "quietWorkers",
            "Quiet a workerd host: running jobs finish, nothing more is claimed.",
            by_host,
            params=("HostName",),
        ),
        Operation(
            "post",
            "/workers/{name}/resume",
            "resumeWorkers",
            "Let a quiet workerd host claim again.",
            by_host,
            params=("HostName",),
        ),
    )


def _schedules(read: tuple[str, ...]) -> tuple[Operation, ...]:
    one = {
        "200": Answer("The schedule as it is now.", Schedule),
        **use(*read, "ScheduleNotFound"),
    }

    def by_name(method: str, path: str, op_id: str, summary: str) -> Operation:
        return Operation(method, path, op_id, summary, one, params=("ScheduleName",))

    return (
        Operation(
            "get",
            "/schedules",
            "listSchedules",
            "Every periodic schedule workerd published: definition, paused, last tick and its "
            f"job, the next {NEXT_RUNS} runs.",
            {
                "200": Answer("Every schedule, by name.", Schedules),
                **use("Unauthorized", "Unavailable"),
            },
        ),
        by_name("get", "/schedules/{name}", "getSchedule", "One periodic schedule."),
        by_name(
            "post",
            "/schedules/{name}/pause",
            "pauseSchedule",
            "Pause a schedule: its ticks pass without jobs until resumed.",
        ),
        by_name(
            "post",
            "/schedules/{name}/resume",
            "resumeSchedule",
            "Resume a schedule at its next tick (no catch-up of the pause).",
        ),
    )


def _ops(read: tuple[str, ...]) -> tuple[Operation, ...]:
    down = use("Unavailable")
    return (
        Operation(
            "get",
            "/stats",
            "stats",
            "Jobs per state and the oldest pending job's age, in all and for a page of queues; "
            "workerd hosts and processes.",
            {"200": Answer("Counts read from Redis.", Stats), **use(*read)},
            params=QUEUE_PAGE,
        ),
        Operation(
            "get",
            "/stats/throughput",
            "statsThroughput",
            "Completions and failed executions per minute over the last hour (or fewer "
            "minutes), in all or for one queue.",
            {"200": Answer("One point per minute.", Throughput), **use(*read)},
            params=("Queue", "Minutes"),
        ),
        Operation(
            "get",
            "/metrics",
            "metrics",
            "Prometheus text exposition.",
            {
                "200": Answer("Metrics.", media="text/plain", schema={"type": "string"}),
                **use("Unauthorized", "Unavailable"),
            },
        ),
        Operation(
            "get",
            "/health",
            "health",
            "Liveness: Redis answers.",
            {"200": Answer("Healthy.", Probe), **down},
            public=True,
        ),
        Operation(
            "get",
            "/ready",
            "ready",
            "Readiness: Redis answers and holds the engine's scripts.",
            {"200": Answer("Ready.", Probe), **down},
            public=True,
        ),
        Operation(
            "get",
            "/openapi.json",
            "openapi",
            "This document.",
            {
                "200": Answer("The OpenAPI document.", schema={"type": "object"}),
                **use("Unauthorized"),
            },
        ),
    )


def operations(read: tuple[str, ...], body: tuple[str, ...]) -> tuple[Operation, ...]:
    """Return the operations on queues, limits, hosts, schedules, and the service itself."""
    return (
        *_ops(read),
        *_queues(read),
        *_limits(read, body),
        *_workers(read),
        *_schedules(read),
    )
