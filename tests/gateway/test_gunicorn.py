"""Every row of the API table under real gunicorn (deploy/gunicorn.conf.py) and a real Redis."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.app import AUTH_DISABLED
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.obs.log import READY_PROBE_AGENT
from tests.gateway import helpers
from tests.gateway.conftest import TOKEN
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tools import free_port, wait_until

UNKNOWN = "00000000-0000-4000-8000-000000000000"
JSON = {"Content-Type": "application/json"}


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return engine scripts on the private server (emptied by `r`)."""
    return Scripts(r, Keys())


def jobs_in_redis(r: redis.Redis) -> int:
    """Return how many jobs Redis holds in any state."""
    return sum(r.zcard(Keys().state_index(state)) for state in JobState)


def test_enqueue_is_201_with_location_and_the_job_is_in_redis(gw: Gunicorn, r: redis.Redis) -> None:
    # As `curl -d '{...}' URL` sends it: form-encoded Content-Type, JSON body.
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    status, hdrs, doc = gw.request("POST", "/enqueue", '{"type": "pdf", "priority": 5}', headers)
    assert status == 201
    assert hdrs["location"] == f"/jobs/{doc['id']}"
    assert (doc["status"], doc["priority"]) == ("pending", 5)
    assert r.hget(Keys().job(doc["id"]), "type") == b"pdf"
    doc.pop("warnings", None)  # the enqueue's own: no workerd host runs here
    assert gw.request("GET", hdrs["location"])[2] == doc


def test_batch_is_201_in_order_and_a_bad_item_enqueues_nothing(
    gw: Gunicorn, r: redis.Redis
) -> None:
    status, _, doc = gw.request(
        "POST", "/enqueue/batch", {"jobs": [{"type": f"t{i}"} for i in range(3)]}
    )
    assert status == 201
    assert [job["type"] for job in doc["jobs"]] == ["t0", "t1", "t2"]
    status, _, doc = gw.request("POST", "/enqueue/batch", {"jobs": [{"type": "ok"}, {"type": 1}]})
    assert status == 400
    assert doc["errors"] == [{"index": 1, "field": "type", "message": doc["errors"][0]["message"]}]
    assert jobs_in_redis(r) == 3


def test_get_job_rows(gw: Gunicorn, engine: Scripts) -> None:
    job_id = helpers.enqueue(engine)
    assert gw.request("GET", f"/jobs/{job_id}")[0] == 200
    assert gw.request("GET", "/jobs/nope")[0] == 400
    assert gw.request("GET", f"/jobs/{UNKNOWN}")[::2] == (404, {"error": "job not found"})


def test_cancel_rows(gw: Gunicorn, engine: Scripts) -> None:
    pending, running = helpers.enqueue(engine), helpers.processing(engine)
    assert gw.request("POST", f"/jobs/{pending}/cancel")[2]["status"] == "canceled"
    assert gw.request("POST", f"/jobs/{pending}/cancel")[0] == 200
    status, _, doc = gw.request("POST", f"/jobs/{running}/cancel")
    assert (status, doc["status"]) == (202, "processing")  # asked to stop: it still runs
    assert doc["cancel_requested_by"].startswith("api ")
    assert gw.request("POST", f"/jobs/{UNKNOWN}/cancel")[0] == 404


def test_dlq_rows(gw: Gunicorn, engine: Scripts) -> None:
    first, second, pending = helpers.dead(engine), helpers.dead(engine), helpers.enqueue(engine)
    status, _, page = gw.request("GET", "/dlq?limit=1")
    assert status == 200 and len(page["jobs"]) == 1 and page["next_cursor"]
    rest = gw.request("GET", f"/dlq?limit=100&cursor={page['next_cursor']}")[2]
    assert {page["jobs"][0]["id"], rest["jobs"][0]["id"]} == {first, second}
    assert gw.request("GET", "/dlq?limit=101")[0] == 400
    assert gw.request("GET", "/dlq?cursor=bogus")[0] == 400
    assert gw.request("POST", f"/dlq/{first}/retry")[2]["status"] == "pending"
    assert gw.request("POST", f"/dlq/{pending}/retry")[0] == 409
    assert gw.request("POST", f"/dlq/{UNKNOWN}/retry")[0] == 404
    status, _, body = gw.request("DELETE", f"/dlq/{second}")
    assert (status, body) == (204, b"")
    assert gw.request("DELETE", f"/dlq/{pending}")[0] == 409
    assert gw.request("DELETE", f"/dlq/{UNKNOWN}")[0] == 404


