"""python -m shared.upgrade's engine on a real Redis holding v1 data made by v1's scripts: every
job reaches v2 as it was, v1 is left empty, the line keeps its order, a second run does nothing."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from shared.engine_types import Code
from shared.jobs import JobState, validate_enqueue
from shared.keys import Keys, V1Keys
from shared.queries import get_job
from shared.scripts import Scripts
from shared.upgrade import Upgrade
from tests.engine.conftest import snapshot
from tests.upgrade.conftest import (
    NOW,
    POLICY,
    T0,
    V1K,
    K,
    World,
    job_id,
    seed,
    state_of,
    v1_job_keys,
)
from tests.upgrade.v1 import V1

TTL_SLACK_MS = 2_000


def test_every_job_reaches_v2_with_its_fields_state_index_score_and_ttl(
    r: redis.Redis, world: World, upgrade: Upgrade, before: dict[str, dict[str, Any]]
) -> None:
    moved = upgrade.run(now_ms=NOW)

    movable = [jid for jid in world.every() if jid not in world.ids["running"]]
    for jid in movable:
        was, now = before[jid], state_of(r, K, jid)
        assert now["hash"] == was["hash"], jid  # every field as it was: token, attempts, seq…
        assert now["index"] == was["index"], jid  # the same index, the same score (and member)
        assert now["expires"] == was["expires"], jid
        if was["expires"]:
            assert was["ttl"] - TTL_SLACK_MS < now["ttl"] <= was["ttl"], jid
        assert r.exists(V1K.job(jid)) == 0, jid
    assert {state: moved.jobs[state] for state in moved.jobs} == {
        state: len(ids) for state, ids in world.ids.items() if state != "running"
    }
    assert moved.held == 1 and moved.keys == {"moved": 1}


def test_v1_keeps_nothing_but_the_job_a_live_lease_holds(
    r: redis.Redis, world: World, upgrade: Upgrade
) -> None:
    upgrade.run(now_ms=NOW)

    (running,) = world.ids["running"]
    assert v1_job_keys(r) == [V1K.job(running), V1K.state_index("processing")]


def test_v1_is_empty_once_every_job_is_finished_or_lost(r: redis.Redis, v1: V1) -> None:
    seed(v1, running=False)

    Upgrade(r, K).run(now_ms=NOW)

    assert v1_job_keys(r) == []


def test_the_moved_jobs_read_as_v1_wrote_them(
    r: redis.Redis, world: World, upgrade: Upgrade
) -> None:
    upgrade.run(now_ms=NOW)

    for state, ids in world.ids.items():
        if state == "running":
            continue
        for jid in ids:
            job = get_job(r, K, jid)
            assert job is not None and job.queue == "default", jid
            assert str(job.status) == state, jid
    dead = get_job(r, K, world.ids["dead"][0])
    assert dead is not None and dead.last_error == "Boom: it broke"


def test_a_second_run_changes_nothing(r: redis.Redis, world: World, upgrade: Upgrade) -> None:
    upgrade.run(now_ms=NOW)
    state = snapshot(r, K), snapshot_v1(r)

    moved = upgrade.run(now_ms=NOW)

    assert (snapshot(r, K), snapshot_v1(r)) == state
    assert moved.total == 0 and not moved.keys and moved.held == 1


def test_the_line_keeps_its_order_and_later_v2_jobs_queue_behind(
    r: redis.Redis, world: World, upgrade: Upgrade, scripts: Scripts
) -> None:
    upgrade.run(now_ms=NOW)
    late = job_id(99)
    scripts.enqueue(validate_enqueue({"type": "t"}), late, now_ms=NOW)

    order = []
    while (claimed := scripts.claim("w2", now_ms=NOW)) is not None:
        order.append(claimed.id)

    pending = world.ids["pending"]
    # Priority 5 first; then priority 0 in v1's order; then the job v2 made after the move.
    assert order == [pending[1], pending[0], pending[2], pending[3], pending[4], late]


def test_a_job_whose_lease_expired_is_recovered_by_v2_as_v1_would_have(
    r: redis.Redis, world: World, upgrade: Upgrade, scripts: Scripts
) -> None:
    upgrade.run(now_ms=NOW)
    (lost,) = world.ids["processing"]

    recovered = scripts.recover(now_ms=NOW)

    assert recovered.requeued == [lost]
    job = get_job(r, K, lost)
    assert job is not None and job.status is JobState.PENDING
    assert (job.attempts, job.recoveries) == (0, 1)


def test_a_job_a_v1_worker_runs_moves_once_it_finishes_there(
    r: redis.Redis, world: World, upgrade: Upgrade, v1: V1
) -> None:
    upgrade.run(now_ms=NOW)
    (running,) = world.ids["running"]
    token = int(r.hget(V1K.job(running), "token") or 0)

    assert v1.complete(running, token, now_ms=NOW + 1) is Code.DONE  # the old worker finishes
    moved = upgrade.run(now_ms=NOW + 1)

    assert moved.jobs == {"completed": 1} and moved.held == 0
    job = get_job(r, K, running)
    assert job is not None and job.status is JobState.COMPLETED and job.result_json == '{"ok":true}'
    assert v1_job_keys(r) == []


def test_a_job_a_v1_worker_lost_moves_once_its_lease_ends(
    r: redis.Redis, world: World, upgrade: Upgrade
) -> None:
    upgrade.run(now_ms=NOW)
    (running,) = world.ids["running"]

    moved = upgrade.run(now_ms=NOW + POLICY.lease_ms + 1)

    assert moved.jobs == {"processing": 1}
    assert r.zscore(K.processing, running) == NOW + POLICY.lease_ms


def test_pending_jobs_wake_idle_v2_workers(r: redis.Redis, world: World, upgrade: Upgrade) -> None:
    upgrade.run(now_ms=NOW)

    assert r.llen(K.wake) == len(world.ids["pending"])


def test_v2_sequence_numbers_continue_past_v1s(
    r: redis.Redis, world: World, upgrade: Upgrade
) -> None:
    upgrade.run(now_ms=NOW)

    assert int(r.get(K.seq) or 0) == int(r.get(V1K.seq) or 0) > 0


def test_a_v1_index_entry_without_its_hash_is_removed(
    r: redis.Redis, v1: V1, upgrade: Upgrade
) -> None:
    jid = job_id(1)
    v1.enqueue(jid, {"type": "t"}, now_ms=T0)
    r.delete(V1K.job(jid))  # by hand: v1 itself never leaves one

    moved = upgrade.run(now_ms=NOW)

    assert moved.dangling == 1 and moved.total == 0
    assert v1_job_keys(r) == [] and r.exists(K.job(jid)) == 0


def test_a_v1_job_hash_outside_every_index_moves_as_it_is(
    r: redis.Redis, v1: V1, upgrade: Upgrade
) -> None:
    jid = job_id(1)
    v1.enqueue(jid, {"type": "t"}, now_ms=T0)
    r.delete(V1K.state_index("pending"), V1K.pending_since)  # by hand, as above
    fields = r.hgetall(V1K.job(jid))

    moved = upgrade.run(now_ms=NOW)

    assert moved.jobs == {"unindexed": 1}
    assert r.hgetall(K.job(jid)) == fields and v1_job_keys(r) == []
    assert r.zcard(K.pending) == 0


def test_a_bigger_v1_moves_in_batches(r: redis.Redis, v1: V1) -> None:
    ids = [job_id(n) for n in range(1, 1_201)]
    for jid in ids:
        v1.enqueue(jid, {"type": "t", "payload": {"blob": "x" * 200}}, now_ms=T0)

    moved = Upgrade(r, K).run(batch=500, now_ms=NOW)

    assert moved.jobs == {"pending": 1_200}
    members = [m.decode() for m in r.zrange(K.pending, 0, -1)]
    assert [m.split(":", 1)[1] for m in members] == ids
    assert v1_job_keys(r) == []


def test_a_namespace_other_than_taskforge_moves_its_own_v1(r: redis.Redis) -> None:
    mine, theirs = V1(r, V1Keys("{shop}:v1:"), POLICY), V1(r, V1K, POLICY)
    mine.enqueue(job_id(1), {"type": "t"}, now_ms=T0)
    theirs.enqueue(job_id(2), {"type": "t"}, now_ms=T0)

    moved = Upgrade(r, Keys("shop")).run(now_ms=NOW)

    assert moved.jobs == {"pending": 1}
    assert r.exists(Keys("shop").job(job_id(1))) == 1
    assert r.exists(V1K.job(job_id(2))) == 1  # another namespace's v1: not ours to move


def test_census_counts_what_a_run_would_move(
    r: redis.Redis, world: World, upgrade: Upgrade
) -> None:
    census = upgrade.census(now_ms=NOW)

    expected = {state: len(ids) for state, ids in world.ids.items() if state != "running"}
    assert {s: n for s, n in census.by_state.items() if n} == expected
    assert (census.held, census.staged, census.idempotency_keys) == (1, 0, 1)
    assert census.job_hashes == len(world.every())
    assert v1_job_keys(r) != []  # nothing moved


def snapshot_v1(r: redis.Redis) -> dict[str, Any]:
    """Return every v1 key's value (the v2 snapshot's reader, on the v1 prefix)."""
    return {
        name.decode(): (r.type(name), r.dump(name))
        for name in sorted(r.scan_iter(match=V1K.pattern, count=1000))
    }


def test_big_payloads_are_copied_a_few_megabytes_a_call(
    r: redis.Redis, v1: V1, upgrade: Upgrade, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [job_id(n) for n in range(1, 13)]
    for jid in ids:
        v1.enqueue(jid, {"type": "t", "payload": {"blob": "x" * 900_000}}, now_ms=T0)
    sizes: list[int] = []
    call = upgrade._call

    def measured(name: str, keys: list[str], args: list[Any]) -> Any:
        if name == "upgrade_copy":
            sizes.append(sum(len(a) for a in args if isinstance(a, bytes)))
        return call(name, keys, args)

    monkeypatch.setattr(upgrade, "_call", measured)
    moved = upgrade.run(now_ms=NOW)

    assert moved.jobs == {"pending": 12}
    assert len(sizes) >= 3 and max(sizes) < 5 * 1024 * 1024, sizes
    assert all(
        r.hget(K.job(jid), "payload") == b'{"blob":"' + b"x" * 900_000 + b'"}' for jid in ids
    )


def test_a_job_finished_during_a_runs_key_walk_still_counts_as_held(
    r: redis.Redis, world: World, v1: V1
) -> None:
    """The old worker finishes its job between the run's index pass (it was held then) and the
    key walk: that run leaves it in v1, so it must not report nothing held (--wait would stop
    and say done); the next run moves it."""
    (running,) = world.ids["running"]
    token = int(r.hget(V1K.job(running), "token") or 0)

    class FinishingDuringTheWalk(Upgrade):
        def scan(self, cursor: int) -> tuple[int, list[str], list[bytes]]:
            if cursor == 0:
                assert v1.complete(running, token, now_ms=NOW + 1) is Code.DONE
            return super().scan(cursor)

    moved = FinishingDuringTheWalk(r, K, wake_cap=POLICY.wake_cap).run(now_ms=NOW + 1)
    assert moved.held == 1 and r.exists(V1K.job(running))

    again = Upgrade(r, K, wake_cap=POLICY.wake_cap).run(now_ms=NOW + 1)
    assert again.jobs == {"completed": 1} and again.held == 0
