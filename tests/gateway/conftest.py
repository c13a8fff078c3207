"""Fixtures for the gateway tests: the app on fakeredis. The real gunicorn ones (`gateway_server`,
`gw`, `start_gateway`) live in tests/conftest.py, shared with the client and CLI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.fakes import fake_scripts
from tests.support.gateway_app import app_without_fleet_thread

TOKEN = "s3cret-token"


@pytest.fixture
def scripts() -> Scripts:
    """Return engine scripts on a fresh fakeredis."""
    return fake_scripts(Policy(idempotency_ttl_ms=60_000))


def make_app(scripts: Scripts, **env: str) -> Flask:
    """Return a gateway app on `scripts` with settings from `env`, its fleet view stopped:
    no enqueue warnings and no registry reads in a thread unless a test reads the view itself
    (tests/gateway/test_enqueue_warnings.py), so replies and command counts are deterministic."""
    app = app_without_fleet_thread(Settings.from_env(env), scripts=scripts)
    app.testing = True
    return app


@pytest.fixture
def client(scripts: Scripts) -> FlaskClient:
    """Return a test client of an open (no token) gateway on fakeredis."""
    return make_app(scripts).test_client()


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return engine scripts on the test's real redis-server (a module may define its own)."""
    return Scripts(r, Keys())


@pytest.fixture
def web(engine: Scripts) -> Iterator[FlaskClient]:
    """Return a test client of an open gateway on `engine`."""
    with make_app(engine).test_client() as client:
        yield client
