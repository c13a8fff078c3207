"""Fixtures for the script tests: one Scripts on the private redis-server, a fixed clock,
small policy values, fixed job ids, and a reader of every key's state.

Tests seed state through the scripts themselves, call ONE wrapper with an explicit `now_ms`,
and compare `snapshot()`s taken before and after to assert every key the call touched.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Code, Policy
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts, load_source
from shared.model.jobs import EnqueueRequest, Job, JobState, validate_enqueue
from tests.support.slots import one_slot

# 2026-01-01T00:00:00Z. Every script call passes an explicit now, counted from here.
T0 = 1_767_225_600_000

# Small values so each rule is reached in a few calls; far from every default, so a test that
# passes is not passing by accident of the defaults.
POLICY = Policy(
    lease_ms=10_000,
    retry_base_ms=1_000,
    retry_max_ms=5_000,
    retry_jitter=0.0,
    max_recoveries=2,
    finished_retention_ms=60_000,
    dlq_max_age_ms=120_000,
    dlq_max_jobs=4,
    finished_max_jobs=3,
    idempotency_ttl_ms=30_000,
    wake_cap=3,
    batch_limit=50,
)
K = Keys()
# Finished hashes expire after retention plus this margin (shared.engine.scripts.HASH_TTL_MARGIN_MS).
FINISHED_TTL_MS = POLICY.finished_retention_ms + 5 * 60 * 1000
# PTTL is read a few ms after the script set it; TTLs are asserted within this slack.
TTL_SLACK_MS = 2_000

_INTEGER = re.compile(r"-?\d+")


def job_id(n: int) -> str:
    """Return a valid job id (UUIDv4 shape) whose sort order is the order of `n`."""
    return f"00000000-0000-4000-8000-{n:012d}"


J1, J2, J3, J4, J5, J6 = (job_id(n) for n in range(1, 7))


def pending_member(seq: int, jid: str) -> str:
    """Return the pending zset member of a job with sequence number `seq`."""
    return f"{seq:016d}:{jid}"


def request(job_type: str = "t", **fields: Any) -> EnqueueRequest:
    """Return a validated enqueue request (the body a client would POST)."""
    return validate_enqueue({"type": job_type, **fields})


@pytest.fixture
def scripts(r: redis.Redis) -> Scripts:
    """Return the engine on the private server with the small test policy, scripts loaded."""
    engine = one_slot(Scripts(r, K, POLICY))  # every call's KEYS in one cluster slot
    engine.load()
    return engine


@pytest.fixture
def make_scripts(r: redis.Redis) -> Callable[..., Scripts]:
    """Return a factory of engines whose policy differs from POLICY in the given fields."""

    def make(**overrides: Any) -> Scripts:
        engine = one_slot(Scripts(r, K, dataclasses.replace(POLICY, **overrides)))
        engine.load()
        return engine

    return make


@pytest.fixture
def pin_request_id(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Return a function that makes every later wrapper call send the given request id, as
    redis-py's retry of a call whose reply was lost does."""

    def pin(request_id: str) -> None:
        monkeypatch.setattr("shared.engine.scripts.script_base.new_request_id", lambda: request_id)

    return pin


def raw_script(r: redis.Redis, name: str) -> Any:
    """Return a script registered on its own, to call with arguments a test chooses."""
    return r.register_script(load_source(name))


class Snapshot(dict[str, Any]):
    """Every key under the prefix → its decoded value; `expiring` names the keys with a TTL."""

    expiring: frozenset[str] = frozenset()


def _number(text: str) -> Any:
    return int(text) if _INTEGER.fullmatch(text) else text


def _score(score: float) -> int | float:
    return int(score) if score == int(score) else score