def enqueued_total(gw: Gunicorn) -> float:
    """Return the sum over job types of the enqueue counter that /metrics exports."""
    text = gw.request("GET", "/metrics")[2].decode()
    prefix = "taskforge_jobs_enqueued_total{"
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def test_stats_metrics_health_ready_openapi(gw: Gunicorn, engine: Scripts) -> None:
    # Summed over types: past 50 types (the fuzzer makes many) a worker counts "other".
    before = enqueued_total(gw)
    for _ in range(6):  # several connections: both workers serve some
        gw.request("POST", "/enqueue", {"type": "counted"})
    stats = gw.request("GET", "/stats")[2]
    assert stats["jobs"]["pending"] == 6 and stats["total"] == 6
    status, hdrs, text = gw.request("GET", "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain")
    assert b'taskforge_jobs{queue="default",state="pending"} 6.0' in text
    # Counters of every worker are summed (multiprocess mode).
    assert enqueued_total(gw) - before == 6
    assert gw.request("GET", "/health")[2] == {"status": "ok", "redis": "ok"}
    assert gw.request("GET", "/ready")[2] == {"status": "ready", "redis": "ok"}
    assert "/enqueue" in gw.request("GET", "/openapi.json")[2]["paths"]


def test_unknown_path_wrong_method_and_head(gw: Gunicorn) -> None:
    status, _, doc = gw.request("GET", "/nowhere")
    assert status == 404 and "error" in doc
    status, hdrs, doc = gw.request("DELETE", "/enqueue")
    assert (status, hdrs["allow"]) == (405, "POST") and "error" in doc
    status, hdrs, _ = gw.request("OPTIONS", "/stats")
    assert (status, hdrs["allow"]) == (405, "GET, HEAD")
    assert gw.request("HEAD", "/health")[0] == 200


