"""gateway.http_worker in-process: its poller reads heads under a deadline and sheds at the cap.

The worker runs its real loop on a thread, on a real loopback listener, with one request
thread and a head deadline of half a second, so a few slow clients show what thousands would.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import gunicorn.glogging
import pytest
from gunicorn.config import Config
from gunicorn.workers.gthread import TConn

from gateway.http_worker import MAX_HEAD_BYTES, HeadReadingWorker, raise_open_files_limit

HEAD_TIMEOUT = 0.5  # seconds: the worker's deadline for a complete head, in these tests
CLIENT_TIMEOUT = 5.0  # seconds a client socket waits: far beyond any deadline here
GET = b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n"


BLOCKED = threading.Event()  # set when a request for /block is in its thread
RELEASE = threading.Event()  # a request for /block waits for it


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    """Answer with the request body and whether the raw socket is in the environ."""
    if environ["PATH_INFO"] == "/block":
        BLOCKED.set()
        RELEASE.wait(CLIENT_TIMEOUT)
    body = environ["wsgi.input"].read()
    has_socket = isinstance(environ.get("gunicorn.socket"), socket.socket)
    reply = b"socket=%d body=%s" % (has_socket, body)
    start_response("200 OK", [("Content-Length", str(len(reply)))])
    return [reply]


def make_worker(
    listener: socket.socket, threads: int = 1, connections: int = 100, keepalive: int = 2
) -> HeadReadingWorker:
    """Return a worker on `listener`, ready for run() on a thread."""
    cfg = Config()
    for name, value in (("threads", threads), ("worker_connections", connections)):
        cfg.set(name, value)
    cfg.set("keepalive", keepalive)
    worker = HeadReadingWorker(
        1, os.getppid(), [listener], None, 30, cfg, gunicorn.glogging.Logger(cfg)
    )
    worker.head_timeout = HEAD_TIMEOUT
    worker.wsgi = app
    worker.prepare()
    return worker


@pytest.fixture
def serve() -> Iterator[Callable[..., int]]:
    """Start a worker (threads=1 unless told) on a free port; return a starter giving the port."""
    started: list[tuple[HeadReadingWorker, threading.Thread, socket.socket]] = []

    def start(threads: int = 1, connections: int = 100, keepalive: int = 2) -> int:
        listener = socket.create_server(("127.0.0.1", 0))
        worker = make_worker(
            listener, threads=threads, connections=connections, keepalive=keepalive
        )
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread, listener))
        return listener.getsockname()[1]

    yield start
    for worker, thread, _ in started:
        worker.alive = False
        os.write(worker.PIPE[1], b".")
        thread.join(CLIENT_TIMEOUT)
        assert not thread.is_alive(), "the worker did not stop"
        worker.tmp.close()


def connect(port: int) -> socket.socket:
    """Open a client connection to the worker."""
    return socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)


def read_reply(sock: socket.socket, buffered: bytearray | None = None) -> bytes:
    """Read one whole (Content-Length) reply; bytes past it stay in `buffered` if given."""
    data = buffered if buffered is not None else bytearray()
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return bytes(data)
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    head = bytes(data[:end])
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(data) < end + length:
        data += sock.recv(65536)
    body = bytes(data[end : end + length])
    del data[: end + length]
    return head.split(b"\r\n")[0] + b" | " + body


def closed_by_server(sock: socket.socket) -> bool:
    """Wait (bounded by the socket's timeout) for the server to close; True if it did."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_slow_clients_hold_no_thread(serve: Callable[..., int]) -> None:
    port = serve(threads=1)
    slow = [connect(port) for _ in range(3)]
    for sock in slow:
        sock.sendall(b"GET /x HTTP/1.1\r\nHost:")  # and nothing more
    with connect(port) as sock:  # gthread 23 would give its one thread to a slow client
        sock.sendall(GET)
        assert read_reply(sock) == b"HTTP/1.1 200 OK | socket=1 body="
    for sock in slow:
        sock.close()


def test_idle_and_trickling_connections_are_closed_at_the_deadline(
    serve: Callable[..., int],
) -> None:
    port = serve()
    idle, trickle = connect(port), connect(port)
    opened = time.monotonic()
    trickle.settimeout(0.1)
    closed = False
    for byte in GET[:-4]:  # a byte every 0.1 s: 25 bytes would take 2.5 s
        try:
            trickle.send(bytes([byte]))
            closed = trickle.recv(1) == b""
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if closed:
            break
    assert closed, "a trickling client kept its connection past the deadline"
    assert time.monotonic() - opened >= HEAD_TIMEOUT
    assert closed_by_server(idle)
    with connect(port) as sock:  # and the worker still serves
        sock.sendall(GET)
        assert read_reply(sock).startswith(b"HTTP/1.1 200")


def test_a_head_in_pieces_is_pushed_back_with_its_body_and_keep_alive_works(
    serve: Callable[..., int],
) -> None:
    port = serve()
    request = b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
    with connect(port) as sock:
        for piece in (request[:7], request[7:30], request[30:48], request[48:]):
            sock.sendall(piece)
            time.sleep(0.05)  # separate segments, so the poller sees the head in pieces
        assert read_reply(sock) == b"HTTP/1.1 200 OK | socket=1 body=hello"
        sock.sendall(GET)  # the same connection, back from its keep-alive wait
        assert read_reply(sock) == b"HTTP/1.1 200 OK | socket=1 body="


def test_pipelined_requests_are_all_answered(serve: Callable[..., int]) -> None:
    port = serve()
    with connect(port) as sock:  # gthread 23 left the second in its parser, unanswered
        sock.sendall(GET + GET + b"GET /x HTTP/1.1\r\nHost:")
        buffered = bytearray()
        assert read_reply(sock, buffered) == b"HTTP/1.1 200 OK | socket=1 body="
        assert read_reply(sock, buffered) == b"HTTP/1.1 200 OK | socket=1 body="
        sock.sendall(b" t\r\n\r\n")  # the third head, completed after a wait in the poller
        assert read_reply(sock, buffered) == b"HTTP/1.1 200 OK | socket=1 body="


def test_over_large_heads_get_4xx_from_the_poller_or_the_parser(serve: Callable[..., int]) -> None:
    port = serve()
    with connect(port) as sock:
        sock.sendall(b"GET /x HTTP/1.1\r\n" + b"X-Big: " + b"a" * 8000 + b"\r\n")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(MAX_HEAD_BYTES // 8000 + 1):
                sock.sendall(b"X-Big: " + b"a" * 8000 + b"\r\n")
        assert read_reply(sock).startswith(b"HTTP/1.1 431")
    with connect(port) as sock:  # gunicorn's parser answers a request line over its limit
        sock.sendall(b"GET /" + b"a" * 5000)
        assert read_reply(sock).startswith(b"HTTP/1.1 400")


def test_at_the_cap_the_oldest_waiting_connection_is_shed(serve: Callable[..., int]) -> None:
    port = serve(connections=3)
    waiting = []
    for _ in range(3):
        waiting.append(connect(port))
        waiting[-1].sendall(b"G")  # a head begun; the listen queue keeps their order
    with connect(port) as sock:  # the fourth: admitted, and the first one pays for it
        sock.sendall(GET)
        assert read_reply(sock).startswith(b"HTTP/1.1 200")
    assert closed_by_server(waiting[0])
    waiting[1].settimeout(0.1)
    with pytest.raises(TimeoutError):
        waiting[1].recv(1)  # still open: only one was shed
    for sock in waiting:
        sock.close()


def test_at_the_cap_with_every_connection_in_a_thread_a_new_one_is_closed_at_once(
    serve: Callable[..., int],
) -> None:
    port = serve(connections=1)
    BLOCKED.clear()
    RELEASE.clear()
    with connect(port) as busy:
        busy.sendall(GET.replace(b"/x", b"/block"))
        assert BLOCKED.wait(CLIENT_TIMEOUT)  # in its thread: no longer a waiting head to shed
        with connect(port) as refused:
            assert closed_by_server(refused)  # not left waiting in the accept queue
        RELEASE.set()
        assert read_reply(busy).startswith(b"HTTP/1.1 200")


def test_an_idle_keep_alive_connection_is_closed_after_keepalive(
    serve: Callable[..., int],
) -> None:
    port = serve(keepalive=1)
    with connect(port) as sock:
        sock.sendall(GET)
        assert read_reply(sock).startswith(b"HTTP/1.1 200")
        waited = time.monotonic()
        assert closed_by_server(sock)
        assert time.monotonic() - waited >= 0.9  # its keep-alive second, not the head deadline


def test_an_event_for_a_connection_shed_in_the_same_round_is_ignored() -> None:
    # The poller hands out a round of events at once: a connection shed by an accept early
    # in the round may still have its readable event later in it.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        worker = make_worker(listener)
        worker._set_up_tables()
        ours, theirs = socket.socketpair()
        conn = TConn(worker.cfg, ours, ("127.0.0.1", 1), ("127.0.0.1", 2))
        conn.head = bytearray()
        worker.nr_conns, worker._reading[conn] = 1, worker._now
        worker.poller.register(ours, selectors.EVENT_READ)
        theirs.sendall(b"G")
        assert worker._shed_oldest()
        worker._readable(conn, ours)
        assert (worker.nr_conns, worker._closed_early["shed"]) == (0, 1)
        theirs.close()
        worker.tmp.close()


def test_a_new_clients_request_is_handed_over_before_hundreds_of_closing_connections_are_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An attacker's idle connections all close at once while a client connects and sends its
    # request: the worker must hand that request to a thread first, in the same round of
    # events, not after reading every closed connection's end (30 µs each: thousands of them
    # once stalled enqueues for 0.2–0.3 s as an attack ended).
    idle = 300
    with socket.create_server(("127.0.0.1", 0), backlog=idle + 8) as listener:
        listener.setblocking(False)
        worker = make_worker(listener, connections=idle + 8)
        worker._set_up_tables()
        worker.poller.register(
            listener, selectors.EVENT_READ, partial(worker._accept, listener.getsockname())
        )
        open_at_hand_over: list[int] = []
        monkeypatch.setattr(
            worker, "_hand_over", lambda conn: open_at_hand_over.append(worker.nr_conns)
        )
        attackers = [connect(listener.getsockname()[1]) for _ in range(idle)]
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while worker.nr_conns < idle:
            assert time.monotonic() < deadline, f"{worker.nr_conns} of {idle} accepted"
            worker.step()
        for sock in attackers:
            sock.close()
        client = connect(listener.getsockname()[1])
        client.sendall(GET)
        wait_readable = selectors.DefaultSelector()  # every end and the client are in
        wait_readable.register(listener, selectors.EVENT_READ)
        assert wait_readable.select(CLIENT_TIMEOUT)
        wait_readable.close()
        worker.step()
        # Handed over first in that round, then every closed connection read and dropped.
        assert open_at_hand_over == [idle + 1]
        assert worker.nr_conns == 1  # the client's, which the stand-in hand-over left
        client.close()
        worker.tmp.close()


def test_events_are_ranked_listeners_then_kept_alive_then_head_readers() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        worker = make_worker(listener)
        worker._set_up_tables()
        pairs = [socket.socketpair() for _ in range(2)]
        reading, idle = (
            TConn(worker.cfg, ours, ("127.0.0.1", 1), ("127.0.0.1", 2)) for ours, _ in pairs
        )
        worker._reading[reading], worker._idle[idle] = worker._now, worker._now

        def event(data: object) -> tuple[selectors.SelectorKey, int]:
            return selectors.SelectorKey(listener, listener.fileno(), selectors.EVENT_READ, data), 1

        ranks = [
            worker._order(event(partial(worker._readable, reading))),
            worker._order(event(partial(worker._readable, idle))),
            worker._order(event(partial(worker._accept, listener.getsockname()))),
            worker._order(event(worker._drain_wakeups)),
        ]
        assert ranks == [2, 1, 0, 0]
        for pair in pairs:
            for sock in pair:
                sock.close()
        worker.tmp.close()


def test_open_files_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.fail(f"this test needs a finite hard RLIMIT_NOFILE above 1024, not {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    try:
        assert raise_open_files_limit() == (1024, hard)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
        assert raise_open_files_limit() == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1024), hard))
