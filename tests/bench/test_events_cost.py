"""bench.events_cost: a small run of each mode measures what the events add, and only that."""

from __future__ import annotations

import redis

from bench import events_cost
from tests.support.redis_server import RedisServer


def test_events_on_add_three_xadds_a_job_and_off_none(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    on = events_cost.measure(redis_server.url, "on", 20)
    off = events_cost.measure(redis_server.url, "off", 20)

    assert (on["xadd"], on["events"]) == (3.0, 3.0)
    assert (off["xadd"], off["events"], off["bytes_per_event"]) == (0.0, 0.0, 0.0)
    # The events cost exactly their XADDs, less the TIME each enqueue's, claim's or complete's
    # first event replaces (its entry id is the time: common.lua, stamped), and nothing else:
    # every enqueue none (one XADD for a TIME), every complete that claims the next one more
    # (two XADDs for a TIME), the first claim and the last complete none: 19 over 20 jobs.
    assert round(on["commands"] - off["commands"], 6) == 19 / 20
    assert on["bytes_per_event"] > 0


def test_the_table_shows_both_modes_and_their_difference() -> None:
    run = {"cpu_us": 10.0, "commands": 24.0, "xadd": 3.0, "events": 3.0, "bytes_per_event": 90}
    off = {**run, "cpu_us": 8.0, "commands": 21.0, "xadd": 0.0, "events": 0.0}
    text = events_cost.table({"on": [run], "off": [off]})
    assert "| Redis commands | 24.00 | 21.00 | 3.00 |" in text
    assert "| Redis CPU µs | 10.0 | 8.0 | 2.0 |" in text
