"""The command packer every connection uses: the bytes redis-py's own packer sends, less its
per-argument Python pass; what hiredis refuses goes to redis-py's packer, errors and all."""

from __future__ import annotations

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.connection import Connection

from shared.connect.command_packer import CommandPacker
from shared.connect.redis_conn import PACKER, connect, like
from shared.settings.config import Settings

REDIS_PY = Connection()  # redis-py's packer, as a connection given no packer builds it
ARGUMENT = st.one_of(
    st.text(),  # surrogates included: both packers refuse them alike
    st.binary(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)


def redis_py(*args: object) -> object:
    """Return the bytes redis-py's packer sends, or the type of its refusal."""
    try:
        return b"".join(REDIS_PY.pack_command(*args))
    except Exception as exc:  # the same refusal is the expected answer
        return type(exc)


def ours(*args: object) -> object:
    try:
        return b"".join(CommandPacker().pack(*args))
    except Exception as exc:
        return type(exc)


@given(st.lists(ARGUMENT, max_size=40))
def test_it_packs_every_command_as_redis_py_does(arguments: list[object]) -> None:
    for name in ("EVALSHA", b"HSET"):
        assert ours(name, *arguments) == redis_py(name, *arguments)


@pytest.mark.parametrize(
    "args",
    [
        ("SCRIPT LOAD", "return 1"),  # a name of two words: redis-py splits it
        (b"CLIENT SETNAME", "x"),
        ("SET", "k", memoryview(b"value")),
        ("SET", "k", bytearray(b"value")),
        ("SET", "k", True),  # redis-py refuses a bool with DataError; so do we
        ("SET", "k", None),
    ],
)
def test_what_hiredis_refuses_goes_to_redis_py(args: tuple[object, ...]) -> None:
    assert ours(*args) == redis_py(*args)


def test_every_connection_of_a_client_and_its_likes_uses_it(settings: Settings) -> None:
    client = connect(settings, role="test")
    other = like(client, max_connections=2)
    try:
        for each in (client, other):
            conn = each.connection_pool.get_connection()
            try:
                assert conn._command_packer is PACKER
            finally:
                each.connection_pool.release(conn)
            each.set("k", "é")
            assert each.eval("return redis.call('GET', KEYS[1])", 1, "k") == "é".encode()
            with pytest.raises(redis.DataError):
                each.set("k", True)  # type: ignore[arg-type]
    finally:
        other.close()
        client.close()
