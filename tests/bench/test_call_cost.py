"""bench.call_cost: every way of calling is measured, and a batch shares what lone calls pay."""

from __future__ import annotations

import pytest

from bench import call_cost


@pytest.mark.serial  # Redis CPU figures, which parallel load would distort
def test_each_way_is_measured_and_a_batch_costs_less_a_call_than_lone_calls() -> None:
    figures = call_cost.measure(400)
    assert set(figures) == {"back-to-back", "sleep-0.5", "sleep-2", "batch"}
    assert all(value > 0 for value in figures.values())
    # One request for 400 calls against 400 requests: the request's own cost, shared.
    assert figures["batch"] < figures["back-to-back"]
