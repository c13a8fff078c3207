"""Idempotency keys made by v1 after the upgrade: a retry of the same request gets its first job,
another body is refused, a key whose job is gone is forgotten (as v1 forgot it)."""

from __future__ import annotations

import hashlib

import pytest
import redis

from shared.engine_types import IdempotencyConflict
from shared.jobs import validate_enqueue
from shared.scripts import Scripts
from shared.upgrade import Upgrade, request_digests
from tests.upgrade.conftest import NOW, T0, V1K, K, World, job_id, v1_job_keys
from tests.upgrade.v1 import V1, v1_canonical

KEYED_BODY = {"type": "keyed", "payload": {"ü": [1, 2.5]}, "timeout": "90s", "max_retries": 4}


def test_a_retried_v1_request_gets_its_first_job_after_the_upgrade(
    r: redis.Redis, world: World, upgrade: Upgrade, scripts: Scripts
) -> None:
    upgrade.run(now_ms=NOW)
    first = world.keys["order-1"]

    again = scripts.enqueue(
        validate_enqueue(KEYED_BODY), job_id(98), idempotency_key="order-1", now_ms=NOW
    )

    assert (again.job_id, again.created) == (first, False)
    assert r.exists(K.job(job_id(98))) == 0
    assert r.exists(V1K.idempotency("order-1")) == 0


def test_a_v1_key_reused_with_another_body_is_refused_after_the_upgrade(
    r: redis.Redis, world: World, upgrade: Upgrade, scripts: Scripts
) -> None:
    upgrade.run(now_ms=NOW)

    with pytest.raises(IdempotencyConflict):
        scripts.enqueue(
            validate_enqueue({**KEYED_BODY, "priority": 1}),
            job_id(98),
            idempotency_key="order-1",
            now_ms=NOW,
        )


def test_a_moved_key_keeps_its_ttl(r: redis.Redis, world: World, upgrade: Upgrade) -> None:
    ttl = r.pttl(V1K.idempotency("order-1"))

    upgrade.run(now_ms=NOW)

    assert ttl - 2_000 < r.pttl(K.idempotency("order-1")) <= ttl
    assert r.hget(K.idempotency("order-1"), "queue") == b"default"


@pytest.mark.parametrize(
    "body",
    [
        {"type": "t"},
        {"type": "t", "payload": {"b": [1, {"z": None, "a": "é"}], "n": 1e20}, "priority": -7},
        {"type": "t", "scheduled_at": "2026-06-01T00:00:00.123+02:00", "timeout": 2.5},
        {"type": "t", "timeout": "500ms", "max_retries": 100, "priority": 8.0},
    ],
)
def test_digests_rebuilt_from_the_job_are_those_of_its_request(
    r: redis.Redis, v1: V1, body: dict[str, object]
) -> None:
    jid = job_id(1)
    v1.enqueue(jid, body, key="k", now_ms=T0)
    fields = r.hmget(
        V1K.job(jid), "type", "payload", "priority", "max_retries", "scheduled_at", "timeout"
    )
    request = validate_enqueue(body)

    v1_digest, v2_digest = request_digests(fields)

    assert v1_digest == r.hget(V1K.idempotency("k"), "digest").decode()
    assert v1_digest == hashlib.sha256(v1_canonical(request).encode()).hexdigest()
    assert v2_digest == hashlib.sha256(request.canonical().encode()).hexdigest()


def test_a_key_whose_job_is_gone_is_forgotten_as_v1_forgot_it(
    r: redis.Redis, v1: V1, upgrade: Upgrade, scripts: Scripts
) -> None:
    v1.enqueue(job_id(1), {"type": "t"}, key="k", now_ms=T0)
    r.delete(V1K.job(job_id(1)), V1K.state_index("pending"), V1K.pending_since)  # trimmed

    moved = upgrade.run(now_ms=NOW)

    assert moved.keys == {"forgotten": 1}
    assert r.exists(V1K.idempotency("k"), K.idempotency("k")) == 0
    made = scripts.enqueue(validate_enqueue({"type": "t"}), job_id(2), idempotency_key="k")
    assert made.created and made.job_id == job_id(2)


def test_a_key_whose_job_a_v1_worker_runs_waits_for_its_job(
    r: redis.Redis, v1: V1, upgrade: Upgrade
) -> None:
    v1.enqueue(job_id(1), {"type": "t"}, key="k", now_ms=NOW)
    claimed = v1.claim("old", now_ms=NOW)
    assert claimed is not None

    first = upgrade.run(now_ms=NOW)
    v1.complete(job_id(1), claimed.token, now_ms=NOW)
    second = upgrade.run(now_ms=NOW)

    assert (first.keys, first.held) == ({"waiting": 1}, 1)
    assert second.keys == {"moved": 1} and second.jobs == {"completed": 1}
    assert r.hget(K.idempotency("k"), "job_id") == job_id(1).encode()
    assert v1_job_keys(r) == []


def test_a_v2_key_of_the_same_name_wins(
    r: redis.Redis, v1: V1, upgrade: Upgrade, scripts: Scripts
) -> None:
    v1.enqueue(job_id(1), {"type": "t"}, key="k", now_ms=T0)
    scripts.enqueue(validate_enqueue({"type": "v2"}), job_id(2), idempotency_key="k")

    moved = upgrade.run(now_ms=NOW)

    assert moved.keys == {"superseded": 1} and moved.jobs == {"pending": 1}
    assert r.hget(K.idempotency("k"), "job_id") == job_id(2).encode()
    assert r.exists(V1K.idempotency("k")) == 0


def test_a_key_whose_digest_cannot_be_rebuilt_refuses_every_request(
    r: redis.Redis, v1: V1, upgrade: Upgrade, scripts: Scripts
) -> None:
    v1.enqueue(job_id(1), {"type": "t"}, key="k", now_ms=T0)
    r.hset(V1K.idempotency("k"), "digest", "0" * 64)  # not what any request digests to

    moved = upgrade.run(now_ms=NOW)

    assert moved.keys == {"refused": 1}
    with pytest.raises(IdempotencyConflict) as refused:
        scripts.enqueue(validate_enqueue({"type": "t"}), job_id(2), idempotency_key="k")
    assert refused.value.job_id == job_id(1)  # 409 names the job: nothing ran twice
    assert r.exists(K.job(job_id(2))) == 0


def test_a_v1_key_changed_since_it_was_read_is_left_for_the_next_pass(
    r: redis.Redis, v1: V1, upgrade: Upgrade, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1.enqueue(job_id(1), {"type": "t"}, key="k", now_ms=T0)
    upgrade.move_jobs(now_ms=NOW)
    call = upgrade._call

    def reused_meanwhile(name: str, keys: list[str], args: list[object]) -> object:
        if name == "upgrade_idem":  # between the read and the move, a v1 enqueue reuses it
            r.hset(V1K.idempotency("k"), mapping={"digest": "d2", "job_id": job_id(2)})
        return call(name, keys, args)

    monkeypatch.setattr(upgrade, "_call", reused_meanwhile)
    moved = upgrade.run(now_ms=NOW)

    assert moved.keys == {"changed": 1}
    assert r.hget(V1K.idempotency("k"), "job_id") == job_id(2).encode()
    assert r.exists(K.idempotency("k")) == 0
