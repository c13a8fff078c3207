"""A call sent now and read later (ScriptTransport.begin, what a busy worker sends once a job)
goes out on its thread's kept connection, against the private redis-server: taken back without
the pool while fresh, through the pool once idle, never shared between threads, two calls in
flight on two connections, never reused in a forked child, sound again after an error."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Policy
from shared.engine.scripts import script_transport
from shared.engine.scripts.script_transport import ScriptTransport
from tests.support.redis_server import RedisServer

# Answers its argument and the id of the client that sent it (the connection), read by the
# script from a key the test sets per connection: CLIENT ID is not allowed in a script.
ECHO = """-- KEYS[1] -> marker: key
-- ARGV[1] -> value: argument
return {ARGV[1], redis.call('INCR', KEYS[1])}
"""
FAIL = """-- KEYS[1] -> marker: key
return redis.error_reply('boom')
"""


@pytest.fixture
def transport(r: redis.Redis) -> Iterator[ScriptTransport]:
    made = ScriptTransport(r, {"echo": ECHO, "fail": FAIL}, Policy(), durable_marker="")
    made.load()
    yield made


@pytest.fixture
def takes(transport: ScriptTransport, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The connections the pool handed out, in order."""
    pool = transport.redis.connection_pool
    handed: list[Any] = []
    get = pool.get_connection

    def counting(*args: Any, **kwargs: Any) -> Any:
        conn = get(*args, **kwargs)
        handed.append(conn)
        return conn

    monkeypatch.setattr(pool, "get_connection", counting)
    return handed


def _kill_clients(server: RedisServer) -> None:
    """Close every other client's connection, as a Redis restart does (from a client of its
    own, so the pool under test hands out nothing for it)."""
    admin = redis.Redis.from_url(server.url)
    try:
        assert admin.client_kill_filter(skipme=True, _type="normal") >= 1
    finally:
        admin.close()


def _echo(transport: ScriptTransport, value: str) -> list[bytes]:
    return transport.begin("echo", marker="n", value=value).reply()


def test_back_to_back_calls_take_the_kept_connection_not_the_pool(
    transport: ScriptTransport, takes: list[Any]
) -> None:
    for i in range(50):
        assert _echo(transport, f"v{i}") == [f"v{i}".encode(), i + 1]
    assert len(takes) == 1
    assert takes[0] not in transport.redis.connection_pool._available_connections


def test_a_second_call_in_flight_takes_another_connection_given_back_to_the_pool(
    transport: ScriptTransport, takes: list[Any]
) -> None:
    _echo(transport, "warm")  # the thread now keeps a connection
    first = transport.begin("echo", marker="n", value="first")
    second = transport.begin("echo", marker="n", value="second")
    assert len(takes) == 2  # the kept one went to `first`
    assert second.reply() == [b"second", 3]  # read before the first: no cross-talk
    assert first.reply() == [b"first", 2]
    # The thread keeps the connection read first; the other went back to the pool.
    kept, returned = takes[1], takes[0]
    assert transport._lanes.conn is kept
    assert returned in transport.redis.connection_pool._available_connections
    for i in range(5):
        _echo(transport, f"again{i}")
    assert len(takes) == 2


def test_a_connection_idle_past_fresh_goes_through_the_pool(
    transport: ScriptTransport,
    takes: list[Any],
    monkeypatch: pytest.MonkeyPatch,
    redis_server: RedisServer,
) -> None:
    _echo(transport, "warm")
    # Redis closes the kept connection while the thread idles (a restart, CLIENT KILL).
    _kill_clients(redis_server)
    monkeypatch.setattr(script_transport, "FRESH", 0.0)  # it idled past FRESH
    assert _echo(transport, "after")[0] == b"after"  # the pool's check connected it again
    assert len(takes) == 2


def test_a_fresh_connection_closed_by_redis_fails_once_then_connects_again(
    transport: ScriptTransport, takes: list[Any], redis_server: RedisServer
) -> None:
    """The price of skipping the pool's check: within FRESH a closed socket fails that call
    (effect unknown: the caller repeats it, as any lost reply), and the next connects again."""
    _echo(transport, "warm")
    _kill_clients(redis_server)
    with pytest.raises(redis.ConnectionError):
        _echo(transport, "lost")
    assert _echo(transport, "next")[0] == b"next"
    assert len(takes) == 1  # the same connection, connected again


def test_a_script_error_leaves_the_kept_connection_sound(
    transport: ScriptTransport, takes: list[Any]
) -> None:
    _echo(transport, "warm")
    with pytest.raises(redis.ResponseError, match="boom"):
        transport.begin("fail", marker="n").reply()
    assert _echo(transport, "after") == [b"after", 2]
    assert len(takes) == 1


def test_each_thread_keeps_its_own_connection(transport: ScriptTransport, takes: list[Any]) -> None:
    answers: dict[str, list[list[bytes]]] = {}

    def run(name: str) -> None:
        answers[name] = [_echo(transport, f"{name}{i}") for i in range(100)]

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    for name in ("a", "b", "c"):
        assert [answer[0] for answer in answers[name]] == [
            f"{name}{i}".encode() for i in range(100)
        ]
    assert len(takes) == 3
    assert len({id(conn) for conn in takes}) == 3


def test_a_forked_child_never_sends_on_the_parents_kept_connection(
    transport: ScriptTransport,
) -> None:
    _echo(transport, "warm")
    kept = transport._lanes.conn
    assert kept is not None
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a call of its own, then report which connection it used
        code = 1
        try:
            sent = transport.begin("echo", marker="n", value="child")
            used_parents = sent._conn is kept
            answer = sent.reply()
            os.write(write_end, b"parent" if used_parents else repr(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = os.read(read_end, 1000)
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0, report
    assert report == repr([b"child", 2]).encode()
    assert _echo(transport, "parent") == [b"parent", 3]  # the parent's socket undisturbed
    assert transport._lanes.conn is kept


def test_a_reply_read_by_another_thread_gives_its_connection_to_the_pool(
    transport: ScriptTransport, takes: list[Any]
) -> None:
    # A worker's flusher reads a held job's completion late, on its own thread.
    _echo(transport, "warm")
    sent = transport.begin("echo", marker="n", value="late")
    answers: list[Any] = []
    reader = threading.Thread(target=lambda: answers.append(sent.reply()))
    reader.start()
    reader.join(timeout=10)
    assert answers == [[b"late", 2]]
    assert takes[0] in transport.redis.connection_pool._available_connections
    assert transport._lanes.conn is None  # the sender keeps nothing: its next call asks the pool
    assert _echo(transport, "next") == [b"next", 3]
    assert len(takes) == 2
