"""A Redis outage is logged once per few seconds per process, and a full Redis says so."""

from __future__ import annotations

import logging

import pytest
import redis

from gateway import http_errors as errors
from shared.engine.scripts import Scripts
from tests.gateway.conftest import make_app


def test_an_outage_is_one_line_per_quiet_period_counting_what_it_left_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(errors.time, "monotonic", lambda: clock[0])
    outages = errors.OutageLog()
    with caplog.at_level(logging.WARNING, logger="gateway.http_errors"):
        for _ in range(50):
            outages.warn(redis.ConnectionError("Connection refused"))
            clock[0] += 0.01  # 50 refused requests in half a second
        clock[0] += errors.OutageLog.QUIET
        outages.warn(redis.TimeoutError("Timeout reading from socket"))
    lines = [rec for rec in caplog.records if rec.getMessage() == "redis_unavailable"]
    assert [rec.refused_unlogged for rec in lines] == [0, 49]  # type: ignore[attr-defined]
    assert "ConnectionError" in lines[0].error  # type: ignore[attr-defined]


def test_a_full_redis_is_named_in_the_503(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = make_app(scripts)

    def full(*args: object, **kwargs: object) -> object:
        raise redis.exceptions.OutOfMemoryError(
            "OOM command not allowed when used memory > 'maxmemory'."
        )

    monkeypatch.setattr(scripts, "enqueue", full)
    response = app.test_client().post("/enqueue", json={"type": "t", "payload": {}})
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "full" in response.get_json()["error"]
