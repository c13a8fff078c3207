"""Count what a per-job path makes: log records, metric value writes, span attribute builds.

The budget tests (tests/workerd/test_job_budget.py, tests/gateway/test_enqueue_budget.py)
check these counts rather than a time, which a loaded machine would blur
(bench/PER_JOB_COST.md has the times).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import values

from shared.obs import tracing


class Tally:
    """What a path made: log records by event, metric value writes, span builds."""

    def __init__(self) -> None:
        self.records: Counter[str] = Counter()
        self.metric_writes = 0
        self.span_builds = 0

    def clear(self) -> None:
        """Forget what was counted so far (a warm-up's labelled metric children, say)."""
        self.records.clear()
        self.metric_writes = self.span_builds = 0


@contextlib.contextmanager
def tallying(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tally]:
    """Count every LogRecord made, every metric value written and every span attribute set."""
    found = Tally()
    make_record = logging.getLogRecordFactory()

    def counting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        found.records[record.getMessage()] += 1
        return record

    def counted(method: Callable[..., Any], what: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            setattr(found, what, getattr(found, what) + 1)
            return method(*args, **kwargs)

        return wrapper

    for name in ("inc", "set"):
        monkeypatch.setattr(
            values.ValueClass, name, counted(getattr(values.ValueClass, name), "metric_writes")
        )
    for name in ("job_attributes", "_kind_and_attributes"):
        monkeypatch.setattr(tracing, name, counted(getattr(tracing, name), "span_builds"))
    logging.setLogRecordFactory(counting_factory)
    try:
        yield found
    finally:
        logging.setLogRecordFactory(make_record)


@contextlib.contextmanager
def root_level_setter() -> Iterator[Callable[[int], None]]:
    """Yield a setter of the root logger's level, as LOG_LEVEL sets it; restore it after."""
    root = logging.getLogger()
    before = root.level
    try:
        yield root.setLevel
    finally:
        root.setLevel(before)
