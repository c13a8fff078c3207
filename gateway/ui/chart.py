"""The overview's throughput chart: per-minute completions and failures as inline SVG geometry.

Drawn on the server (the template turns these numbers into <rect>s): no chart library, no
script, nothing to download; it reads the same with JavaScript off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shared.model.jobs import format_ms

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 12, 30
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
MINUTES = 60


class MinutePoint(Protocol):
    """One minute of throughput (shared.read.throughput's Minute has this shape)."""

    @property
    def start_ms(self) -> int: ...

    @property
    def completed(self) -> int: ...

    @property
    def failed(self) -> int: ...


@dataclass(frozen=True)
class Bar:
    """One bar: its box in SVG user units, and the tooltip naming its minute and count."""

    x: float
    y: float
    width: float
    height: float
    title: str


@dataclass(frozen=True)
class Tick:
    """An axis label and where it goes."""

    x: float
    y: float
    label: str


@dataclass(frozen=True)
class Chart:
    """Everything the template draws."""

    width: int
    height: int
    plot: tuple[int, int, int, int]  # x, y, width, height of the plotting area
    completed: list[Bar]
    failed: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    total_completed: int
    total_failed: int
    empty: bool


def nice_ceiling(value: int) -> int:
    """Return the smallest of 1, 2, 5 × 10^n that is at least `value` (and at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def throughput_chart(points: Sequence[MinutePoint]) -> Chart:
    """Return the chart of up to the last 60 minutes, oldest on the left."""
    points = list(points)[-MINUTES:]
    peak = nice_ceiling(max([p.completed for p in points] + [p.failed for p in points] + [1]))
    slot = PLOT_WIDTH / MINUTES
    offset = MINUTES - len(points)  # a shorter series sits at the right (ends at now)
    bar = slot * 0.42
    completed, failed = [], []
    for i, point in enumerate(points):
        x = LEFT + (offset + i) * slot + slot * 0.08
        minute = (format_ms(point.start_ms) or "")[11:16]
        completed.append(_bar(x, bar, point.completed, peak, f"{minute} UTC: completed"))
        failed.append(_bar(x + bar, bar, point.failed, peak, f"{minute} UTC: failed"))
    shares = (0, 0.5, 1) if peak > 1 else (0, 1)  # no middle line at half a job
    y_ticks = [
        Tick(LEFT - 6, TOP + PLOT_HEIGHT * (1 - share) + 4, f"{round(peak * share):,}")
        for share in shares
    ]
    bottom = TOP + PLOT_HEIGHT + 18
    x_ticks = [
        Tick(LEFT, bottom, "−60 min"),
        Tick(LEFT + PLOT_WIDTH / 2, bottom, "−30 min"),
        Tick(LEFT + PLOT_WIDTH, bottom, "now"),
    ]
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        plot=(LEFT, TOP, PLOT_WIDTH, PLOT_HEIGHT),
        completed=completed,
        failed=failed,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        total_completed=sum(p.completed for p in points),
        total_failed=sum(p.failed for p in points),
        empty=not any(p.completed or p.failed for p in points),
    )


def _bar(x: float, width: float, count: int, peak: int, label: str) -> Bar:
    height = PLOT_HEIGHT * count / peak
    return Bar(
        round(x, 2),
        round(TOP + PLOT_HEIGHT - height, 2),
        round(width, 2),
        round(height, 2),
        f"{label} {count:,}",
    )
