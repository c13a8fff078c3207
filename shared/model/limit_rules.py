"""Concurrency and rate limits of a queue: what a limit is, its parsing, its stored form.

A queue's limits (docs/QUEUES.md, "Concurrency and rate limits") are one JSON string in the
queue's slot, compact for the scripts that decode it on every claim::

    {"c": 10, "r": [100, 60000], "t": {"generate_pdf": {"c": 5, "r": [10, 1000]}}}

``c`` a concurrency limit (jobs running at once), ``r`` a rate ([n, period ms]: n claims a
period, a token bucket of n on Redis's clock), ``t`` the same per job type. The API and CLI
speak the spelled-out form: ``{"concurrency": 10, "rate": "100/1m", "types": {...}}``.
Reading and changing them in Redis is shared.engine.limits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.model.jobs import TYPE_PATTERN

# N from 1 to MAX_COUNT, then an optional count of units (none: 1) from 1; gateway/contract
# documents the same pattern, so the document and the server refuse the same rates.
RATE_PATTERN = r"([1-9][0-9]{0,5}|1000000)/([1-9][0-9]{0,7})?(ms|s|m|h)"
RATE = re.compile(RATE_PATTERN)
PERIOD_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}
# Bounds that keep the scripts' arithmetic exact (doubles): at most 10^6 tokens, a period of
# at most 10^8 hours (3.6e14 ms < 2^53).
MAX_COUNT = 1_000_000


class LimitError(ValueError):
    """A limit that cannot be set; the message names the field and says what is expected."""


@dataclass(frozen=True)
class Rate:
    """n claims per period_ms, as a token bucket of n."""

    n: int
    period_ms: int

    def __str__(self) -> str:
        for unit in ("h", "m", "s"):
            if self.period_ms % PERIOD_MS[unit] == 0:
                count = self.period_ms // PERIOD_MS[unit]
                return f"{self.n}/{'' if count == 1 else count}{unit}"
        return f"{self.n}/{self.period_ms}ms"


@dataclass(frozen=True)
class Limit:
    """One scope's limits: the queue's, or one job type's in it. None: no such limit."""

    concurrency: int | None = None
    rate: Rate | None = None

    def compact(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.concurrency is not None:
            doc["c"] = self.concurrency
        if self.rate is not None:
            doc["r"] = [self.rate.n, self.rate.period_ms]
        return doc

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "rate": None if self.rate is None else str(self.rate),
        }

    @property
    def empty(self) -> bool:
        return self.concurrency is None and self.rate is None


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits: its own (queue-wide) and per job type."""

    queue: Limit = Limit()
    types: Mapping[str, Limit] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.queue.empty and not self.types

    @property
    def rate_free(self) -> bool:
        """Tell whether no scope has a rate (nothing for the scheduler's gates to open)."""
        return self.queue.rate is None and all(t.rate is None for t in self.types.values())

    def compact_json(self) -> str:
        """Return the stored form ('' when there is nothing to store: the limits are cleared)."""
        if self.empty:
            return ""
        doc = self.queue.compact()
        if self.types:
            doc["t"] = {name: limit.compact() for name, limit in sorted(self.types.items())}
        return json.dumps(doc, separators=(",", ":"))

    def to_json(self) -> dict[str, Any]:
        return {
            **self.queue.to_json(),
            "types": {name: limit.to_json() for name, limit in sorted(self.types.items())},
        }

    def with_scope(self, job_type: str | None, limit: Limit) -> QueueLimits:
        """Return these limits with one scope replaced (an empty limit removes a type's)."""
        if job_type is None:
            return QueueLimits(limit, self.types)
        types = {name: lim for name, lim in self.types.items() if name != job_type}
        if not limit.empty:
            types[job_type] = limit
        return QueueLimits(self.queue, types)


def parse_rate(text: Any, where: str = "rate") -> Rate:
    """Parse ``N/PERIOD`` (PERIOD like 1s, 500ms, 1m, 1h; a bare unit means 1 of it)."""
    match = RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise LimitError(
            f"{where}: expected N/PERIOD, N from 1 to {MAX_COUNT:,} and PERIOD like 1s, "
            f"500ms, 1m or 1h (10/1s, 100/1m, 5/500ms), not {str(text)[:40]!r}"
        )
    n, count, unit = int(match.group(1)), int(match.group(2) or 1), match.group(3)
    return Rate(n, count * PERIOD_MS[unit])


def parse_concurrency(value: Any, where: str = "concurrency") -> int:
    """Parse a concurrency limit: an integer from 1."""
    # JSON Schema's integer: 5.0 is one (shared.model.jobs reads priorities the same way).
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        # As the caller wrote it, in JSON: "5" (a string) or true, not Python's 5 or True.
        shown = json.dumps(value)[:40] if _is_json(value) else repr(value)[:40]
        raise LimitError(f"{where}: expected an integer from 1 to {MAX_COUNT:,}, not {shown}")
    return value


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def parse_limit(doc: Any, where: str) -> Limit:
    """Parse ``{"concurrency": n|null, "rate": "N/PERIOD"|null}`` (both optional)."""
    if not isinstance(doc, dict):
        raise LimitError(f"{where}: expected an object with concurrency and/or rate")
    unknown = set(doc) - {"concurrency", "rate"}
    if unknown:
        raise LimitError(
            f"{where.rstrip('.') or 'body'}: unknown field {sorted(unknown)[0]!r} (concurrency, rate)"
        )
    concurrency = doc.get("concurrency")
    rate = doc.get("rate")
    return Limit(
        None if concurrency is None else parse_concurrency(concurrency, f"{where}concurrency"),
        None if rate is None else parse_rate(rate, f"{where}rate"),
    )


def parse_limits(doc: Any) -> QueueLimits:
    """Parse a queue's limits as the API takes them; raise LimitError naming the bad field."""
    if not isinstance(doc, dict):
        raise LimitError('body: expected a JSON object such as {"concurrency": 10}')
    unknown = set(doc) - {"concurrency", "rate", "types"}
    if unknown:
        raise LimitError(f"unknown field {sorted(unknown)[0]!r} (concurrency, rate, types)")
    own = parse_limit({k: v for k, v in doc.items() if k != "types"}, "")
    types_doc = doc.get("types", {})
    if not isinstance(types_doc, dict):
        raise LimitError("types: expected an object of job type -> limits")
    types: dict[str, Limit] = {}
    for name, limit_doc in types_doc.items():
        check_type_name(name)
        limit = parse_limit(limit_doc, f"types.{name}.")
        if limit.empty:
            raise LimitError(f"types.{name}: give concurrency and/or rate (or leave it out)")
        types[name] = limit
    return QueueLimits(own, types)


def check_type_name(name: Any) -> str:
    """Return a job type name fit for a limit, or raise LimitError."""
    if not isinstance(name, str) or not TYPE_PATTERN.fullmatch(name):
        raise LimitError(f"types: {str(name)[:140]!r} is not a job type name")
    return name


def from_stored(raw: bytes | str | None) -> QueueLimits:
    """Return the limits from their stored form (None: no limits)."""
    if not raw:
        return QueueLimits()
    doc = json.loads(raw)

    def limit(d: Mapping[str, Any]) -> Limit:
        rate = d.get("r")
        return Limit(d.get("c"), None if rate is None else Rate(int(rate[0]), int(rate[1])))

    return QueueLimits(limit(doc), {name: limit(d) for name, d in doc.get("t", {}).items()})
