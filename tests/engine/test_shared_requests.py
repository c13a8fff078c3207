"""Script calls sharing one request (ScriptTransport.share_requests, the gateway's) against the
private redis-server: each call answered with its own reply, in one request on one connection;
a script's error reply reaches its call alone and quotes no argument; NOSCRIPT loads the
scripts and runs each call once; a connection lost mid-request sends again only the calls
Redis did not answer; a request that fails as a whole fails each of its calls, and the next
call goes through; real enqueues through Scripts, all made, each answered with its own job.

Who sends what, and when, with stub senders: tests/engine/test_group_commit.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from gateway.app import CONNECT_TIMEOUT, POOL_WAIT, SOCKET_TIMEOUT, gateway_client
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.engine.scripts.group_commit import GroupedCall
from shared.engine.scripts.script_transport import RELOAD_MARGIN, ScriptTransport
from shared.model.job_ids import new_job_id
from shared.model.jobs import validate_enqueue
from shared.settings.config import Settings
from tests.engine.test_group_commit import WAIT, until

# Answers its argument and how many calls of it have run (counted in Redis).
ECHO = """-- KEYS[1] -> counter: key
-- ARGV[1] -> value: argument
return {ARGV[1], redis.call('INCR', KEYS[1])}
"""
FAIL = """-- KEYS[1] -> counter: key
-- ARGV[1] -> value: argument
return redis.error_reply('boom')
"""


class Held:
    """Holds the transport's lone calls until released, so the calls behind one queue."""

    def __init__(self, transport: ScriptTransport, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.together: list[list[GroupedCall]] = []
        self.before_together: Callable[[], None] = lambda: None
        group = transport._group
        assert group is not None
        # One call in flight makes the rest queue (the transport allows AT_ONCE; which calls
        # go at once is test_group_commit's).
        monkeypatch.setattr(group, "at_once", 1)
        alone, together = group._alone, group._together

        def held_alone(call: GroupedCall) -> Any:
            assert self.release.wait(WAIT)
            return alone(call)

        def counted_together(calls: list[GroupedCall]) -> None:
            self.together.append(list(calls))
            self.before_together()
            together(calls)

        monkeypatch.setattr(group, "_alone", held_alone)
        monkeypatch.setattr(group, "_together", counted_together)
        self.group = group


@pytest.fixture
def client(r: redis.Redis, settings: Settings) -> Iterator[redis.Redis]:
    """The gateway's own client (its timeouts, its one retry of a connection error)."""
    made = gateway_client(settings)
    yield made
    made.close()


@pytest.fixture
def transport(client: redis.Redis) -> ScriptTransport:
    made = ScriptTransport(client, {"echo": ECHO, "fail": FAIL}, Policy(), durable_marker="")
    made.load()
    made.share_requests()
    return made


@pytest.fixture
def held(transport: ScriptTransport, monkeypatch: pytest.MonkeyPatch) -> Held:
    return Held(transport, monkeypatch)


def concurrently(transport: ScriptTransport, held: Held, calls: list[tuple[str, str]]) -> list[Any]:
    """Make `calls` ((script, value) each) from threads of their own behind a held first
    call; return each one's reply or the exception it raised, in order (the first's first)."""
    outcomes: list[Any] = [None] * len(calls)

    def run(i: int, name: str, value: str) -> None:
        try:
            outcomes[i] = transport.run(name, counter="n", value=value)
        except Exception as err:
            outcomes[i] = err

    threads = []
    for i, (name, value) in enumerate(calls):
        threads.append(threading.Thread(target=run, args=(i, name, value), daemon=True))
        threads[-1].start()
        if i == 0:
            until(lambda: held.group._in_flight)
        else:
            until(lambda i=i: len(held.group._queue) == i)
    held.release.set()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    return outcomes


def test_calls_behind_one_in_flight_share_one_request_each_with_its_own_reply(
    transport: ScriptTransport, held: Held, r: redis.Redis
) -> None:
    outcomes = concurrently(transport, held, [("echo", f"v{i}") for i in range(6)])
    assert [outcome[0] for outcome in outcomes] == [f"v{i}".encode() for i in range(6)]
    assert sorted(outcome[1] for outcome in outcomes) == list(range(1, 7))  # each ran once
    assert [len(batch) for batch in held.together] == [5]
    assert r.get("n") == b"6"


def test_a_script_error_reaches_its_call_alone_and_quotes_no_argument(
    transport: ScriptTransport, held: Held, r: redis.Redis
) -> None:
    secret = "payload-secret-4711"
    outcomes = concurrently(
        transport, held, [("echo", "a"), ("echo", "b"), ("fail", secret), ("echo", "d")]
    )
    assert [outcomes[i][0] for i in (0, 1, 3)] == [b"a", b"b", b"d"]
    error = outcomes[2]
    assert isinstance(error, redis.ResponseError)
    assert "boom" in str(error)
    assert secret not in str(error) and "EVALSHA" not in str(error)
    assert r.get("n") == b"3"
    assert transport.run("echo", counter="n", value="after")[0] == b"after"  # connection sound


def test_noscript_in_a_shared_request_loads_the_scripts_and_runs_each_call_once(
    transport: ScriptTransport, held: Held, r: redis.Redis
) -> None:
    # Redis loses its script cache (a restart, a failover) just before the shared request.
    held.before_together = r.script_flush
    outcomes = concurrently(transport, held, [("echo", f"v{i}") for i in range(4)])
    assert [outcome[0] for outcome in outcomes] == [b"v0", b"v1", b"v2", b"v3"]
    assert [len(batch) for batch in held.together] == [3]
    assert r.get("n") == b"4"  # four calls, each run once
    assert all(r.script_exists(*transport.shas.values()))


def fail_exchanges(
    transport: ScriptTransport, monkeypatch: pytest.MonkeyPatch, times: int, read_before: int
) -> None:
    """Make the next `times` shared requests lose their connection: after `read_before`
    replies, or (-1) as they are sent."""
    exchange = transport._exchange
    left = [times]

    def failing(conn: Any, calls: list[GroupedCall]) -> None:
        if left[0] == 0:
            return exchange(conn, calls)
        left[0] -= 1
        if read_before < 0:
            conn.send_packed_command = _refused
        else:
            read, count = conn.read_response, [0]

            def reading(*args: Any, **kwargs: Any) -> Any:
                if count[0] == read_before:
                    conn.disconnect()
                    raise redis.ConnectionError("Connection reset by peer")
                count[0] += 1
                return read(*args, **kwargs)

            conn.read_response = reading
        try:
            exchange(conn, calls)
        finally:  # the connection's own methods again (the instance's shadows removed)
            vars(conn).pop("send_packed_command", None)
            vars(conn).pop("read_response", None)

    monkeypatch.setattr(transport, "_exchange", failing)


def _refused(*_args: Any, **_kwargs: Any) -> None:
    raise redis.ConnectionError("Error 111 connecting: Connection refused")


def test_a_connection_lost_mid_request_sends_again_only_the_unanswered_calls(
    transport: ScriptTransport,
    held: Held,
    r: redis.Redis,
    client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a single call is: sent once more on a connection error (the client's retry). The
    calls whose reply was lost may have run: they run again, as a lone call's would (the
    scripts the gateway sends this way are repeat-safe); the one answered does not."""
    fail_exchanges(transport, monkeypatch, times=1, read_before=1)
    outcomes = concurrently(transport, held, [("echo", f"v{i}") for i in range(4)])
    assert [outcome[0] for outcome in outcomes] == [b"v0", b"v1", b"v2", b"v3"]
    # v1 answered before the loss, v2 and v3 were sent again: 4 calls, 2 run twice.
    assert r.get("n") == b"6"
    assert outcomes[1][1] == 2


def test_a_request_that_fails_as_a_whole_fails_each_call_and_the_next_goes_through(
    transport: ScriptTransport, held: Held, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_exchanges(transport, monkeypatch, times=2, read_before=-1)  # and its retry
    outcomes = concurrently(transport, held, [("echo", "a"), ("echo", "b"), ("echo", "c")])
    assert outcomes[0][0] == b"a"
    assert [type(outcome) for outcome in outcomes[1:]] == [redis.ConnectionError] * 2
    assert outcomes[1] is not outcomes[2]
    assert transport.run("echo", counter="n", value="next")[0] == b"next"
    assert held.group._in_flight == 0


def test_enqueues_from_many_threads_share_requests_and_each_gets_its_own_job(
    r: redis.Redis, client: redis.Redis
) -> None:
    scripts = Scripts(client, Keys(), Policy())
    scripts.load()
    scripts.transport.share_requests()
    group = scripts.transport._group
    assert group is not None
    shared = []
    together = group._together
    group._together = lambda calls: (shared.append(len(calls)), together(calls))[1]  # type: ignore[method-assign]
    request = validate_enqueue({"type": "send_email", "payload": {"to": "a@example.com"}})
    results: dict[str, Any] = {}

    def produce(n: int) -> None:
        for _ in range(n):
            job_id = new_job_id(request.queue)
            results[job_id] = scripts.enqueue(request, job_id)

    threads = [threading.Thread(target=produce, args=(200,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    assert not any(thread.is_alive() for thread in threads)
    assert len(results) == 1600
    assert all(result.job_id == job_id and result.created for job_id, result in results.items())
    assert r.zcard(Keys().for_queue(request.queue).pending) == 1600
    assert sum(shared) > 0, "no enqueue found another in flight: nothing was shared"


def test_scripts_that_cannot_be_reloaded_fail_the_unrun_calls_as_redis_unreachable(
    transport: ScriptTransport, held: Held, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOSCRIPT, then Redis gone before the reload: the calls that did not run raise the
    reload's ConnectionError (the gateway's 503), not the NOSCRIPT they were answered."""

    def gone() -> None:
        raise redis.ConnectionError("Error 111 connecting: Connection refused")

    def flush_then_lose_redis() -> None:
        r.script_flush()
        monkeypatch.setattr(transport, "load", gone)

    held.before_together = flush_then_lose_redis
    outcomes = concurrently(transport, held, [("echo", "a"), ("echo", "b"), ("echo", "c")])
    assert outcomes[0][0] == b"a"
    assert [type(outcome) for outcome in outcomes[1:]] == [redis.ConnectionError] * 2
    assert r.get("n") == b"1"


def test_a_call_whose_arguments_cannot_be_sent_fails_alone(
    transport: ScriptTransport, held: Held, r: redis.Redis
) -> None:
    outcomes = concurrently(
        transport, held, [("echo", "a"), ("echo", "b"), ("echo", True), ("echo", "d")]
    )
    assert [outcomes[i][0] for i in (0, 1, 3)] == [b"a", b"b", b"d"]
    assert isinstance(outcomes[2], redis.DataError)
    assert r.get("n") == b"3"


def test_a_call_abandoned_before_its_request_is_written_is_not_sent(
    transport: ScriptTransport, r: redis.Redis
) -> None:
    kept, abandoned = GroupedCall("echo", ["n"], ["kept"]), GroupedCall("echo", ["n"], ["gone"])
    abandoned.abandoned = True  # its caller gave up waiting (the wait limit) before this
    transport._call_together([kept, abandoned])
    assert kept.value == [b"kept", 1]
    assert isinstance(abandoned.error, redis.TimeoutError) and abandoned.replied
    assert r.get("n") == b"1"


def test_a_queued_call_waits_longer_than_two_requests_of_the_gateway_can_take(
    transport: ScriptTransport,
) -> None:
    """Its wait limit counts, per request, the pool's wait, a connect and a reply twice (the
    client's one retry) and a reload; for two requests: the one ahead and its own."""
    group = transport._group
    assert group is not None
    attempt = CONNECT_TIMEOUT + SOCKET_TIMEOUT
    assert group.wait_limit == pytest.approx(2 * (POOL_WAIT + 2 * attempt + RELOAD_MARGIN))


def test_the_gateways_transport_lets_two_calls_go_at_once_before_one_waits(
    transport: ScriptTransport,
) -> None:
    """Which calls go at once and which wait, with this limit: test_group_commit.py."""
    group = transport._group
    assert group is not None
    assert group.at_once == 2
