"""Starting against a cluster through the wrong URL, or while no seed answers yet (bin/run).

A plain redis:// URL naming one node of a cluster is refused at start with one line saying
what to write; a redis+cluster:// URL whose seeds are all down waits like a plain URL's down
server (one-line reason, no traceback), and the stack comes up once a seed answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
import redis

from gateway.app import create_app
from shared.connect.redis_conn import TaskForgeCluster, connect, disconnect, is_cluster
from shared.engine.redis_checks import CLUSTER_NODE_BEHIND_PLAIN_URL
from shared.settings.config import Settings
from tests.support.cluster import RedisCluster
from tests.support.tcp_proxy import TcpProxy
from tests.support.tools import free_port, wait_until
from tests.test_bin_run import RUNNING, START_TIMEOUT, STOP_TIMEOUT, http, started_bin_run

REFUSED = f"taskforge: configuration error: {CLUSTER_NODE_BEHIND_PLAIN_URL}"


@pytest.mark.slow
def test_bin_run_refuses_a_plain_url_naming_a_cluster_node_in_one_line(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    # Before: "ready", then POST /enqueue answered 500 with a MovedError traceback in the log.
    node = cluster.masters()[0]
    with started_bin_run(tmp_path, REDIS_URL=f"redis://{node.host}:{node.port}/0") as run:
        try:
            _, said = run.proc.communicate(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"bin/run did not stop: {run.said}") from None
        parts_log = (tmp_path / "parts.log").read_text()
        shown = said + parts_log
        assert run.proc.returncode != 0, shown
        assert REFUSED in said.splitlines(), shown  # on bin/run's terminal, one line
        assert "bin/run: ready" not in said, said
        assert "Traceback" not in shown and "MovedError" not in shown, shown


def test_gateway_answers_503_naming_the_fix_when_a_plain_client_meets_moved(
    cluster: RedisCluster,
) -> None:
    # The start check passes a node that was down at start: a MOVED later is no 500.
    # A job's keys share its queue's hash tag: name a master that does not own the default
    # queue's slot, so every enqueue meets MOVED.
    owner = cluster.master_of("{taskforge:default}")
    [node, *_] = [master for master in cluster.masters() if master.port != owner.port]
    settings = Settings.from_env({"REDIS_URL": f"redis://{node.host}:{node.port}/0"})
    plain = redis.Redis(host=node.host, port=node.port)
    try:
        app = create_app(settings, client=plain)
        with app.test_client() as client:
            for index in range(3):
                reply = client.post("/enqueue", json={"type": "t", "payload": {"n": index}})
                assert reply.status_code == 503, reply.get_json()
                assert reply.get_json()["error"] == CLUSTER_NODE_BEHIND_PLAIN_URL
    finally:
        plain.close()


@pytest.mark.slow
def test_bin_run_waits_for_an_unreachable_cluster_and_comes_up_with_it(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    # Before: workerd printed raw tracebacks ("Redis Cluster cannot be connected"), gunicorn's
    # workers crashed, and bin/run gave up within 2 s.
    seed = free_port()  # listened on later, through the proxy
    with started_bin_run(tmp_path, REDIS_URL=f"redis+cluster://127.0.0.1:{seed}") as run:
        line = run.read_until("still waiting", START_TIMEOUT + 10)
        assert line == (
            f"bin/run: still waiting for Redis (redis+cluster://127.0.0.1:{seed}: no seed of "
            f"the Redis Cluster answers (127.0.0.1:{seed}))\n"
        ), run.said
        assert run.proc.poll() is None, run.said
        # The cluster comes up: its seed address now leads to a node of the session cluster.
        node = cluster.masters()[0]
        with TcpProxy(node.host, node.port, listen_port=seed):
            run.read_until(RUNNING, START_TIMEOUT)
            gateway = f"http://127.0.0.1:{run.env['PORT_PRODUCER']}"
            status, job = http("POST", f"{gateway}/enqueue", {"type": "send_email"})
            assert status == 201, job
            wait_until(
                lambda: http("GET", f"{gateway}/jobs/{job['id']}")[1]["status"] == "completed",
                30,
                "the job completed",
            )
            parts_log = (tmp_path / "parts.log").read_text()
            assert "Traceback" not in parts_log, parts_log
            os.killpg(run.proc.pid, signal.SIGTERM)
            rest = run.proc.communicate(timeout=STOP_TIMEOUT)[1]
            assert rest.endswith("bin/run: stopped.\n"), rest


def test_a_cluster_client_built_with_no_seed_answering_becomes_one_once_a_seed_does(
    cluster: RedisCluster,
) -> None:
    seed = free_port()  # listened on later, through the proxy
    settings = Settings.from_env({"REDIS_URL": f"redis+cluster://127.0.0.1:{seed}"})
    client = connect(settings, role="test")  # before: RedisClusterException right here
    try:
        assert is_cluster(client)
        with pytest.raises(redis.exceptions.ConnectionError, match="no seed of the Redis Cluster"):
            client.ping()
        node = cluster.masters()[0]
        with TcpProxy(node.host, node.port, listen_port=seed):
            assert client.set("{a}k", b"v") and client.get("{a}k") == b"v"
            assert type(client) is TaskForgeCluster
            assert len(client.get_primaries()) == len(cluster.masters())
    finally:
        disconnect(client)
