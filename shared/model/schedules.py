"""Periodic schedules: their definition, the TASKFORGE_SCHEDULES file, and its validation.

A schedule is a name, a cron expression (parsed by cronsim, in a time zone from zoneinfo) or
an interval, a policy for missed ticks, and a job template validated by the same rules as
``POST /enqueue`` (shared.model.jobs.validate_enqueue). The tick arithmetic is in shared.model.ticks; the
process that enqueues the ticks is workerd/periodic.py (docs/SCHEDULES.md).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from shared.model.durations import duration_parser
from shared.model.jobs import EnqueueRequest, ValidationError, validate_enqueue

# A name sits in a Redis key and a URL path: the characters of a queue name.
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
NAME_RULE = "1-64 characters of A-Z a-z 0-9 _ . -"
MISSED_POLICIES = ("skip", "catch_up")
# The job template takes what an enqueue body takes, but not a time: the tick is the time.
TEMPLATE_FIELDS = ("type", "payload", "queue", "priority", "max_retries", "timeout")
SCHEDULE_FIELDS = frozenset({"cron", "every", "timezone", "missed", "job"})
MIN_EVERY_MS = 1000
MAX_EVERY_MS = 366 * 24 * 3600 * 1000
_parse_every = duration_parser(positive=True)
# Largest first: the interval is shown in the first that divides it.
_EVERY_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


class ScheduleError(ValueError):
    """A schedule (or the file) is invalid; the message names the schedule and the fault."""


@dataclass(frozen=True)
class Schedule:
    """One validated schedule: exactly one of `cron` and `every_ms` is set."""

    name: str
    cron: str | None
    every_ms: int | None
    timezone: str
    missed: str
    template: Mapping[str, Any]  # the job table as given (template fields only)
    job: EnqueueRequest

    @cached_property
    def zone(self) -> ZoneInfo:
        """Return the zone cron ticks are computed in."""
        return ZoneInfo(self.timezone)

    @property
    def every_text(self) -> str | None:
        """Return the interval as the API, the CLI and the dashboard show it: in the largest
        unit that divides it exactly, as a file would give it (15m, 2h, 90s, 1d)."""
        if self.every_ms is None:
            return None
        for unit, ms in _EVERY_UNITS:
            if self.every_ms % ms == 0:
                return f"{self.every_ms // ms}{unit}"
        return f"{self.every_ms}ms"

    def to_json(self) -> dict[str, Any]:
        """Return the definition as published to Redis and shown by the API."""
        return {
            "name": self.name,
            "cron": self.cron,
            "every": self.every_text,
            "timezone": self.timezone,
            "missed": self.missed,
            "job": dict(self.template),
        }


def from_json(text: str | bytes) -> Schedule:
    """Return a schedule from its published JSON (validated again, as a file entry)."""
    doc = json.loads(text)
    name = doc.pop("name")
    entry = {k: v for k, v in doc.items() if v is not None}
    if "every" in entry:
        entry.pop("timezone", None)  # shown as UTC, but not a field an interval takes
    return parse_entry(name, entry)


def load_file(path: str) -> tuple[Schedule, ...]:
    """Read and validate a schedules file; raise ScheduleError naming the first fault."""
    try:
        with open(path, "rb") as handle:
            doc = tomllib.load(handle)
    except OSError as exc:
        raise ScheduleError(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScheduleError(f"{path} is not valid TOML: {exc}") from None
    return parse_document(doc)


def parse_document(doc: Mapping[str, Any]) -> tuple[Schedule, ...]:
    """Validate a parsed file: one ``[schedules.<name>]`` table per schedule, nothing else."""
    unknown = sorted(set(doc) - {"schedules"})
    if unknown:
        raise ScheduleError(f"unknown top-level key {unknown[0]!r}: only [schedules.<name>]")
    tables = doc.get("schedules", {})
    if not isinstance(tables, Mapping):
        raise ScheduleError("schedules must be tables: [schedules.<name>]")
    return tuple(parse_entry(name, entry) for name, entry in tables.items())


def parse_entry(name: str, entry: Any) -> Schedule:
    """Validate one schedule; raise ScheduleError ``schedule "<name>": <what is wrong>``."""
    try:
        return _parse(name, entry)
    except ScheduleError as exc:
        raise ScheduleError(f"schedule {json.dumps(name)}: {exc}") from None


def _parse(name: str, entry: Any) -> Schedule:
    if not NAME_PATTERN.fullmatch(name):
        raise ScheduleError(f"bad name: must be {NAME_RULE}")
    if not isinstance(entry, Mapping):
        raise ScheduleError("must be a table")
    unknown = sorted(set(entry) - SCHEDULE_FIELDS)
    if unknown:
        raise ScheduleError(f"unknown field {unknown[0]!r}")
    has_cron, has_every = "cron" in entry, "every" in entry
    if has_cron == has_every:
        raise ScheduleError("give exactly one of cron and every")
    timezone = _timezone(entry.get("timezone", "UTC"), cron=has_cron, given="timezone" in entry)
    cron = _cron(entry["cron"], timezone) if has_cron else None
    every_ms = _every(entry["every"]) if has_every else None
    missed = entry.get("missed", "skip")
    if missed not in MISSED_POLICIES:
        raise ScheduleError(f"missed must be skip or catch_up, not {json.dumps(missed)}")
    template, job = _job(entry.get("job"))
    return Schedule(name, cron, every_ms, timezone, missed, template, job)


def _timezone(value: Any, *, cron: bool, given: bool) -> str:
    if given and not cron:
        raise ScheduleError("timezone applies to cron schedules only (every counts from the epoch)")
    if not isinstance(value, str):
        raise ScheduleError("timezone must be a string such as Europe/Berlin")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown time zone {json.dumps(value)}") from None
    return value


def _cron(value: Any, timezone: str) -> str:
    if not isinstance(value, str):
        raise ScheduleError('cron must be a string such as "0 3 * * *"')
    start = datetime.now(UTC).astimezone(ZoneInfo(timezone))
    try:
        next(CronSim(value, start))
    except (CronSimError, ValueError, IndexError) as exc:
        raise ScheduleError(f"bad cron expression {json.dumps(value)}: {exc}") from None
    except StopIteration:
        raise ScheduleError(f"cron expression {json.dumps(value)} never fires") from None
    return value


def _every(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ScheduleError("every must be a duration such as 30s, 15m, 1h or 1d")
    try:
        seconds = _parse_every(str(value))
    except ValueError as exc:
        raise ScheduleError(f"bad interval {json.dumps(value)}: {exc}") from None
    every_ms = round(seconds * 1000)
    if not MIN_EVERY_MS <= every_ms <= MAX_EVERY_MS:
        raise ScheduleError(f"interval {json.dumps(value)} must be from 1s to 366d")
    return every_ms


def _job(value: Any) -> tuple[dict[str, Any], EnqueueRequest]:
    if not isinstance(value, Mapping):
        raise ScheduleError('job must be a table with at least a type: job = { type = "..." }')
    unknown = sorted(set(value) - set(TEMPLATE_FIELDS))
    if unknown:
        raise ScheduleError(f"job.{unknown[0]}: unknown field (takes {', '.join(TEMPLATE_FIELDS)})")
    template = {name: value[name] for name in TEMPLATE_FIELDS if name in value}
    try:
        job = validate_enqueue(template)
    except ValidationError as exc:
        raise ScheduleError("; ".join(f"job.{e}" for e in exc.errors)) from None
    return template, job
