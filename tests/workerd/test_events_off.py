"""TASKFORGE_EVENTS=off end to end: a real ``python -m workerd`` and the gateway, both with
events off, run jobs to done and to the DLQ, pause and resume a queue, and the fleet joins and
leaves, and Redis holds no event stream afterwards. With events on, the same run writes them
(so the check can fail)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared.engine.keys import Keys
from shared.model.jobs import JobState
from shared.settings.config import Settings
from tests.support.gateway_app import app_without_fleet_thread
from tests.support.redis_server import RedisServer
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine

K = Keys()
WAIT = 15.0  # seconds for a job to finish or the host to leave


def event_streams(r: redis.Redis) -> list[str]:
    """Return every stream key in Redis (events are the only streams TaskForge writes)."""
    return sorted(key.decode() for key in r.scan_iter(_type="stream"))


@pytest.mark.parametrize("events", ["off", "on"])
def test_events_off_writes_no_stream_anywhere(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
    events: str,
) -> None:
    workerd = start_workerd(TASKFORGE_EVENTS=events, WORKER_QUEUES="default")
    settings = Settings.from_env({"REDIS_URL": redis_server.url, "TASKFORGE_EVENTS": events})
    client = app_without_fleet_thread(settings).test_client()
    done = client.post(
        "/enqueue", json={"type": "journal", "payload": {"file": str(tmp_path / "j")}}
    )
    dead = client.post("/enqueue", json={"type": "permanent"})
    assert (done.status_code, dead.status_code) == (201, 201)
    engine.wait_for(done.get_json()["id"], JobState.COMPLETED, WAIT)
    engine.wait_for(dead.get_json()["id"], JobState.DEAD, WAIT)
    assert client.post(f"/dlq/{dead.get_json()['id']}/retry").status_code == 200
    engine.wait_for(dead.get_json()["id"], JobState.DEAD, WAIT)
    assert client.post("/queues/default/pause").status_code == 200
    assert client.post("/queues/default/resume").status_code == 200
    workerd.proc.send_signal(signal.SIGTERM)
    assert workerd.proc.wait(WAIT) == 0

    if events == "off":
        assert event_streams(r) == []
    else:
        assert set(event_streams(r)) == {K.fleet_events}  # one Redis: one stream for all
