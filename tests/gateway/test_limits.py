"""Body limits and Redis faults under real gunicorn: 413 without reading, 503 without waiting."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from gateway.body import MAX_BODY_BYTES
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.tcp_proxy import TcpProxy

MIB = 1024 * 1024
# A worker's peak memory may grow by this much over the test's 1 MiB warm-up, far below the
# 10 MiB a worker that buffered the body would need.
RSS_SLACK_KIB = 3 * 1024


def body_of_size(size: int) -> bytes:
    """Return a valid enqueue body of exactly `size` bytes."""
    head, tail = b'{"type": "big", "payload": {"k": "', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def peak_rss_kib(gw: Gunicorn) -> int:
    """Return the largest peak resident memory (VmHWM) of the gunicorn workers."""
    peaks = []
    for pid in gw.worker_pids():
        status = Path(f"/proc/{pid}/status").read_text()
        peaks.append(int(status.split("VmHWM:")[1].split()[0]))
    return max(peaks)


def read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, dict[str, Any]]:
    """Read one response until the server closes; return its status and JSON body."""
    sock.settimeout(timeout)
    reply = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head[9:12]), json.loads(body)


def send_until_answered(sock: socket.socket, chunks: list[bytes]) -> None:
    """Send `chunks` until the server starts answering (or refuses to take more)."""
    for chunk in chunks:
        if select.select([sock], [], [], 0)[0]:
            return
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return


def warm_up(gw: Gunicorn) -> None:
    """Serve legitimate 1 MiB bodies on every worker, so their peak memory includes that."""
    for _ in range(6):
        assert gw.request("POST", "/enqueue", body_of_size(MAX_BODY_BYTES))[0] == 201


def post_raw(gw: Gunicorn, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST `body` as a client that reads while it sends (as curl does): status and JSON."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        head = f"POST /enqueue HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
        sock.sendall(f"{head}Connection: close\r\n\r\n".encode())
        send_until_answered(sock, [body[i : i + 65536] for i in range(0, len(body), 65536)])
        return read_response(sock)


def test_a_body_at_the_limit_is_accepted_and_one_byte_more_is_413(gw: Gunicorn) -> None:
    assert post_raw(gw, body_of_size(MAX_BODY_BYTES))[0] == 201
    status, doc = post_raw(gw, body_of_size(MAX_BODY_BYTES + 1))
    assert status == 413
    assert "larger than" in doc["error"]


def test_a_10_mib_body_is_refused_from_its_header_without_growing_the_worker(
    gw: Gunicorn,
) -> None:
    warm_up(gw)
    before = peak_rss_kib(gw)
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            head = f"POST /enqueue HTTP/1.1\r\nHost: x\r\nContent-Length: {10 * MIB}\r\n\r\n"
            sock.sendall(head.encode())  # and not one byte of the body
            status, doc = read_response(sock)
        assert status == 413 and "larger than" in doc["error"]
    assert peak_rss_kib(gw) - before < RSS_SLACK_KIB


def test_a_chunked_body_over_the_limit_is_cut_off_at_the_limit(gw: Gunicorn) -> None:
    warm_up(gw)
    before = peak_rss_kib(gw)
    piece = b"x" * (64 * 1024)
    chunk = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"POST /enqueue HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            send_until_answered(sock, [chunk] * (10 * MIB // len(piece)))
            status, doc = read_response(sock)
        assert status == 413 and "larger than" in doc["error"]
    assert peak_rss_kib(gw) - before < RSS_SLACK_KIB


def test_a_small_chunked_body_is_accepted(gw: Gunicorn) -> None:
    body = json.dumps({"type": "chunked"}).encode()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(b"POST /enqueue HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        sock.sendall(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        status, doc = read_response(sock)
    assert (status, doc["type"]) == (201, "chunked")


@pytest.mark.slow
def test_a_hung_redis_is_503_within_about_a_second(
    redis_server: Any, r: redis.Redis, tmp_path: Path
) -> None:
    with (
        TcpProxy("127.0.0.1", redis_server.port) as proxy,
        run_gunicorn(f"redis://{proxy.host}:{proxy.port}/0", tmp_path) as gw,
    ):
        assert gw.request("POST", "/enqueue", {"type": "a"})[0] == 201
        proxy.pause()  # Redis accepts nothing and answers nothing, like a stuck server
        try:
            started = time.monotonic()
            status, hdrs, _ = gw.request("POST", "/enqueue", {"type": "a"})
            elapsed = time.monotonic() - started
        finally:
            proxy.resume()
        assert (status, hdrs["retry-after"]) == (503, "1")
        assert elapsed < 1.6
        assert gw.request("GET", "/health")[0] == 200
