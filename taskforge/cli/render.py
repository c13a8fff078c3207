"""Human output: aligned tables, times, ages and a job's details, with no table library.

Every function returns text; the commands decide where it goes. ``--json`` output bypasses this
module: it prints the server's own JSON (each model keeps it as ``raw``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from taskforge.models import Job

Cell = str | int | float | None
NONE = "-"  # what an empty cell shows: a blank would shift the columns a reader counts


def table(headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> str:
    """Return rows under their headers in aligned columns; numbers are right-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        widths = [max(width, len(text)) for width, text in zip(widths, row, strict=True)]
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]
    lines = [_line(list(headers), widths, numeric)]
    lines += [_line(row, widths, numeric) for row in cells]
    return "\n".join(lines)


def _line(texts: list[str], widths: list[int], numeric: list[bool]) -> str:
    """Return one table line; the last column is not padded (no trailing spaces)."""
    parts = [
        text.rjust(width) if right else text.ljust(width)
        for text, width, right in zip(texts, widths, numeric, strict=True)
    ]
    return "  ".join(parts).rstrip()


def _cell(value: Cell) -> str:
    """Return how one value shows in a table."""
    if value is None:
        return NONE
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def when(moment: datetime | None) -> str:
    """Return a time as RFC 3339 to the second (the gateway's times are UTC)."""
    if moment is None:
        return NONE
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def age(seconds: float | None) -> str:
    """Return a duration as a person reads it: 0.4s, 12s, 3m05s, 2h04m, 3d02h."""
    if seconds is None:
        return NONE
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def one_line(text: str | None, limit: int = 60) -> str | None:
    """Return the first line of a text, cut to ``limit`` characters (for a table cell)."""
    if not text:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


JOB_HEADERS = ("ID", "TYPE", "QUEUE", "STATUS", "PRIORITY", "ATTEMPTS", "CREATED")


def job_row(job: Job) -> list[Cell]:
    """Return a job as one row under JOB_HEADERS."""
    return [
        job.id,
        job.type,
        job.queue,
        job.status,
        job.priority,
        f"{job.attempts}/{job.max_retries}",
        when(job.created_at),
    ]


# A listing of jobs waiting for a time (scheduled, retrying) adds when each runs.
WAITING_HEADERS = (*JOB_HEADERS, "RUNS AT")


def waiting_row(job: Job) -> list[Cell]:
    """Return a scheduled or retrying job as one row under WAITING_HEADERS."""
    runs_at = job.next_retry_at if job.status == "retrying" else job.scheduled_at
    return [*job_row(job), when(runs_at)]


def _asked(job: Job) -> str:
    """Return when a stop of the running job was asked, and by whom."""
    by = f" by {job.cancel_requested_by}" if job.cancel_requested_by else ""
    return f"{when(job.cancel_requested_at)}{by}"


def job_detail(job: Job) -> str:
    """Return every field of a job, one per line, the payload and result as JSON."""
    fields: list[tuple[str, str]] = [
        ("id", job.id),
        ("type", job.type),
        ("queue", job.queue),
        ("status", job.status),
        ("priority", str(job.priority)),
        ("attempts", f"{job.attempts} of {job.max_retries}"),
        ("created", when(job.created_at)),
        ("updated", when(job.updated_at)),
    ]
    optional = [
        ("scheduled", job.scheduled_at and when(job.scheduled_at)),
        ("started", job.started_at and when(job.started_at)),
        ("finished", job.finished_at and when(job.finished_at)),
        ("next retry", job.next_retry_at and when(job.next_retry_at)),
        ("timeout", None if job.timeout is None else f"{job.timeout:g}s"),
        ("recoveries", str(job.recoveries) if job.recoveries else None),
        ("last error", job.last_error),
        ("cancel asked", job.cancel_requested_at and _asked(job)),
    ]
    fields += [(name, value) for name, value in optional if value]
    fields.append(("payload", compact(job.payload)))
    if "result" in job.raw:
        fields.append(("result", compact(job.result)))
    width = max(len(name) for name, _ in fields)
    lines = [f"{name.ljust(width)}  {value}" for name, value in fields]
    if job.traceback:
        lines += ["traceback:", job.traceback.rstrip()]
    return "\n".join(lines)


def compact(doc: Any) -> str:
    """Return a JSON value on one line."""
    return json.dumps(doc, separators=(", ", ": "), ensure_ascii=False)


def pretty(doc: Any) -> str:
    """Return a JSON document as ``--json`` prints it (indented; ``jq`` reads it as well)."""
    return json.dumps(doc, indent=2, ensure_ascii=False)
