"""bench.round_trip_floor: each shape's loop runs and makes the round trips it names."""

from __future__ import annotations

from bench import round_trip_floor


def test_each_shape_makes_the_round_trips_it_names() -> None:
    shapes = ["ack-each", "ack-per-8", "body-only", "ack-only"]
    rates, redis_us, requests = round_trip_floor.measure(shapes, [1], 2_000, 1)
    assert all(rates[s][1][0] > 0 and redis_us[s][1][0] > 0 for s in shapes)
    # Requests Redis read a job (exact but for start-up's few): the rate and CPU are per those.
    expected = {"ack-each": 2.0, "ack-per-8": 1.125, "body-only": 1.0, "ack-only": 1.0}
    for shape, per_job in expected.items():
        assert abs(requests[shape][1][0] - per_job) < 0.01, (shape, requests)
