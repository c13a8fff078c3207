"""Fixtures for the deployment tests: the workerd process fixtures, and unit-file reading."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.redis_server import RedisServer
from tests.support.tools import require_tool

# The real-supervisor fixtures of tests/workerd, shared rather than copied.
from tests.workerd.conftest import engine, journal, start_workerd  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SYSTEMD = DEPLOY / "systemd"
START_TIMEOUT = 10.0


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Return every ``[Service]``-style ``Key=value`` of a unit file as key → values, in order.

    Keys are qualified by section (``Service.KillMode``); a key may repeat (EnvironmentFile=).
    """
    settings: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        settings.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return settings


def procfile() -> dict[str, str]:
    """Return the Procfile's process types and their commands."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    entries = (line.partition(":") for line in lines if line.strip() and not line.startswith("#"))
    return {name.strip(): command.strip() for name, _, command in entries}


@pytest.fixture
def configured_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    """Start redis-server with deploy/redis.conf on a free port in tmp_path; yield a client."""
    # Only what must differ here: a private port and directory, on loopback, a log file.
    server = RedisServer(
        require_tool("redis-server"), tmp_path, config={}, conf_file=DEPLOY / "redis.conf"
    )
    server.start()
    client = redis.Redis(port=server.port, socket_connect_timeout=0.5, socket_timeout=5)
    try:
        yield client
    finally:
        client.close()
        server.stop()
