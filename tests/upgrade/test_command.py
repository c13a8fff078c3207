"""``python -m shared.upgrade`` as an operator runs it: --dry-run, a run, --wait, and its exit
codes (0 done, 1 error, 2 usage)."""

from __future__ import annotations

import subprocess
import sys
import time

import redis

from shared.keys import Keys, V1Keys
from shared.upgrade import Upgrade
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT, free_port, wait_until
from tests.support.workerd import scrubbed_environment
from tests.upgrade.conftest import K, job_id, v1_job_keys
from tests.upgrade.v1 import V1

CLI_TIMEOUT = 30.0


def run(server: RedisServer, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shared.upgrade", *args],
        cwd=ROOT,
        env=scrubbed_environment() | {"REDIS_URL": server.url} | env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def seed_now(v1: V1) -> list[str]:
    """Make v1 jobs at Redis's own time: two pending (one keyed), one completed."""
    ids = [job_id(n) for n in (1, 2, 3)]
    v1.enqueue(ids[0], {"type": "t"}, key="k")
    v1.enqueue(ids[1], {"type": "t"})
    v1.enqueue(ids[2], {"type": "t", "priority": 9})
    claimed = v1.claim("old")
    assert claimed is not None and claimed.job_id == ids[2]
    v1.complete(claimed.job_id, claimed.token)
    return ids


def test_dry_run_prints_what_would_move_and_moves_nothing(
    r: redis.Redis, redis_server: RedisServer, v1: V1
) -> None:
    seed_now(v1)

    result = run(redis_server, "--dry-run")

    assert (result.returncode, result.stderr) == (0, "")
    assert "would move to queue default" in result.stdout
    assert "pending 2, completed 1 (3 jobs)" in result.stdout
    assert "idempotency keys: 1" in result.stdout
    assert r.dbsize() and not r.exists(K.job(job_id(1)))


def test_a_run_moves_everything_and_says_so(
    r: redis.Redis, redis_server: RedisServer, v1: V1
) -> None:
    ids = seed_now(v1)

    result = run(redis_server)

    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    assert "moved to queue default: pending 2, completed 1 (3 jobs)" in result.stdout
    assert "idempotency keys: 1 moved" in result.stdout
    assert result.stdout.endswith("done\n")
    assert all(r.exists(K.job(jid)) for jid in ids) and v1_job_keys(r) == []
    again = run(redis_server)
    assert again.returncode == 0 and "moved to queue default: no job" in again.stdout


def test_wait_moves_a_running_job_once_its_old_worker_finishes_it(
    r: redis.Redis, redis_server: RedisServer, v1: V1
) -> None:
    v1.enqueue(job_id(1), {"type": "t"})
    claimed = v1.claim("old")
    assert claimed is not None
    r.config_resetstat()  # ours: a private server
    waiting = subprocess.Popen(
        [sys.executable, "-m", "shared.upgrade", "--wait", "20"],
        cwd=ROOT,
        env=scrubbed_environment() | {"REDIS_URL": redis_server.url},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # A run's key walk (SCAN) follows its index pass: once one is seen, the first run found
        # the job held, and the command polls (a finish during the walk still counts as held:
        # tests/upgrade/test_move.py).
        wait_until(lambda: _scans(r) > 0, 10, "the command's first run")
        v1.complete(job_id(1), claimed.token)  # the old worker finishes
        out, err = waiting.communicate(timeout=CLI_TIMEOUT)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()

    assert waiting.returncode == 0, err
    assert "moved to queue default: completed 1 (1 job)" in out
    assert r.exists(K.job(job_id(1))) and v1_job_keys(r) == []


def _scans(r: redis.Redis) -> int:
    """Return the SCAN calls since the last CONFIG RESETSTAT."""
    return int(r.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))


def test_wait_gives_up_with_1_while_an_old_worker_still_runs_a_job(
    redis_server: RedisServer, v1: V1
) -> None:
    v1.enqueue(job_id(1), {"type": "t"})
    assert v1.claim("old") is not None

    started = time.monotonic()
    result = run(redis_server, "--wait", "1.5")

    assert result.returncode == 1
    assert "left in v1: 1 processing under a live lease" in result.stdout
    assert "still running under v1" in result.stderr
    assert time.monotonic() - started < 15


def test_usage_errors_exit_2(redis_server: RedisServer) -> None:
    assert run(redis_server, "--no-such-flag").returncode == 2
    wrong_tag = run(redis_server, "--v1-prefix", "{other}:v1:")
    assert wrong_tag.returncode == 2
    assert "set TASKFORGE_NAMESPACE=other" in wrong_tag.stderr
    retired = run(redis_server, TASKFORGE_KEY_PREFIX="{taskforge}:v1:")
    assert retired.returncode == 2 and "TASKFORGE_NAMESPACE" in retired.stderr


def test_a_redis_that_cannot_be_reached_exits_1(redis_server: RedisServer) -> None:
    result = run(
        redis_server, REDIS_URL=f"redis://127.0.0.1:{free_port()}/0", REDIS_CONNECT_TIMEOUT="1s"
    )

    assert result.returncode == 1
    assert result.stderr.startswith("taskforge upgrade: Redis error: ConnectionError")


def test_a_custom_v1_prefix_under_the_namespace_moves(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    old = V1(r, V1Keys("{shop}:jobs:"))
    old.enqueue(job_id(1), {"type": "t"})

    result = run(redis_server, "--v1-prefix", "{shop}:jobs:", TASKFORGE_NAMESPACE="shop")

    assert result.returncode == 0, result.stderr
    assert r.exists(Keys("shop").job(job_id(1))) == 1
    assert Upgrade(r, Keys("shop"), V1Keys("{shop}:jobs:")).v1_holds_jobs() is False
