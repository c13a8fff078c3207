"""bench.enqueue_ab's arithmetic: the paired change in % and its 95 % interval."""

from __future__ import annotations

import pytest

from bench.enqueue_ab import interval


def test_the_interval_is_the_mean_paired_change_and_students_t_around_it() -> None:
    # Changes of +10 %, +20 % and +30 %: mean 20, standard deviation 10, t(2) = 4.303.
    mean, low, high = interval([100.0, 200.0, 50.0], [110.0, 240.0, 65.0])

    assert mean == pytest.approx(20.0)
    assert (low, high) == pytest.approx((20 - 4.303 * 10 / 3**0.5, 20 + 4.303 * 10 / 3**0.5))


def test_pairing_cancels_drift_that_moves_both_sides_alike() -> None:
    # The machine got twice as fast between rounds; the change stays 5 % every round.
    mean, low, high = interval([100.0, 200.0, 400.0], [105.0, 210.0, 420.0])

    assert mean == low == high == pytest.approx(5.0)
