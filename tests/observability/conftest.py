"""Reuse the real-process fixtures: workerd (``start_workerd``, ``engine``) and gunicorn."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TypeVar

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from shared.engine.keys import Keys
from shared.obs import tracing
from tests.support.tools import wait_until
from tests.workerd.conftest import engine, start_workerd  # noqa: F401 (fixtures)

T = TypeVar("T")

# The engine's index keys, spelled out here on purpose: the agreement test reads Redis
# without going through shared.engine.keys or shared.engine.queries, the code it checks.
PREFIX = Keys().prefix  # the default queue's keys
STATES = ("pending", "processing", "scheduled", "retrying", "completed", "dead", "canceled")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse Prometheus text into {(sample name, sorted labels): value}."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(parsed: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    """Sum a sample over all its label sets."""
    return sum(value for (sample, _), value in parsed.items() if sample == name)


poll = wait_until  # the name these tests use


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Send this process's spans to memory for one test; yield the exporter."""
    exporter = InMemorySpanExporter()
    tracing.use_exporter_for_tests(exporter)
    try:
        yield exporter
        # Every span a test saw is one the docs list (tracing.SPANS, checked against them in
        # test_tracing).
        assert {s.name for s in exporter.get_finished_spans()} <= set(tracing.SPANS)
    finally:
        tracing.use_exporter_for_tests(None)


def gauge(text: str, name: str) -> float | None:
    """Return an unlabelled sample's value from Prometheus text."""
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None
