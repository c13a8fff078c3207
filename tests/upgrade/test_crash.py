"""An upgrade stopped between its steps loses nothing and copies nothing twice: the next run
finishes what the stopped one left staged."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from shared.engine_types import Code
from shared.jobs import JobState
from shared.queries import get_job
from shared.scripts import Scripts
from shared.upgrade import V1_STATES, Upgrade
from tests.upgrade.conftest import NOW, V1K, K, World, state_of, v1_job_keys


class Stopped(Exception):
    """The process running the upgrade died here."""


def places(r: redis.Redis, jid: str) -> set[str]:
    """Return where a job is: its v1 hash, the staging area, its v2 hash."""
    found = {"v1": V1K.job(jid), "staged": V1K.staged(jid), "v2": K.job(jid)}
    return {place for place, key in found.items() if r.exists(key)}


def v2_indexes(r: redis.Redis, jid: str) -> list[str]:
    """Return the v2 indexes that name a job."""
    return list(state_of(r, K, jid)["index"])


def stop_at(monkeypatch: pytest.MonkeyPatch, upgrade: Upgrade, step: str) -> None:
    """Make `upgrade` die the first time it would call `step` (upgrade_copy or upgrade_drop)."""
    call = upgrade._call

    def dying(name: str, keys: list[str], args: list[Any]) -> Any:
        if name == step:
            raise Stopped(step)
        return call(name, keys, args)

    monkeypatch.setattr(upgrade, "_call", dying)


@pytest.mark.parametrize("step", ["upgrade_copy", "upgrade_drop"])
def test_a_job_is_never_in_neither_layout_when_the_upgrade_dies(
    r: redis.Redis, world: World, upgrade: Upgrade, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    stop_at(monkeypatch, upgrade, step)

    with pytest.raises(Stopped):
        upgrade.run(now_ms=NOW)

    staged = {k.decode() for k in r.hkeys(V1K.moving)}
    assert staged, "the run died with jobs staged"
    for jid in world.every():
        where = places(r, jid)
        if jid in staged:
            assert where == ({"staged"} if step == "upgrade_copy" else {"staged", "v2"}), jid
        else:
            assert where == {"v1"}, jid


@pytest.mark.parametrize("step", ["upgrade_copy", "upgrade_drop"])
def test_the_next_run_finishes_with_exactly_one_copy_of_each_job(
    r: redis.Redis,
    world: World,
    before: dict[str, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    dying = Upgrade(r, K)
    stop_at(monkeypatch, dying, step)
    with pytest.raises(Stopped):
        dying.run(now_ms=NOW)
    staged = r.hlen(V1K.moving)

    moved = Upgrade(r, K).run(now_ms=NOW)

    (running,) = world.ids["running"]
    for jid in world.every():
        if jid == running:
            continue
        assert places(r, jid) == {"v2"}, jid
        assert len(v2_indexes(r, jid)) in (1, 2), jid  # pending: pending and pending_since
        assert state_of(r, K, jid)["hash"] == before[jid]["hash"], jid
    assert moved.present == (staged if step == "upgrade_drop" else 0)
    assert moved.total + moved.present == len(world.every()) - 1
    assert r.exists(V1K.moving) == 0
    assert v1_job_keys(r) == [V1K.job(running), V1K.state_index("processing")]


def test_what_v2_did_to_a_copy_survives_the_run_that_finishes_the_move(
    r: redis.Redis, world: World, scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    dying = Upgrade(r, K)
    stop_at(monkeypatch, dying, "upgrade_drop")
    with pytest.raises(Stopped):
        dying.run(now_ms=NOW)
    claimed = scripts.claim("v2-worker", now_ms=NOW)  # a v2 worker takes a copy meanwhile
    assert claimed is not None
    assert scripts.complete(claimed.id, claimed.token, now_ms=NOW).code is Code.DONE

    Upgrade(r, K).run(now_ms=NOW)

    job = get_job(r, K, claimed.id)
    assert job is not None and job.status is JobState.COMPLETED
    assert v2_indexes(r, claimed.id) == ["completed"]


def test_a_staged_hash_that_expires_before_the_next_run_is_gone_as_in_v1(
    r: redis.Redis, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    dying = Upgrade(r, K)
    stop_at(monkeypatch, dying, "upgrade_copy")
    with pytest.raises(Stopped):
        dying.run(now_ms=NOW)
    (dead,) = world.ids["dead"]
    assert r.hexists(V1K.moving, dead)
    r.delete(V1K.staged(dead))  # what its TTL (the DLQ's age) does

    moved = Upgrade(r, K).run(now_ms=NOW)

    assert moved.expired == 1 and "dead" not in moved.jobs
    assert places(r, dead) == set() and r.exists(V1K.moving) == 0


def test_every_state_is_walked(world: World) -> None:
    assert set(world.ids) - {"running"} == set(V1_STATES)
