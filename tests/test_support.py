"""tests.support's redis-server launcher does what the fault scenarios rely on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import RedisServer, private_redis
from tests.support.tools import ROOT, process_state, require_tool


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    durable = {"save": "", "appendonly": "yes", "appendfsync": "always"}
    started = RedisServer(require_tool("redis-server"), tmp_path, config=durable)
    started.start()
    try:
        yield started
    finally:
        started.close()


def test_a_killed_server_restarts_on_its_port_with_what_its_aof_holds(server: RedisServer) -> None:
    port, client = server.port, server.client()
    client.set("kept", "yes")

    server.kill()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    server.start()

    assert server.port == port
    assert server.client().get("kept") == b"yes"


def test_a_frozen_server_answers_nothing_until_thawed(server: RedisServer) -> None:
    server.freeze()
    assert process_state(server.pid) in ("T", "t")
    with pytest.raises(redis.TimeoutError):
        server.client(socket_timeout=0.2).ping()

    server.thaw()

    assert server.client().ping()


def test_a_conf_file_comes_first_and_our_port_and_config_win(tmp_path: Path) -> None:
    conf = ROOT / "deploy" / "redis.conf"
    server = RedisServer(
        require_tool("redis-server"), tmp_path, config={"maxmemory": "10mb"}, conf_file=conf
    )
    server.start()
    try:
        client = server.client()
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("maxmemory") == {"maxmemory": str(10 * 1024 * 1024)}
        assert client.config_get("port") == {"port": str(server.port)}
    finally:
        server.stop()
    assert not server.running


def test_private_redis_starts_without_persistence_and_cleans_up() -> None:
    require_tool("redis-server")
    with private_redis() as server:
        assert server.client().config_get("appendonly") == {"appendonly": "no"}
        directory = server.dir
    assert not directory.exists()
