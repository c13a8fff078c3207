"""shared.engine.redis_checks: the start-up warning about eviction and persistence, on a real Redis."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import redis
from prometheus_client import REGISTRY

from shared.engine.redis_checks import (
    EVICTION,
    METRIC,
    PERSISTENCE,
    UNCHECKED,
    check_redis,
    warn_about_redis,
)
from tests.deploy.conftest import ROOT

log = logging.getLogger("tests.redis_checks")


def _gauge(problem: str) -> float | None:
    return REGISTRY.get_sample_value(METRIC, {"problem": problem})


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.__dict__["warning"] for r in caplog.records if r.getMessage() == "config_warning"]


def test_deploy_redis_conf_passes_the_check_without_a_warning(
    configured_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=log.name)
    found = warn_about_redis(configured_redis, log)
    assert (found.maxmemory_policy, found.appendonly, found.problems) == ("noeviction", True, {})
    assert _warnings(caplog) == []
    assert (_gauge(EVICTION), _gauge(PERSISTENCE)) == (0, 0)


def test_an_evicting_policy_is_warned_about_in_the_log_and_the_metric(
    configured_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    configured_redis.config_set("maxmemory-policy", "volatile-lru")
    found = warn_about_redis(configured_redis, log)
    assert set(found.problems) == {EVICTION}
    [warning] = _warnings(caplog)
    assert "maxmemory-policy is volatile-lru" in warning and "noeviction" in warning
    assert (_gauge(EVICTION), _gauge(PERSISTENCE)) == (1, 0)


def test_no_append_only_file_and_no_save_points_is_warned_about(
    configured_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    configured_redis.config_set("appendonly", "no")
    configured_redis.config_set("save", "")
    found = warn_about_redis(configured_redis, log)
    assert set(found.problems) == {PERSISTENCE}
    [warning] = _warnings(caplog)
    assert "persistence is off" in warning
    assert (_gauge(EVICTION), _gauge(PERSISTENCE)) == (0, 1)


def test_redis_s_default_listpack_limit_is_a_warning_but_not_an_unsafe_config(
    configured_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    configured_redis.config_set("hash-max-listpack-value", "64")  # Redis's own default
    found = warn_about_redis(configured_redis, log)
    assert found.problems == {}  # it costs memory, never a job
    [warning] = _warnings(caplog)
    assert "hash-max-listpack-value is 64" in warning and "512" in warning
    assert (_gauge(EVICTION), _gauge(PERSISTENCE)) == (0, 0)


def test_a_listpack_limit_at_or_above_the_advised_one_is_fine(
    configured_redis: redis.Redis,
) -> None:
    configured_redis.config_set("hash-max-listpack-value", "1024")
    assert check_redis(configured_redis).advice == ()


def test_snapshots_alone_count_as_persistence(configured_redis: redis.Redis) -> None:
    configured_redis.config_set("appendonly", "no")
    configured_redis.config_set("save", "3600 1")
    found = check_redis(configured_redis)
    assert (found.appendonly, found.problems) == (False, {})


def test_a_redis_that_refuses_config_gets_one_warning_naming_what_to_verify(
    configured_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Managed services disable CONFIG; an ACL user without it behaves the same way.
    configured_redis.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-config")
    kwargs = configured_redis.connection_pool.connection_kwargs
    limited = redis.Redis(port=kwargs["port"], username="app", password="pw", socket_timeout=5)
    caplog.set_level(logging.INFO, logger=log.name)
    try:
        found = warn_about_redis(limited, log)
    finally:
        limited.close()
    assert (found.checked, found.problems) == (False, {})
    assert _warnings(caplog) == [UNCHECKED]


def test_importing_the_module_does_not_import_prometheus_client() -> None:
    # Entry points may import it before they set PROMETHEUS_MULTIPROC_DIR.
    code = "import sys, shared.engine.redis_checks; sys.exit('prometheus_client' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=30).returncode == 0
