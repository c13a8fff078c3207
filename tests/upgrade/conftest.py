"""Fixtures for the upgrade tests: v1 data made by v1's own scripts on the private Redis, the
upgrade, the v2 engine, and readers of both layouts' state.

`world` seeds one job (or a few) in every v1 state the way old gateways and workers made them,
at explicit times: T0 is when they were made; the upgrade then runs at NOW, when the lease of
`lost` (its worker gone) has expired and that of `running` (its worker alive) has not.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from shared.engine_types import Code, Policy
from shared.keys import Keys, V1Keys
from shared.scripts import Scripts
from shared.upgrade import V1_STATES, Upgrade
from tests.upgrade.v1 import V1

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
POLICY = Policy(lease_ms=10_000, retry_base_ms=60_000, retry_max_ms=60_000, wake_cap=100)
NOW = T0 + 20_000  # the lease of a job claimed at T0 has expired; one claimed at NOW has not
K, V1K = Keys(), V1Keys()


def job_id(n: int) -> str:
    """Return a valid job id (UUIDv4 shape) whose sort order is the order of `n`."""
    return f"00000000-0000-4000-8000-{n:012d}"


@dataclass
class World:
    """The ids of the jobs seeded in each v1 state, and the idempotency keys made."""

    ids: dict[str, list[str]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # Idempotency-Key -> job id

    def add(self, state: str, jid: str) -> str:
        self.ids.setdefault(state, []).append(jid)
        return jid

    def every(self) -> list[str]:
        return [jid for ids in self.ids.values() for jid in ids]


@pytest.fixture
def v1(r: redis.Redis) -> V1:
    """Return layout v1's scripts on the private (emptied) Redis."""
    return V1(r, V1K, POLICY)


@pytest.fixture
def upgrade(r: redis.Redis) -> Upgrade:
    """Return the upgrade of the default namespace."""
    return Upgrade(r, K, wake_cap=POLICY.wake_cap)


@pytest.fixture
def scripts(r: redis.Redis) -> Scripts:
    """Return the v2 engine, with the test policy."""
    engine = Scripts(r, K, POLICY)
    engine.load()
    return engine


def seed(v1: V1, *, running: bool = True) -> World:
    """Make v1 jobs in every state, as v1 did; `running`: one under a live lease at NOW."""
    world, n = World(), iter(range(1, 100))
    # Pending: two priorities, and FIFO among equals (enqueued in id order).
    for priority in (0, 5, 0, 0):
        jid = world.add("pending", job_id(next(n)))
        v1.enqueue(jid, {"type": "t", "priority": priority, "payload": {"i": jid[-2:]}}, now_ms=T0)
    keyed = world.add("pending", job_id(next(n)))
    body = {"type": "keyed", "payload": {"ü": [1, 2.5]}, "timeout": "90s", "max_retries": 4}
    v1.enqueue(keyed, body, key="order-1", now_ms=T0)
    world.keys["order-1"] = keyed
    scheduled = world.add("scheduled", job_id(next(n)))
    v1.enqueue(scheduled, {"type": "t", "scheduled_at": "2027-01-01T00:00:00Z"}, now_ms=T0)

    def started(state: str, *, at: int = T0, **body: Any) -> tuple[str, int]:
        jid = world.add(state, job_id(next(n)))
        v1.enqueue(jid, {"type": "t", "priority": 100, **body}, now_ms=at)
        claimed = v1.claim("old-worker", now_ms=at)
        assert claimed is not None and claimed.job_id == jid, claimed
        return jid, claimed.token

    assert v1.fail(*started("retrying"), now_ms=T0) is Code.RETRYING
    assert v1.fail(*started("dead", max_retries=1), now_ms=T0) is Code.DEAD
    assert v1.complete(*started("completed"), now_ms=T0) is Code.DONE
    started("processing", at=T0)  # `lost`: its lease expired by NOW
    if running:
        started("running", at=NOW)
    canceled = world.add("canceled", job_id(next(n)))
    v1.enqueue(canceled, {"type": "t", "scheduled_at": "2027-01-01T00:00:00Z"}, now_ms=T0)
    assert v1.cancel(canceled, now_ms=T0) is Code.DONE
    return world


@pytest.fixture
def world(v1: V1) -> World:
    """Return v1 jobs in every state (see seed), one of them under a live lease."""
    return seed(v1)


def v1_job_keys(r: redis.Redis) -> list[str]:
    """Return every v1 key that holds a job or points at one (what must not be left)."""
    kept = {V1K.seq, f"{V1K.prefix}wake"}  # bookkeeping only; see docs/QUEUES.md
    names = sorted(n.decode() for n in r.scan_iter(match=V1K.pattern, count=1000))
    return [n for n in names if n not in kept and not n.startswith(f"{V1K.prefix}claim:")]


def state_of(r: redis.Redis, keys: Keys | V1Keys, jid: str) -> dict[str, Any]:
    """Return what one layout holds of a job: hash, TTL, and its entry in every index."""
    entries: dict[str, Any] = {}
    for state in V1_STATES:
        index = keys.state_index(state)
        if state == "pending":
            for member, score in r.zrange(index, 0, -1, withscores=True):
                if member.decode().endswith(jid):
                    entries["pending"] = (member.decode(), score)
            since = r.zscore(keys.pending_since, jid)
            if since is not None:
                entries["pending_since"] = since
        else:
            score = r.zscore(index, jid)
            if score is not None:
                entries[state] = score
    ttl = r.pttl(keys.job(jid))
    return {"hash": r.hgetall(keys.job(jid)), "expires": ttl > 0, "ttl": ttl, "index": entries}


@pytest.fixture
def before(r: redis.Redis, world: World) -> Iterator[dict[str, dict[str, Any]]]:
    """Return every seeded job's v1 state, read before the upgrade."""
    yield {jid: state_of(r, V1K, jid) for jid in world.every()}
