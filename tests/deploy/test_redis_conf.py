"""deploy/redis.conf: a real redis-server accepts it and runs with its settings."""

from __future__ import annotations

from pathlib import Path

import redis

from tests.deploy.conftest import DEPLOY


def test_redis_conf_turns_on_the_append_only_file(
    configured_redis: redis.Redis, tmp_path: Path
) -> None:
    assert configured_redis.config_get("appendonly") == {"appendonly": "yes"}
    assert configured_redis.config_get("appendfsync") == {"appendfsync": "everysec"}
    configured_redis.set("k", "v")
    assert (tmp_path / "appendonlydir").is_dir()  # Redis 7's multi-part AOF


def test_redis_conf_never_evicts_keys(configured_redis: redis.Redis) -> None:
    policy = configured_redis.config_get("maxmemory-policy")
    assert policy == {"maxmemory-policy": "noeviction"}


def test_redis_conf_keeps_job_hashes_with_payloads_up_to_512_bytes_compact(
    configured_redis: redis.Redis,
) -> None:
    setting = configured_redis.config_get("hash-max-listpack-value")
    assert setting == {"hash-max-listpack-value": "512"}
    configured_redis.hset("job", mapping={"payload": "x" * 500, "status": "pending"})
    assert configured_redis.object("encoding", "job") == b"listpack"


def test_redis_conf_has_no_setting_redis_would_ignore() -> None:
    # redis-server refuses unknown directives at start (the fixture would fail), but a
    # directive commented out by mistake would pass silently: the two that matter are live.
    lines = (DEPLOY / "redis.conf").read_text().splitlines()
    live = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    assert ["appendonly", "yes"] in live
    assert ["maxmemory-policy", "noeviction"] in live
