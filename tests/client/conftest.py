"""Fixtures for the client tests: a ``taskforge.Client`` on the session's real gateway."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from shared.engine.scripts import Scripts
from taskforge import Client
from tests.support.engine_jobs import engine_on
from tests.support.gunicorn import Gunicorn
from tests.workerd.conftest import start_workerd  # noqa: F401 (a fixture)


@pytest.fixture
def tf(gw: Gunicorn) -> Iterator[Client]:
    """Return a client of the real gateway (Redis emptied), quick to give up on errors."""
    with Client(gw.url, "", timeout=5.0, retries=2, backoff=0.01, max_backoff=0.05) as client:
        yield client


@pytest.fixture
def engine(r: Any) -> Scripts:
    """Return the engine's scripts on the private Redis, to play the worker's part."""
    return engine_on(r)
