"""The README's "Upgrading from v1" commands, run verbatim on v1 data (tests/test_readme.py's
SECTIONS_RUN names this test)."""

from __future__ import annotations

import subprocess

import redis

from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT
from tests.support.workerd import scrubbed_environment
from tests.test_readme import shell_blocks
from tests.upgrade.conftest import K, job_id, v1_job_keys
from tests.upgrade.v1 import V1

BLOCK_TIMEOUT = 60.0


def test_the_readme_upgrade_commands_run_verbatim(
    r: redis.Redis, redis_server: RedisServer, v1: V1
) -> None:
    (block,) = shell_blocks("Upgrading from v1")
    v1.enqueue(job_id(1), {"type": "t"}, key="k")
    v1.enqueue(job_id(2), {"type": "t", "scheduled_at": "2099-01-01T00:00:00Z"})

    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=ROOT,
        env=scrubbed_environment() | {"REDIS_URL": redis_server.url},
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        check=False,
    )

    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    dry, real = result.stdout.split("\nv1 prefix ", 1)
    assert "pending 1, scheduled 1 (2 jobs)" in dry and "would move to queue default" in dry
    assert "moved to queue default: pending 1, scheduled 1 (2 jobs)" in real
    assert real.endswith("done\n")
    assert r.exists(K.job(job_id(1)), K.job(job_id(2))) == 2 and v1_job_keys(r) == []
