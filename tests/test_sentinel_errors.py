"""Sentinel trouble in one line (shared/connect/sentinels.py), on real servers and sentinels: nobody
answers, the sentinels do not monitor the service, a data node named as a sentinel (in the
engine, the gateway under gunicorn and workerd alike), and sentinels with a password of
their own (REDIS_SENTINEL_PASSWORD), different from the data nodes'."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.sentinel import MasterNotFoundError

from shared.connect.redis_conn import connect, primary
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import RedisServer, private_redis
from tests.support.sentinel import SERVICE, SentinelDeployment, sentinel_deployment
from tests.support.tools import free_port, wait_until
from tests.support.workerd import start_workerd, stop_all

SENTINEL_SECRET = "sentinel-secret-7"
DATA_SECRET = "data-secret-9"
ONE_LINE = 300  # characters: what redis-py said was about 1,500 per sentinel


def _ping(url: str, **env: str) -> str:
    """Return the error a client of `url` meets on its first command."""
    settings = Settings.from_env({"REDIS_URL": url, "REDIS_SOCKET_TIMEOUT": "1s", **env})
    client = connect(settings, role="test")
    try:
        with pytest.raises(MasterNotFoundError) as caught:
            client.ping()
        return str(caught.value)
    finally:
        client.close()


def test_no_sentinel_answering_is_said_in_one_line_naming_each() -> None:
    ports = [free_port(), free_port()]
    hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
    said = _ping(f"redis+sentinel://:pw-never-shown@{hosts}/{SERVICE}/0")
    assert said == f"no sentinel at {hosts} answered (connection refused)"


@pytest.fixture(scope="module")
def data_node() -> Iterator[RedisServer]:
    with private_redis() as server:
        yield server


def test_a_data_node_named_as_a_sentinel_is_said_to_be_none(data_node: RedisServer) -> None:
    said = _ping(f"redis+sentinel://127.0.0.1:{data_node.port}/{SERVICE}/0")
    assert said.startswith(f"127.0.0.1:{data_node.port} is not a sentinel"), said
    assert "\n" not in said and len(said) < ONE_LINE


@pytest.mark.slow
def test_a_data_node_as_sentinel_leaves_gateway_and_workerd_unavailable_without_traceback(
    data_node: RedisServer, tmp_path: Path
) -> None:
    url = f"redis+sentinel://127.0.0.1:{data_node.port}/{SERVICE}/0"
    expected = f"127.0.0.1:{data_node.port} is not a sentinel"
    with run_gunicorn(url, tmp_path) as gateway:
        status, _headers, body = gateway.request("GET", "/ready")
        assert status == 503 and body["reason"].startswith(expected), body
        status, _headers, body = gateway.request("POST", "/enqueue", {"type": "t"})
        assert status == 503, body
        log = gateway.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert "Worker failed to boot" not in log
    unavailable = [json.loads(line) for line in log.splitlines() if "redis_unavailable" in line]
    assert unavailable and all(expected in line["error"] for line in unavailable), unavailable

    settings = {
        "REDIS_URL": url,
        "PORT_WORKER": str(free_port()),
        "TASKFORGE_HANDLERS": "workerd.demo",
        "TASKFORGE_BIND_HOST": "127.0.0.1",
        "WORKER_COUNT": "1",
    }
    workerd = start_workerd(settings, tmp_path / "w.log", tmp_path / "w.err", wait_ready=False)
    try:

        def unavailable_ready() -> dict[str, object] | None:
            try:
                status, _headers, raw = workerd.http("/ready")
            except OSError:
                return None
            return json.loads(raw) if status == 503 else None

        body = wait_until(unavailable_ready, 20, "workerd's /ready answering 503")
        assert str(body["reason"]).startswith(expected), body
        workerd.wait_for("redis_unavailable", component="supervisor")
        assert workerd.proc.poll() is None  # unavailable, not crashed
    finally:
        problems = stop_all([workerd])
    assert not problems
    assert "Traceback" not in workerd.stderr() + workerd.log_path.read_text()
    lines = [line for line in workerd.logs() if line["event"] == "redis_unavailable"]
    assert lines and all(expected in line["error"] for line in lines), lines


# --- sentinels with a password of their own -----------------------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[SentinelDeployment]:
    with sentinel_deployment(
        sentinel_password=SENTINEL_SECRET, data_password=DATA_SECRET
    ) as deployment:
        yield deployment


@pytest.mark.slow
def test_sentinels_with_their_own_password_are_reached_with_redis_sentinel_password(
    guarded: SentinelDeployment,
) -> None:
    # The sentinels really refuse a client without their password.
    bare = redis.Redis(port=guarded.sentinels[0].port, socket_timeout=2)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            bare.sentinel_masters()
    finally:
        bare.close()
    settings = Settings.from_env(
        {"REDIS_URL": guarded.url, "REDIS_SENTINEL_PASSWORD": SENTINEL_SECRET}
    )
    scripts = Scripts(connect(settings, role="test"), Keys())
    try:
        scripts.load()
        scripts.redis.set("sentinel-password-test", "1")
        assert primary(scripts.redis) == f"127.0.0.1:{guarded.primary_port()}"
    finally:
        scripts.redis.close()


@pytest.mark.slow
@pytest.mark.parametrize("sentinel_password", [None, DATA_SECRET])
def test_a_missing_or_wrong_sentinel_password_is_said_without_any_password(
    guarded: SentinelDeployment, sentinel_password: str | None
) -> None:
    env = {} if sentinel_password is None else {"REDIS_SENTINEL_PASSWORD": sentinel_password}
    said = _ping(guarded.url, **env)
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in guarded.sentinels)
    assert said == (
        f"no sentinel at {hosts} answered (authentication failed: check REDIS_SENTINEL_PASSWORD)"
    )
    assert SENTINEL_SECRET not in said and DATA_SECRET not in said


@pytest.mark.slow
def test_sentinels_that_do_not_monitor_the_service_say_so(guarded: SentinelDeployment) -> None:
    url = guarded.url.replace(f"/{SERVICE}/", "/mymaster/")
    said = _ping(url, REDIS_SENTINEL_PASSWORD=SENTINEL_SECRET)
    hosts = ",".join(f"127.0.0.1:{s.port}" for s in guarded.sentinels)
    assert said == f"the sentinels at {hosts} do not monitor 'mymaster'"
