"""Fixtures for durable mode's tests: a private primary and its replica, emptied per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.replicated import Replicated, replicated_redis
from tests.support.tools import require_tool


@pytest.fixture(scope="session")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    """Run a primary and one replica of it (free ports) for the session."""
    directory = tmp_path_factory.mktemp("replicated")
    with replicated_redis(require_tool("redis-server"), directory) as pair:
        yield pair


@pytest.fixture
def pair(replicated: Replicated) -> Iterator[Replicated]:
    """Return the pair emptied, running and in sync; thaw the replica after the test."""
    replicated.replica.thaw()  # a failed test before us may have left it frozen
    replicated.primary.start()
    replicated.replica.start()
    client = replicated.primary.client()
    try:
        client.flushall()
    finally:
        client.close()
    replicated.wait_synced()
    try:
        yield replicated
    finally:
        replicated.replica.thaw()


@pytest.fixture
def primary(pair: Replicated) -> Iterator[redis.Redis]:
    """Return a client of the primary (no retries)."""
    client = pair.primary.client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def replica(pair: Replicated) -> Iterator[redis.Redis]:
    """Return a client of the replica, for reads."""
    client = pair.replica.client()
    try:
        yield client
    finally:
        client.close()