def snapshot(r: redis.Redis, keys: Keys = K) -> Snapshot:
    """Return each key's state: zsets as [(member, score)] in rank order, hashes as dicts,
    lists and strings as values, sets as sorted lists; integer-looking text becomes int.
    The events streams are left out (see test_events.py)."""
    state = Snapshot()
    expiring = set()
    names = [*r.scan_iter(match=f"{keys.prefix}*", count=1000)]
    names += r.scan_iter(match=f"{keys.global_prefix}*", count=1000)
    for raw in sorted(names):
        name = raw.decode()
        kind = r.type(raw).decode()
        if kind == "stream":
            # The events streams: every transition appends to one, so a snapshot that held them
            # would make each test name them; tests/engine/test_events.py checks them instead.
            continue
        if kind == "zset":
            value: Any = [(m.decode(), _score(s)) for m, s in r.zrange(raw, 0, -1, withscores=True)]
        elif kind == "hash":
            value = {f.decode(): _number(v.decode()) for f, v in r.hgetall(raw).items()}
        elif kind == "list":
            value = [_number(v.decode()) for v in r.lrange(raw, 0, -1)]
        elif kind == "string":
            value = _number(r.get(raw).decode())
        elif kind == "set":  # the list of queues
            value = sorted(m.decode() for m in r.smembers(raw))
        else:
            raise AssertionError(f"unexpected {kind} at {name}")
        state[name] = value
        if r.pttl(raw) >= 0:
            expiring.add(name)
    state.expiring = frozenset(expiring)
    return state


def changed(before: Snapshot, after: Snapshot) -> set[str]:
    """Return the keys whose value, existence or expiry differs between two snapshots."""
    names = set(before) | set(after)
    return {
        n
        for n in names
        if before.get(n) != after.get(n) or (n in before.expiring) != (n in after.expiring)
    }


def assert_ttl(r: redis.Redis, key: str, ttl_ms: int) -> None:
    """Assert that `key` expires in `ttl_ms`, give or take the time the test took."""
    remaining = r.pttl(key)
    assert ttl_ms - TTL_SLACK_MS < remaining <= ttl_ms, (key, remaining, ttl_ms)


def job(r: redis.Redis, jid: str) -> Job:
    """Return a job that must exist."""
    found = get_job(r, K, jid)
    assert found is not None, jid
    return found


# --- seeding through the scripts themselves --------------------------------------------------


def enqueue(scripts: Scripts, jid: str, *, now: int = T0, **fields: Any) -> str:
    """Enqueue a job of type `t` with the given body fields."""
    result = scripts.enqueue(request(**fields), jid, now_ms=now)
    assert result.created, result
    return jid


def claim(scripts: Scripts, jid: str, *, worker: str = "w1", now: int = T0) -> Job:
    """Claim and assert that the claimed job is `jid` (the test arranged it to be next)."""
    claimed = scripts.claim(worker, now_ms=now)
    assert claimed is not None and claimed.id == jid, claimed
    return claimed


def start(scripts: Scripts, jid: str, *, now: int = T0, worker: str = "w1", **fields: Any) -> Job:
    """Enqueue a job and claim it: it is processing, attempt 1."""
    enqueue(scripts, jid, now=now, **fields)
    return claim(scripts, jid, worker=worker, now=now)


def finish(scripts: Scripts, jid: str, *, now: int = T0, **fields: Any) -> Job:
    """Run a job to completed at `now`."""
    started = start(scripts, jid, now=now, **fields)
    assert scripts.complete(jid, started.token, now_ms=now).code is Code.DONE
    return job(scripts.redis, jid)


def kill(scripts: Scripts, jid: str, *, now: int = T0, error: str = "boom", **fields: Any) -> Job:
    """Run a job to dead at `now` (one execution allowed, and it failed)."""
    started = start(scripts, jid, now=now, max_retries=1, **fields)
    assert scripts.fail(jid, started.token, error, now_ms=now).code is Code.DEAD
    dead = job(scripts.redis, jid)
    assert dead.status is JobState.DEAD
    return dead


def fail_to_retrying(scripts: Scripts, jid: str, *, now: int = T0, **fields: Any) -> Job:
    """Run a job's first execution to a failure: it waits in retrying."""
    started = start(scripts, jid, now=now, **fields)
    assert scripts.fail(jid, started.token, "boom", now_ms=now).code is Code.RETRYING
    return job(scripts.redis, jid)
