"""bench.round_trip_floor: each shape's loop runs, and a script call a job costs Redis more."""

from __future__ import annotations

from bench import round_trip_floor


def test_a_script_call_a_job_costs_redis_more_than_the_body_alone() -> None:
    rates, redis_us = round_trip_floor.measure(["ack-each", "body-only"], [1], 2_000, 1)
    assert rates["ack-each"][1][0] > 0 and rates["body-only"][1][0] > 0
    # Twice the requests a job: Redis reads, runs and answers one more per job.
    assert redis_us["ack-each"][1][0] > redis_us["body-only"][1][0], redis_us
