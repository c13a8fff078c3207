"""Fixtures for the gateway tests: the app on fakeredis. The real gunicorn ones (`gateway_server`,
`gw`, `start_gateway`) live in tests/conftest.py, shared with the client and CLI tests."""

from __future__ import annotations

import pytest
from flask import Flask
from flask.testing import FlaskClient

from gateway import create_app
from shared.config import Settings
from shared.scripts import Policy, Scripts
from tests.fakes import fake_scripts

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
