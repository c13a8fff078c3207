"""Periodic schedules when Redis's clock jumps: a real workerd on a redis-server whose wall
clock the test moves while both run (tests/faults/clock_tools.MovableClock).

Ticks are computed on Redis TIME, so moving Redis's clock is what an NTP step or a failover to
a replica with another clock does to every scheduler at once. Forward by hours: `skip` runs
nothing late and `catch_up` runs one job, never a flood; back by an hour: no tick at or before
the last one is enqueued again, and the schedule carries on once the clock is past it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from shared.engine.keys import Keys
from shared.model import ticks
from shared.model.schedules import load_file
from shared.read.schedule_state import read_states
from tests.faults.clock_tools import MovableClock, redis_now_ms
from tests.support.redis_server import RedisServer
from tests.support.tools import require_tool, wait_until
from tests.support.workerd import Workerd

K = Keys()
HOUR = 3_600_000
SCHEDULES = """
[schedules.second]
every = "1s"
job = { type = "demo.noop", queue = "periodic" }

[schedules.hourly-skip]
every = "1h"
job = { type = "demo.noop", queue = "periodic" }

[schedules.hourly-catch-up]
every = "1h"
missed = "catch_up"
job = { type = "demo.noop", queue = "periodic" }
"""
NAMES = ["second", "hourly-skip", "hourly-catch-up"]


@pytest.fixture
def moved(tmp_path: Path) -> Iterator[tuple[RedisServer, MovableClock]]:
    """Yield a private redis-server whose clock the test moves, and that clock."""
    clock = MovableClock(str(tmp_path))
    server = RedisServer(require_tool("redis-server"), tmp_path / "redis", env=clock.env)
    server.dir.mkdir()
    server.start()
    try:
        yield server, clock
    finally:
        server.close()


def _enqueued(r: redis.Redis) -> Counter[str]:
    entries = r.xrange(K.fleet_events)  # one Redis: one stream, each entry naming its queue
    return Counter(
        f[b"j"].decode()
        for _, f in entries
        if f.get(b"e") == b"enqueued" and f.get(b"q") == b"periodic"
    )


def _passes(r: redis.Redis, count: int) -> None:
    """Return once the scheduler has made `count` more passes (each reads the three states)."""

    def hmgets() -> int:
        return int(r.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0))

    start = hmgets()
    wait_until(lambda: hmgets() >= start + len(NAMES) * count, 10, f"{count} scheduler passes")


@pytest.mark.slow
def test_redis_clock_jumps_neither_flood_nor_repeat_ticks(
    moved: tuple[RedisServer, MovableClock],  # first: its Redis outlives the workerd
    start_workerd: Callable[..., Workerd],
    tmp_path: Path,
) -> None:
    server, clock = moved
    r = server.client()
    path = tmp_path / "schedules.toml"
    path.write_text(SCHEDULES)
    schedules = {s.name: s for s in load_file(str(path))}
    host = start_workerd(REDIS_URL=server.url, WORKER_COUNT="1", TASKFORGE_SCHEDULES=str(path))

    def state(name: str) -> object:
        return read_states(r, K, [name])[1][0]

    wait_until(lambda: all(state(n).last_ms for n in NAMES), 10, "every schedule to be seen")
    before = _enqueued(r)

    # Forward: to half past an hour, 2 to 3 hours on. Two or three hourly ticks are due, the
    # latest 30 minutes old: skip runs none, catch_up runs one for it.
    now = redis_now_ms(r)
    target_hour = (now + 2 * HOUR) // HOUR * HOUR + HOUR
    jump_s = (target_hour + HOUR // 2 - now) // 1000
    clock.shift(jump_s)
    assert redis_now_ms(r) >= target_hour
    wait_until(
        lambda: all(state(n).last_ms >= target_hour for n in NAMES), 10, "the jump to be seen"
    )
    after_jump = _enqueued(r) - before
    skip, catch_up = state("hourly-skip"), state("hourly-catch-up")
    assert (skip.last_ms, skip.jobs, skip.missed) == (target_hour, 0, skip.missed)
    assert skip.missed in (2, 3)
    assert (catch_up.last_ms, catch_up.job_id) == (
        target_hour,
        ticks.job_id("hourly-catch-up", target_hour, "periodic"),
    )
    assert catch_up.jobs == 1 and catch_up.missed == skip.missed - 1
    assert after_jump[catch_up.job_id] == 1
    # The per-second schedule: the ticks of the grace window at most, the rest dropped.
    second_jobs = [j for j in after_jump if j != catch_up.job_id]
    assert len(second_jobs) <= ticks.GRACE_FLOOR_MS // 1000 + 3, len(second_jobs)
    assert state("second").missed > 2 * 3600
    # The host that made the jobs and moved past the dropped ticks counted them.
    metrics = host.http("/metrics")[2].decode()
    assert 'taskforge_schedule_jobs_total{schedule="hourly-catch-up"} 1.0' in metrics
    missed = f'taskforge_schedule_missed_total{{schedule="hourly-skip"}} {skip.missed}.0'
    assert missed in metrics

    # Backward, an hour behind the last tick: nothing is enqueued, nothing again.
    last_second = state("second").last_ms
    seen = _enqueued(r)
    clock.shift(jump_s - 2 * HOUR // 1000)
    assert redis_now_ms(r) < last_second - HOUR // 2
    _passes(r, 3)
    assert _enqueued(r) == seen
    assert state("second").last_ms == last_second

    # Forward again, past the last tick: the schedule carries on, from after it.
    clock.shift(jump_s + 2)
    wait_until(lambda: state("second").last_ms > last_second + 1000, 10, "new ticks")
    resumed = _enqueued(r) - seen
    assert resumed and max(_enqueued(r).values()) == 1
    every = schedules["second"].every_ms
    assert every == 1000
    later_ticks = [t for t in range(last_second + every, state("second").last_ms + 1, every)]
    assert set(resumed) <= {ticks.job_id("second", t, "periodic") for t in later_ticks}
    r.close()
