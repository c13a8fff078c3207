"""An upgrade while old and new processes run: old workers still claim and finish v1 jobs, new
ones claim the moved copies, and no job runs twice or is lost."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from shared.engine_types import Code
from shared.jobs import JobState
from shared.queries import get_job
from shared.scripts import Scripts
from shared.upgrade import Upgrade
from tests.support.redis_server import RedisServer
from tests.upgrade.conftest import NOW, POLICY, T0, V1K, K, job_id, v1_job_keys
from tests.upgrade.v1 import V1

JOBS = 400
RUN_TIMEOUT = 30.0


def test_a_job_staged_is_out_of_reach_of_an_old_worker_and_a_new_one(
    r: redis.Redis, v1: V1, upgrade: Upgrade, scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [job_id(n) for n in range(1, 5)]
    for jid in ids:
        v1.enqueue(jid, {"type": "t"}, now_ms=T0)
    seen: dict[str, Any] = {}
    call = upgrade._call

    def workers_meanwhile(name: str, keys: list[str], args: list[Any]) -> Any:
        if name == "upgrade_copy" and not seen:  # two jobs staged, two still in v1
            seen["v1"] = v1.claim("old", now_ms=NOW)
            seen["v2"] = scripts.claim("new", now_ms=NOW)
            seen["cancel"] = v1.cancel(ids[0], now_ms=NOW)
        return call(name, keys, args)

    monkeypatch.setattr(upgrade, "_call", workers_meanwhile)
    upgrade.move_jobs(2, now_ms=NOW)

    assert seen["v1"] is not None and seen["v1"].job_id == ids[2]  # the best job left in v1
    assert seen["v2"] is None  # nothing copied yet
    assert seen["cancel"] is Code.NOT_FOUND  # an old gateway cannot change it mid-move
    assert [m.split(b":", 1)[1].decode() for m in r.zrange(K.pending, 0, -1)] == ids[:2]
    assert get_job(r, K, ids[2]) is None  # claimed in v1: it stays there under its lease


def test_old_and_new_workers_beside_repeated_upgrades_run_every_job_once(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    seeder = V1(r, V1K, POLICY)
    ids = [job_id(n) for n in range(1, JOBS + 1)]
    for jid in ids:
        seeder.enqueue(jid, {"type": "t"})
    ran: Counter[str] = Counter()
    by: Counter[str] = Counter()
    refused: list[str] = []
    lock, stop = threading.Lock(), threading.Event()

    def worker(side: str, claim_and_complete: Callable[[], tuple[str, bool] | None]) -> None:
        while not stop.is_set():
            done = claim_and_complete()
            if done is None:
                stop.wait(0.001)  # nothing to claim: ask again (these workers do not block)
                continue
            with lock:
                ran[done[0]] += 1
                by[side] += 1
                if not done[1]:
                    refused.append(done[0])

    def old_worker() -> Callable[[], tuple[str, bool] | None]:
        old = V1(redis.Redis.from_url(redis_server.url), V1K, POLICY)

        def step() -> tuple[str, bool] | None:
            claimed = old.claim("old")
            if claimed is None:
                return None
            return claimed.job_id, old.complete(claimed.job_id, claimed.token) is Code.DONE

        return step

    def new_worker() -> Callable[[], tuple[str, bool] | None]:
        new = Scripts(redis.Redis.from_url(redis_server.url), K, POLICY)

        def step() -> tuple[str, bool] | None:
            claimed = new.claim("new")
            if claimed is None:
                return None
            return claimed.id, new.complete(claimed.id, claimed.token).code is Code.DONE

        return step

    threads = [
        threading.Thread(target=worker, args=(side, make()), daemon=True)
        for side, make in (
            ("old", old_worker),
            ("old", old_worker),
            ("new", new_worker),
            ("new", new_worker),
        )
    ]
    for thread in threads:
        thread.start()
    upgrade = Upgrade(redis.Redis.from_url(redis_server.url), K)
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while time.monotonic() < deadline:
            upgrade.run(batch=25)
            if sum(ran.values()) == JOBS and not upgrade.v1_holds_jobs():
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=5)
    upgrade.run()

    assert sum(ran.values()) == JOBS, f"{sum(ran.values())} of {JOBS} ran"
    assert refused == []  # every completion was the holder's
    assert by["old"] > 0 and by["new"] > 0, by  # both kinds of worker took part
    assert set(ran) == set(ids) and set(ran.values()) == {1}  # each once, none lost
    for jid in ids:
        job = get_job(r, K, jid)
        assert job is not None and job.status is JobState.COMPLETED, jid
    assert v1_job_keys(r) == []
