"""The fault-injection proxy itself: it forwards, pauses, resets, delays and loses replies."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.redis_server import RedisServer
from tests.support.tcp_proxy import TcpProxy

WAIT = 5.0  # seconds: the bound on anything expected to happen


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[TcpProxy]:
    with TcpProxy(redis_server.host, redis_server.port) as running:
        yield running


@pytest.fixture
def via_proxy(proxy: TcpProxy) -> Iterator[redis.Redis]:
    """Return a client that goes through the proxy and never retries (errors stay visible)."""
    client = redis.Redis(
        host=proxy.host,
        port=proxy.port,
        retry=Retry(NoBackoff(), 0),
        socket_timeout=WAIT,
        socket_connect_timeout=WAIT,
    )
    yield client
    client.close()


def test_forwards_commands_and_replies(r: redis.Redis, via_proxy: redis.Redis) -> None:
    assert via_proxy.set("greeting", "hello")
    assert via_proxy.get("greeting") == b"hello"
    assert r.get("greeting") == b"hello"


def test_pause_holds_requests_until_resume(
    r: redis.Redis, proxy: TcpProxy, via_proxy: redis.Redis
) -> None:
    via_proxy.ping()  # connect before pausing: the held bytes are a command, not a handshake
    proxy.pause()
    done = threading.Event()
    replies: list[int] = []

    def incr() -> None:
        replies.append(via_proxy.incr("counter"))
        done.set()

    caller = threading.Thread(target=incr, daemon=True)
    caller.start()
    try:
        assert not done.wait(0.3), "a reply came through a paused proxy"
        assert r.get("counter") is None, "a paused proxy forwarded the request"
    finally:
        proxy.resume()
    assert done.wait(WAIT)
    caller.join(WAIT)
    assert replies == [1]


def test_reset_all_aborts_open_connections(proxy: TcpProxy, via_proxy: redis.Redis) -> None:
    with socket.create_connection((proxy.host, proxy.port), timeout=WAIT) as raw:
        raw.sendall(b"PING\r\n")
        assert raw.recv(64) == b"+PONG\r\n"
        assert proxy.connections == 1
        proxy.reset_all()
        with pytest.raises(ConnectionResetError):
            raw.recv(64)
    assert via_proxy.ping(), "a new connection after the reset is served normally"


def test_reset_all_fails_a_command_in_flight(
    r: redis.Redis, proxy: TcpProxy, via_proxy: redis.Redis
) -> None:
    errors: list[Exception] = []
    # BLPOP on an empty list waits inside Redis: the command is in flight until the reset.
    caller = threading.Thread(
        target=_record_error, args=(lambda: via_proxy.blpop(["empty"], 0), errors), daemon=True
    )
    caller.start()
    _wait_for(lambda: r.info("clients")["blocked_clients"] == 1, "BLPOP to reach Redis")
    proxy.reset_all()
    caller.join(WAIT)
    assert not caller.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], redis.ConnectionError)


def test_peak_connections_counts_the_most_open_at_once(proxy: TcpProxy) -> None:
    first = socket.create_connection((proxy.host, proxy.port), timeout=WAIT)
    second = socket.create_connection((proxy.host, proxy.port), timeout=WAIT)
    _wait_for(lambda: proxy.connections == 2, "both connections to be accepted")
    first.close()
    second.close()
    _wait_for(lambda: proxy.connections == 0, "both connections to close")
    with socket.create_connection((proxy.host, proxy.port), timeout=WAIT):
        _wait_for(lambda: proxy.connections == 1, "a third connection")
        assert proxy.peak_connections == 2


def test_latency_delays_each_reply(proxy: TcpProxy, via_proxy: redis.Redis) -> None:
    via_proxy.ping()
    proxy.set_latency(0.5)
    started = time.monotonic()
    via_proxy.ping()
    assert time.monotonic() - started >= 0.5
    proxy.set_latency(0)
    started = time.monotonic()
    via_proxy.ping()
    assert time.monotonic() - started < 0.5


def test_drop_next_reply_runs_the_command_and_loses_its_reply(
    r: redis.Redis, proxy: TcpProxy, via_proxy: redis.Redis
) -> None:
    via_proxy.set("unrelated", "x")
    lost = proxy.drop_next_reply(b"INCR")
    assert via_proxy.get("unrelated") == b"x", "a request without the match passes"
    with pytest.raises(redis.ConnectionError):
        via_proxy.incr("counter")
    assert lost.is_set()
    assert r.get("counter") == b"1", "the command ran although its reply was lost"
    assert via_proxy.incr("counter") == 2, "one-shot: the next matching reply arrives"


def test_drop_next_replies_loses_count_replies_in_a_row(
    r: redis.Redis, proxy: TcpProxy, via_proxy: redis.Redis
) -> None:
    lost = proxy.drop_next_reply(b"INCR", count=2)
    with pytest.raises(redis.ConnectionError):
        via_proxy.incr("counter")
    assert not lost.is_set(), "set only when the last of the two replies is lost"
    with pytest.raises(redis.ConnectionError):
        via_proxy.incr("counter")
    assert lost.is_set()
    assert r.get("counter") == b"2", "both commands ran"
    assert via_proxy.incr("counter") == 3


def test_stop_ends_every_thread_and_the_listener(
    redis_server: RedisServer,
) -> None:
    proxy = TcpProxy(redis_server.host, redis_server.port).start()
    client = redis.Redis(host=proxy.host, port=proxy.port, retry=Retry(NoBackoff(), 0))
    client.ping()
    proxy.stop()
    prefix = f"tcp-proxy-{proxy.port}-"
    assert [t.name for t in threading.enumerate() if t.name.startswith(prefix)] == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((proxy.host, proxy.port), timeout=WAIT).close()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    client.close()


def _record_error(call: Callable[[], object], errors: list[Exception]) -> None:
    try:
        call()
    except Exception as exc:  # the test inspects whatever the call raised
        errors.append(exc)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)
