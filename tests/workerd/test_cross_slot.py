"""shared.engine.scripts.cross_slot: a script's follow-up write to the global slot, and its repair.

The due index's own protocol (note, settle, the sweep's repair of it) is proven in
test_scheduler_queues.py; here: what the mechanism costs a job that uses it and one that does
not, that a failed write is logged and not raised, and that any registered write, not only the
due index, is restored by the sweep from its queue's slot.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts, cross_slot
from shared.engine.scripts.due_index import DUE_INDEX
from shared.model.jobs import validate_enqueue
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.tools import commands_caused
from tests.workerd.test_scheduler_queues import T0
from workerd.sweep import Sweep

K = Keys()
JOB = "00000000-0000-4000-8000-000000000001"


@pytest.fixture
def scripts(r: redis.Redis) -> Scripts:
    engine = Scripts(r, K, Policy())
    engine.load()
    return engine


def test_the_due_index_is_a_registered_cross_slot_write() -> None:
    assert DUE_INDEX in cross_slot.registered()
    assert DUE_INDEX.key(K) == K.due


def _spent_by_follow_up(r: redis.Redis, scripts: Scripts, call: Any) -> dict[str, int]:
    """Return the commands `call` costs beyond the same call with no follow-up write
    (commandstats count a script's own commands too, so the cost is the difference)."""
    r.flushall()
    scripts.load()
    with_write = commands_caused(r, call)
    r.flushall()
    scripts.load()
    real_send = DUE_INDEX.send
    try:
        DUE_INDEX.send = lambda *args: None  # type: ignore[method-assign]
        without = commands_caused(r, call)
    finally:
        DUE_INDEX.send = real_send  # type: ignore[method-assign]
    extra = {name: n - without.get(name, 0) for name, n in with_write.items()}
    return {name: n for name, n in extra.items() if n}


def test_a_job_that_needs_no_global_write_pays_nothing_for_the_mechanism(
    r: redis.Redis, scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[Any] = []
    monkeypatch.setattr(DUE_INDEX, "send", lambda *args: sent.append(args))
    plain = validate_enqueue({"type": "t", "queue": "q"})
    scripts.enqueue(plain, JOB, now_ms=T0)
    scripts.enqueue_many([(plain, "00000000-0000-4000-8000-000000000003")], now_ms=T0)
    assert sent == []
    assert r.exists(K.due) == 0


def test_a_delayed_job_pays_one_command_after_its_script(r: redis.Redis, scripts: Scripts) -> None:
    delayed = validate_enqueue({"type": "t", "queue": "q", "delay": "5s"})
    spent = _spent_by_follow_up(r, scripts, lambda: scripts.enqueue(delayed, JOB, now_ms=T0))
    assert spent == {"zadd": 1}
    assert r.zscore(K.due, "q") is None  # the run without the write was the last
    scripts.enqueue(delayed, "00000000-0000-4000-8000-000000000004", now_ms=T0)
    assert r.zscore(K.due, "q") == T0 + 5_000


def test_a_batch_of_delayed_jobs_pays_one_command_for_the_lot(
    r: redis.Redis, scripts: Scripts
) -> None:
    bodies = [
        validate_enqueue({"type": "t", "queue": queue, "delay": f"{n + 1}s"})
        for n, queue in enumerate(["a", "b", "a"])
    ]
    batch = [(body, f"00000000-0000-4000-8000-00000000001{n}") for n, body in enumerate(bodies)]
    spent = _spent_by_follow_up(r, scripts, lambda: scripts.enqueue_many(batch, now_ms=T0))
    assert spent == {"zadd": 1}
    r.flushall()
    scripts.load()
    scripts.enqueue_many(batch, now_ms=T0)
    assert r.zrange(K.due, 0, -1, withscores=True) == [(b"a", T0 + 1_000), (b"b", T0 + 2_000)]


def test_a_failed_write_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    class Down:
        def zadd(self, *args: Any, **kwargs: Any) -> Any:
            raise redis.ConnectionError("the global slot's master is down")

    caplog.set_level(logging.WARNING, logger="shared.engine.scripts.cross_slot")
    cross_slot.follow(Down(), K, DUE_INDEX, {"q": T0})  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == ["due_note_failed"]


def test_an_empty_write_sends_nothing() -> None:
    class Refuses:
        def zadd(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("no entries, no command")

    cross_slot.follow(Refuses(), K, DUE_INDEX, {})  # type: ignore[arg-type]


class Seen(cross_slot.CrossSlotWrite):
    """A write of another shape: a global set of queues that ever held a pending job."""

    name = "seen queues"
    failed_event = "due_note_failed"
    repaired_event = "due_index_repaired"

    def key(self, keys: Keys) -> str:
        return f"{keys.global_prefix}test-seen"

    def send(self, client: Any, key: str, entries: Mapping[str, Any]) -> None:
        client.sadd(key, *entries)

    def evidence(self, queue_keys: Keys) -> tuple[str, ...]:
        return (queue_keys.pending,)

    def read(self, pipe: Any, queue_keys: Keys) -> None:
        pipe.exists(queue_keys.pending)

    def lost(self, client: Any, key: str, replies: Mapping[str, Any]) -> dict[str, Any]:
        wanted = [queue for queue, held in replies.items() if held]
        if not wanted:
            return {}
        present = client.smismember(key, wanted)
        return {queue: 1 for queue, there in zip(wanted, present, strict=True) if not there}


def test_the_sweep_restores_every_registered_write_from_its_queue_s_slot(
    r: redis.Redis, scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = Seen()
    monkeypatch.setattr(cross_slot, "_REGISTERED", [DUE_INDEX, seen])
    scripts.register_queue("plain")
    scripts.register_queue("later")
    scripts.enqueue(validate_enqueue({"type": "t", "queue": "plain"}), JOB, now_ms=T0)
    later = validate_enqueue({"type": "t", "queue": "later", "delay": "7ms"})
    scripts.enqueue(later, "00000000-0000-4000-8000-000000000002", now_ms=T0)
    r.delete(K.due)  # both writes lost: the due entry, and Seen never sent at all

    Sweep(scripts).step(["plain", "later"], now_ms=T0)

    assert r.zrange(K.due, 0, -1, withscores=True) == [(b"later", T0 + 7)]
    assert r.smembers(seen.key(K)) == {b"plain"}
