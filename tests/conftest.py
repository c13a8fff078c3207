"""Fixtures shared by all tests: a private redis-server, a client on it, settings for it, and the
gateway under real gunicorn on it (for the gateway, client and CLI tests)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import redis

from shared.engine import lifecycle
from shared.engine.lifecycle import Transition
from shared.settings.config import Settings
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tally import Tally, root_level_setter, tallying
from tests.support.tools import require_tool

_PYTEST_PID = os.getpid()
# --serial: what to do with the tests marked serial (see pytest_collection_modifyitems).
SERIAL_CHOICES = ("include", "skip", "only")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _PYTEST_PID:  # a child a test forked: SIGTERM keeps its default meaning
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """Treat SIGTERM (`timeout`, a CI runner giving up) like Ctrl-C: pytest then still runs the
    fixtures' teardown, so no redis-server, gunicorn or workerd a test started outlives it."""
    signal.signal(signal.SIGTERM, _interrupt)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--serial",
        choices=SERIAL_CHOICES,
        default="include",
        help="tests marked serial: include them (default), skip them (bin/test's parallel "
        "phase) or run only them (its serial phase, after the parallel one)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests of the phase --serial asks for (an option, not -m: a user's -m "not slow"
    and bin/test's phase must combine, and pytest keeps only the last -m)."""
    mode = config.getoption("serial")
    if mode == "include":
        return
    wanted = mode == "only"
    kept = [item for item in items if (item.get_closest_marker("serial") is not None) == wanted]
    dropped = [item for item in items if (item.get_closest_marker("serial") is not None) != wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Run one private redis-server on a free port for the whole session."""
    directory = tmp_path_factory.mktemp("redis")
    server = RedisServer(require_tool("redis-server"), directory, unix_socket=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """Return a client of the private server, emptied first (FLUSHALL: it is ours alone)."""
    redis_server.start()  # a crash test before us may have left it down
    client = redis.Redis.from_url(redis_server.url, decode_responses=False)
    client.flushall()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def settings(redis_server: RedisServer) -> Settings:
    """Return default settings pointed at the private server."""
    return Settings.from_env({"REDIS_URL": redis_server.url})


@pytest.fixture(scope="session")
def gateway_server(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    """Run one open gateway under gunicorn for the session, on the private redis-server."""
    with run_gunicorn(redis_server.url, tmp_path_factory.mktemp("gunicorn")) as server:
        yield server


@pytest.fixture
def gw(gateway_server: Gunicorn, r: Any) -> Gunicorn:
    """Return the session's gateway with Redis emptied (and running) for this test."""
    return gateway_server


@pytest.fixture
def start_gateway(
    redis_server: RedisServer, tmp_path: Path
) -> Iterator[Callable[..., contextlib.AbstractContextManager[Gunicorn]]]:
    """Return a starter of extra gateways with their own environment (auth on, …)."""

    def start(**env: str) -> contextlib.AbstractContextManager[Gunicorn]:
        return run_gunicorn(redis_server.url, tmp_path, **env)

    yield start


@pytest.fixture
def transitions() -> Iterator[list[Transition]]:
    """Return the lifecycle transitions this process records during the test."""
    seen: list[Transition] = []
    lifecycle.add_sink(seen.append)
    try:
        yield seen
    finally:
        lifecycle.remove_sink(seen.append)


@pytest.fixture
def tally(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tally]:
    """Count every LogRecord made, every metric value written and every span attribute set
    (the per-job budget tests)."""
    with tallying(monkeypatch) as found:
        yield found


@pytest.fixture
def root_level() -> Iterator[Callable[[int], None]]:
    """Set the root logger's level as LOG_LEVEL would (default INFO); restore it after."""
    with root_level_setter() as set_level:
        yield set_level
