"""Fixtures for the gateway tests: the app on fakeredis, and real gunicorn on the private Redis
(tests.support.gunicorn)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from gateway import create_app
from shared.config import Settings
from shared.scripts import Policy, Scripts
from tests.fakes import fake_scripts
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer

TOKEN = "s3cret-token"


@pytest.fixture
def scripts() -> Scripts:
    """Return engine scripts on a fresh fakeredis."""
    return fake_scripts(Policy(idempotency_ttl_ms=60_000))


def make_app(scripts: Scripts, **env: str) -> Flask:
    """Return a gateway app on `scripts` with settings from `env`."""
    app = create_app(Settings.from_env(env), scripts=scripts)
    app.testing = True
    return app


@pytest.fixture
def client(scripts: Scripts) -> FlaskClient:
    """Return a test client of an open (no token) gateway on fakeredis."""
    return make_app(scripts).test_client()


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
