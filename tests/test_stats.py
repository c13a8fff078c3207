"""tests.support.stats: the one percentile definition of bench/BENCHMARKS.md and RELIABILITY.md."""

from __future__ import annotations

import pytest

from tests.support.stats import percentile


def test_percentile_is_nearest_rank_on_a_hundred_values() -> None:
    values = list(range(100, 0, -1))  # unsorted on purpose
    assert [percentile(values, q) for q in (0.0, 0.01, 0.5, 0.95, 0.99, 1.0)] == [
        1,
        1,
        50,
        95,
        99,
        100,
    ]


def test_percentile_takes_the_rank_above_when_it_falls_between_two() -> None:
    # 0.5 × 5 = 2.5 → rank 3 (banker's rounding would give 2); 0.99 × 150 = 148.5 → 149.
    assert percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert percentile(list(range(1, 151)), 0.99) == 149
    assert percentile([10, 20, 30, 40], 0.5) == 20  # the lower middle: a value measured


def test_percentile_is_not_fooled_by_binary_floating_point() -> None:
    # 0.07 × 100 is 7.000000000000001: the rank stays 7.
    assert percentile(list(range(1, 101)), 0.07) == 7


def test_percentile_of_a_small_sample_is_its_maximum_at_p99() -> None:
    assert percentile([0.3, 0.1, 0.2], 0.99) == 0.3
    assert percentile([5.0], 0.5) == 5.0


def test_percentile_of_nothing_is_none_and_a_share_outside_0_1_is_refused() -> None:
    assert percentile([], 0.5) is None
    with pytest.raises(ValueError):
        percentile([1, 2], 99)
