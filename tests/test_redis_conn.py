"""Redis connections: built from settings, named, retried, and described without secrets."""

from __future__ import annotations

import dataclasses
import os
import time
from urllib.parse import quote

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

from shared.connect.redis_conn import connect, describe, like
from shared.settings.config import Settings
from tests.support.redis_server import RedisServer


def test_connect_reaches_the_private_server_with_a_named_client(settings: Settings) -> None:
    client = connect(settings, role="test")
    try:
        assert client.ping()
        name = client.client_getname()  # redis-py decodes this one reply itself
        assert (
            name.decode() if isinstance(name, bytes) else name
        ) == f"taskforge-test-{os.getpid()}"
        assert client.get("missing") is None  # bytes in, bytes out: no decoding
        client.set("k", "v")
        assert client.get("k") == b"v"
    finally:
        client.close()


def test_connect_over_a_unix_socket(redis_server: RedisServer, settings: Settings) -> None:
    unix = dataclasses.replace(settings, redis_url=f"unix://{redis_server.unix_path}?db=0")
    client = connect(unix, role="unix")
    try:
        assert client.ping()
    finally:
        client.close()


def test_connection_options_come_from_settings() -> None:
    settings = Settings.from_env(
        {
            "REDIS_URL": "redis://h:6379/2",
            "REDIS_SOCKET_TIMEOUT": "3s",
            "REDIS_CONNECT_TIMEOUT": "250ms",
        }
    )
    kwargs = connect(settings, role="gateway").connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 6379, 2)
    assert kwargs["socket_timeout"] == 3.0
    assert kwargs["socket_connect_timeout"] == 0.25
    assert kwargs["health_check_interval"] == 30
    assert kwargs["decode_responses"] is False
    assert kwargs["client_name"] == f"taskforge-gateway-{os.getpid()}"
    retry = kwargs["retry"]
    assert retry.get_retries() == 2
    assert retry._backoff == ExponentialBackoff(cap=0.5)
    assert set(retry._supported_errors) == {redis.ConnectionError, redis.TimeoutError}
    assert "ssl_cert_reqs" not in kwargs


@pytest.mark.parametrize("reqs", ["none", "optional", "required"])
def test_rediss_url_sets_ssl_cert_reqs(reqs: str) -> None:
    settings = Settings.from_env(
        {"REDIS_URL": "rediss://:pw@redis.example:6380/0", "REDIS_SSL_CERT_REQS": reqs}
    )
    pool = connect(settings, role="worker").connection_pool  # builds no connection yet
    assert pool.connection_class is redis.SSLConnection
    assert pool.connection_kwargs["ssl_cert_reqs"] == reqs


def test_connect_refuses_a_role_that_cannot_be_a_client_name(settings: Settings) -> None:
    with pytest.raises(ValueError, match="role"):
        connect(settings, role="bad role")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://default:hunter2@host:6380", "rediss://default:***@host:6380"),
        ("redis://user:p%40ss@host/0", "redis://user:***@host/0"),
        (
            "unix:///run/redis.sock?db=1&password=hunter2",
            "unix:///run/redis.sock?db=1&password=***",
        ),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://user@host/0", "redis://user@host/0"),
    ],
)
def test_describe_hides_passwords(url: str, shown: str) -> None:
    assert describe(url) == shown


@given(st.text(min_size=1))
def test_describe_hides_any_percent_encoded_password(password: str) -> None:
    url = f"redis://user:{quote(password, safe='')}@host:6379/0"
    assert describe(url) == "redis://user:***@host:6379/0"


def test_a_bounded_pool_waits_for_a_connection_then_gives_up(settings: Settings) -> None:
    client = connect(settings, role="bounded", max_connections=1, pool_wait=0.05)
    try:
        pool = client.connection_pool
        assert isinstance(pool, redis.BlockingConnectionPool)
        held = pool.get_connection()
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert 0.04 <= time.monotonic() - started < 1.0
        pool.release(held)
        assert client.ping()
    finally:
        client.close()


def test_overrides_replace_the_settings_timeouts_and_retry() -> None:
    settings = Settings.from_env({"REDIS_URL": "redis://h:6379/0"})
    own = Retry(NoBackoff(), 1, supported_errors=(redis.ConnectionError,))
    client = connect(settings, role="quick", socket_timeout=0.7, connect_timeout=0.3, retry=own)
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (0.7, 0.3)
    assert client.get_retry() is own
    assert type(client.connection_pool) is redis.ConnectionPool


def test_like_builds_a_separate_pool_to_the_same_server(settings: Settings) -> None:
    client = connect(settings, role="origin")
    twin = like(client, max_connections=1, socket_timeout=9.0)
    try:
        assert twin.connection_pool is not client.connection_pool
        assert twin.connection_pool.max_connections == 1
        kwargs = twin.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 9.0
        assert kwargs["client_name"] == f"taskforge-origin-{os.getpid()}"
        twin.set("twin", "1")
        assert client.get("twin") == b"1"
    finally:
        twin.close()
        client.close()