def test_gunicorns_own_errors_are_json_too(gw: Gunicorn) -> None:
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.sendall(b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    # gunicorn 23 answers 400 for an over-long request line, gunicorn 27 answers 414.
    assert head.startswith((b"HTTP/1.1 400", b"HTTP/1.1 414"))
    assert "too large" in json.loads(body)["error"]


def test_every_request_is_one_json_access_line(gw: Gunicorn) -> None:
    gw.request("GET", "/stats", headers={"User-Agent": "probe/1", "X-Request-Id": "req-42"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [line for line in gw.log_lines() if line.get("request_id") == "req-42"]
        if lines:
            break
        time.sleep(0.02)
    assert lines, "no access line"
    line = lines[0]
    assert (line["event"], line["method"], line["path"], line["status"]) == (
        "http_request",
        "GET",
        "/stats",
        200,
    )
    assert line["user_agent"] == "probe/1" and line["duration_ms"] >= 0


def test_a_ready_probe_is_logged_unless_bin_run_sent_it(gw: Gunicorn) -> None:
    # One keep-alive connection: the worker logs a request before it reads the next one on
    # it, so once the last request's line is there, the earlier ones' would be too.
    asked = [
        ("GET", "/ready", READY_PROBE_AGENT, "bin-run-poll"),
        ("GET", "/ready", "lb-probe/1", "lb-poll"),
        ("GET", "/stats", READY_PROBE_AGENT, "not-a-probe"),  # the agent hides only /ready
        ("GET", "/health", "lb-probe/1", "last"),
    ]
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=5)
    try:
        for method, path, agent, request_id in asked:
            conn.request(method, path, headers={"User-Agent": agent, "X-Request-Id": request_id})
            reply = conn.getresponse()
            reply.read()
            assert reply.status == 200, (path, reply.status)
    finally:
        conn.close()

    def logged() -> list[str]:
        return [line.get("request_id") for line in gw.log_lines() if line.get("request_id")]

    wait_until(lambda: "last" in logged(), 5, "the last request's access line")
    assert [rid for rid in logged() if rid in {r[3] for r in asked}] == [
        "lb-poll",
        "not-a-probe",
        "last",
    ]


def test_idempotency_conflict_is_409(gw: Gunicorn) -> None:
    key = {"Idempotency-Key": "conflict-1"}
    first = gw.request("POST", "/enqueue", {"type": "a"}, key)
    assert first[0] == 201
    assert gw.request("POST", "/enqueue", {"type": "a"}, key)[2]["id"] == first[2]["id"]
    status, _, doc = gw.request("POST", "/enqueue", {"type": "b"}, key)
    assert (status, doc["job_id"]) == (409, first[2]["id"])


def test_fifty_concurrent_requests_with_one_key_create_one_job(
    gw: Gunicorn, r: redis.Redis
) -> None:
    body = json.dumps({"type": "race", "payload": {"n": 1}}).encode()
    request = (
        b"POST /enqueue HTTP/1.1\r\nHost: x\r\nIdempotency-Key: race-1\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body
    )
    socks = [socket.create_connection(("127.0.0.1", gw.port), timeout=10) for _ in range(50)]
    barrier = threading.Barrier(50, timeout=10)
    replies: list[bytes] = [b""] * 50

    def send(i: int) -> None:
        barrier.wait()
        socks[i].sendall(request)
        while chunk := socks[i].recv(65536):
            replies[i] += chunk

    threads = [threading.Thread(target=send, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for sock in socks:
        sock.close()
    assert not any(thread.is_alive() for thread in threads)
    # Counted in Redis, not from the answers.
    assert jobs_in_redis(r) == 1
    statuses = sorted(int(reply[9:12]) for reply in replies)
    assert statuses == [200] * 49 + [201]
    ids = {json.loads(reply.partition(b"\r\n\r\n")[2])["id"] for reply in replies}
    assert len(ids) == 1


# --- authentication under gunicorn -----------------------------------------------------------


def test_auth_on_wrong_and_right_token(start_gateway: Any, r: redis.Redis) -> None:
    with start_gateway(TASKFORGE_API_TOKEN=TOKEN) as locked:
        status, hdrs, _ = locked.request("POST", "/enqueue", {"type": "a"})
        assert status == 401 and hdrs["www-authenticate"].startswith("Bearer")
        wrong = {"Authorization": "Bearer nope"}
        status, hdrs, _ = locked.request("POST", "/enqueue", {"type": "a"}, wrong)
        assert status == 401 and 'error="invalid_token"' in hdrs["www-authenticate"]
        right = {"Authorization": f"Bearer {TOKEN}"}
        assert locked.request("POST", "/enqueue", {"type": "a"}, right)[0] == 201
        assert locked.request("GET", "/health")[0] == 200
        assert locked.request("GET", "/ready")[0] == 200
        assert locked.request("GET", "/metrics")[0] == 401
        assert not any(line.get("warning") == AUTH_DISABLED for line in locked.log_lines())
    assert jobs_in_redis(r) == 1


def open_warnings(server: Gunicorn) -> list[dict[str, Any]]:
    """Return the log lines that warn about a gateway without a token."""
    return [line for line in server.log_lines() if line.get("warning") == AUTH_DISABLED]


def wait_for_workers(server: Gunicorn, count: int) -> None:
    """Wait until `count` workers have built the app (each logs gateway_started)."""
    wait_until(
        lambda: sum(line.get("event") == "gateway_started" for line in server.log_lines()) >= count,
        15,
        f"{count} gateway workers to start",
    )


def test_auth_off_beyond_loopback_is_warned_once_per_start_naming_the_address(
    start_gateway: Any,
) -> None:
    # Three workers build the app three times: the warning comes from gunicorn's master.
    with start_gateway(WEB_CONCURRENCY="3") as open_gw:
        assert open_gw.request("GET", "/stats")[0] == 200
        wait_for_workers(open_gw, 3)
        warnings = open_warnings(open_gw)
        assert [(w["event"], w["address"]) for w in warnings] == [
            ("config_warning", f"0.0.0.0:{open_gw.port}")
        ], warnings


def test_auth_off_on_loopback_only_is_not_warned(start_gateway: Any) -> None:
    with start_gateway(TASKFORGE_BIND_HOST="127.0.0.1") as local:
        assert local.request("GET", "/stats")[0] == 200
        wait_for_workers(local, 2)
        assert open_warnings(local) == []


# --- the Prometheus multiprocess directory ---------------------------------------------------


@pytest.mark.slow
def test_each_start_has_its_own_metrics_directory_removed_on_a_clean_exit(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    # Two gateways on one port (two loopback addresses): once they shared one directory, and
    # the second start emptied the first one's counters.
    temp, port = tmp_path / "tmp", free_port()
    temp.mkdir()
    env = {"TMPDIR": str(temp), "PROMETHEUS_MULTIPROC_DIR": ""}

    def directories() -> list[Path]:
        return sorted(temp.glob(f"taskforge-gateway-{port}-*-metrics"))

    def start(host: str) -> Any:
        (tmp_path / host).mkdir()
        return run_gunicorn(
            redis_server.url, tmp_path / host, port=port, host=host, TASKFORGE_BIND_HOST=host, **env
        )

    with start("127.0.0.1") as first:
        assert first.request("POST", "/enqueue", {"type": "a"})[0] == 201
        [first_dir] = directories()
        with start("127.0.0.2") as second:
            # A worker still forking when SIGTERM comes misses it (gunicorn's race) and holds
            # the exit for the 25 s graceful timeout: stop only a fully started gateway.
            wait_for_workers(second, 2)
            assert second.request("POST", "/enqueue", {"type": "a"})[0] == 201
            assert len(directories()) == 2
            assert enqueued_total(first) == enqueued_total(second) == 1
        assert second.process.returncode == 0  # a clean exit
        assert directories() == [first_dir]
        assert enqueued_total(first) == 1
    assert directories() == []


# --- Redis outage ----------------------------------------------------------------------------


@pytest.mark.slow
def test_redis_down_is_503_within_a_second_and_recovers(
    gw: Gunicorn, redis_server: RedisServer
) -> None:
    assert gw.request("POST", "/enqueue", {"type": "a"})[0] == 201
    redis_server.stop()
    try:
        for method, path in [("POST", "/enqueue"), ("GET", "/stats"), ("GET", "/health")]:
            started = time.monotonic()
            status, hdrs, doc = gw.request(
                method, path, {"type": "a"} if method == "POST" else None
            )
            assert time.monotonic() - started < 1.0
            assert (status, hdrs["retry-after"]) == (503, "1")
            assert "error" in doc
        assert gw.request("GET", "/metrics")[0] == 503
    finally:
        redis_server.start()
    # Pooled connections to the old server are dead: the first call per connection retries.
    assert [gw.request("POST", "/enqueue", {"type": "a"})[0] for _ in range(4)] == [201] * 4
    assert gw.request("GET", "/ready")[0] == 200


def test_a_worker_killed_by_a_fatal_signal_leaves_its_python_stacks_in_the_log(
    start_gateway: Any,
) -> None:
    # deploy/gunicorn.conf.py enables faulthandler in each worker: a crash in a C extension
    # (CI saw "Worker was sent SIGSEGV!" twice, with nothing more) shows where every thread was.
    with start_gateway() as gw:
        [pid, *_] = gw.worker_pids()
        # Booted: post_worker_init has run once the worker catches SIGSEGV (/proc's SigCgt).
        wait_until(lambda: _catches(pid, signal.SIGSEGV), 10.0, "the worker's boot")
        os.kill(pid, signal.SIGSEGV)
        # faulthandler writes its header, then each thread's stack in turn: wait for the whole
        # report, the signalled thread's ("Current thread") included, not only its first line.
        wait_until(
            lambda: _whole_report(gw.log_path.read_text("utf-8")),
            10.0,
            "faulthandler's report of the crashed worker",
        )


def _whole_report(log: str) -> bool:
    return "Fatal Python error: Segmentation fault" in log and "Current thread" in log


def _catches(pid: int, sig: signal.Signals) -> bool:
    """Tell whether process `pid` has a handler for `sig` (its /proc status's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) & (1 << (sig - 1)))
