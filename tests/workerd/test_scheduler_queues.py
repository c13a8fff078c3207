"""The scheduler's cost per listed queue: a script call only where a duty has something to do.

A queue name stays listed once a job was enqueued under it, so idle queues pile up (a
mistyped name, a pause that named one): each must cost the scheduler one EXISTS in a round
trip all queues share, not a promote, recover and trim of its own. Real Redis, the real
SchedulerProcess stepped by hand.
"""

from __future__ import annotations

import os

import redis

from shared.engine_types import Policy
from shared.jobs import JobState, format_ms, validate_enqueue
from shared.keys import Keys
from shared.limits import parse_limits
from shared.queries import get_job
from shared.scripts import Scripts
from tests.fakes import IdleSlot
from workerd.scheduler import RECOVER_INTERVAL, SchedulerProcess

JOB = "00000000-0000-4000-8000-000000000001"
T0 = 1_796_000_000_000


def _commands(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_idle_listed_queues_cost_one_exists_each_and_no_script(r: redis.Redis) -> None:
    scripts = Scripts(r, Keys(), Policy())
    scripts.load()
    for n in range(40):
        scripts.register_queue(f"idle-{n}")
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)
    scheduler.step(0.0, now_ms=T0)  # reads the list of queues, recovers and trims (none due)
    r.config_resetstat()

    scheduler.step(0.05, now_ms=T0)  # a promote tick

    calls = _commands(r)
    assert "evalsha" not in calls, calls
    assert calls.get("exists") == 41  # the 40 idle queues and default, one pipeline


def test_a_queue_with_a_due_job_is_still_promoted_among_idle_ones(r: redis.Redis) -> None:
    scripts = Scripts(r, Keys(), Policy())
    for n in range(10):
        scripts.register_queue(f"idle-{n}")
    due = validate_enqueue({"type": "t", "queue": "busy", "scheduled_at": format_ms(T0 + 10)})
    scripts.register_queue("busy")
    scripts.enqueue(due, JOB, now_ms=T0)
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)
    scheduler.step(0.0, now_ms=T0)
    r.config_resetstat()

    scheduler.step(RECOVER_INTERVAL, now_ms=T0 + 20)

    job = get_job(r, Keys(), JOB, ["busy"])
    assert job is not None and job.status is JobState.PENDING
    assert _commands(r).get("evalsha") == 1  # the busy queue's promote, nothing else


def test_the_promote_pass_opens_the_rate_gates_of_rate_limited_queues_only(
    r: redis.Redis,
) -> None:
    scripts = Scripts(r, Keys(), Policy())
    scripts.load()
    keys = Keys().for_queue("rated")
    scripts.register_queue("rated")
    scripts.register_queue("capped")
    rated = parse_limits({"types": {"t": {"rate": "1/1s"}}}).compact_json()
    scripts.set_limits("rated", rated)
    scripts.set_limits("capped", parse_limits({"concurrency": 1}).compact_json())
    for n in (1, 2):
        body = validate_enqueue({"type": "t", "queue": "rated"})
        scripts.enqueue(body, f"00000000-0000-4000-8000-00000000000{n}", now_ms=T0)
    assert scripts.claim("w1", queue="rated", now_ms=T0) is not None
    assert scripts.claim("w2", queue="rated", now_ms=T0) is None  # held, the gate closed
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)
    scheduler.step(0.0, now_ms=T0)
    assert scheduler.rated == ["rated"]
    assert r.zcard(keys.held) == 1
    r.config_resetstat()

    scheduler.step(0.05, now_ms=T0 + 1_000)  # the next token is due

    assert r.zcard(keys.held) == 0 and r.zcard(keys.pending) == 1
    calls = _commands(r)
    assert calls.get("exists") == 3 + 1  # three queues' promote check, one queue's gates
