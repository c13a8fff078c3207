"""The overview's throughput chart: geometry drawn on the server from per-minute counts."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.ui.chart import MINUTES, PLOT_HEIGHT, TOP, nice_ceiling, throughput_chart

T0 = 1_800_000_000_000 - 1_800_000_000_000 % 60_000  # a minute boundary


@dataclass(frozen=True)
class Minute:
    """A point shaped as shared.read.throughput's."""

    start_ms: int
    completed: int
    failed: int


def test_nice_ceiling_rounds_up_to_1_2_5() -> None:
    assert [nice_ceiling(v) for v in (0, 1, 2, 3, 6, 10, 11, 499, 501)] == [
        1, 1, 2, 5, 10, 10, 20, 500, 1000,
    ]  # fmt: skip


def test_bars_scale_to_the_peak_and_name_their_minute() -> None:
    points = [Minute(T0 + i * 60_000, completed=i, failed=i % 3) for i in range(MINUTES)]
    chart = throughput_chart(points)
    assert len(chart.completed) == len(chart.failed) == MINUTES
    tallest = chart.completed[-1]  # 59 completions; the axis peak is 100
    assert tallest.height == round(PLOT_HEIGHT * 59 / 100, 2)
    assert tallest.y + tallest.height == TOP + PLOT_HEIGHT  # bars stand on the axis
    assert chart.completed[0].height == 0
    assert tallest.title.endswith("UTC: completed 59")
    assert chart.total_completed == sum(range(MINUTES)) and not chart.empty
    assert [t.label for t in chart.y_ticks] == ["0", "50", "100"]
    xs = [bar.x for bar in chart.completed]
    assert xs == sorted(xs) and chart.failed[0].x > chart.completed[0].x  # oldest on the left


def test_an_empty_series_draws_an_empty_chart() -> None:
    chart = throughput_chart([])
    assert chart.empty and chart.completed == [] and chart.total_failed == 0
    assert [t.label for t in chart.y_ticks] == ["0", "1"]


def test_a_short_series_ends_at_now() -> None:
    chart = throughput_chart([Minute(T0, 5, 0)])
    full = throughput_chart([Minute(T0 + i * 60_000, 5, 0) for i in range(MINUTES)])
    assert chart.completed[0].x == full.completed[-1].x
