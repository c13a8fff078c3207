"""A redis-server of a test module's own, for modules that count commands.

INFO commandstats counts every client's commands, and an xdist worker's tests share the
session's server with whatever ran before them there: the session's gunicorn gateway
(tests/conftest.py `gateway_server`) keeps its fleet view's thread reading the registry (a
ZRANGE, and an HMGET per host) every 2 s for the rest of the session. Such a stray read broke
a count in test_budgets twice and in test_enqueue_warnings once in CI. A module that counts
imports this fixture (`own_redis_server`, named `redis_server`), which overrides the session's
`redis_server` for that module only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer
from tests.support.tools import require_tool


@pytest.fixture(scope="module", name="redis_server")
def own_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """Run a redis-server that only this module's tests talk to."""
    server = RedisServer(require_tool("redis-server"), tmp_path_factory.mktemp("own-redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()
