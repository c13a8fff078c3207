"""The body reader and the strict JSON parser, without HTTP."""

from __future__ import annotations

import io

import pytest

from gateway.body import MAX_BODY_BYTES, MAX_DEPTH, BodyError, parse_json, read_limited


class CountingStream(io.BytesIO):
    """A stream that remembers how many bytes were asked of it at most in one read."""

    largest_read = 0

    def read(self, size: int | None = -1) -> bytes:
        self.largest_read = max(self.largest_read, size if size and size > 0 else 1 << 62)
        return super().read(size)


def test_read_limited_returns_a_body_at_the_limit() -> None:
    body = b"x" * MAX_BODY_BYTES
    assert read_limited(io.BytesIO(body), None) == body


def test_read_limited_refuses_a_declared_length_over_the_limit_without_reading() -> None:
    stream = CountingStream(b"x" * 10)
    with pytest.raises(BodyError) as caught:
        read_limited(stream, MAX_BODY_BYTES + 1)
    assert caught.value.status == 413
    assert stream.tell() == 0


def test_read_limited_stops_one_byte_past_the_limit_of_an_unsized_stream() -> None:
    stream = CountingStream(b"x" * (10 * MAX_BODY_BYTES))
    with pytest.raises(BodyError) as caught:
        read_limited(stream, None)
    assert caught.value.status == 413
    assert stream.tell() == MAX_BODY_BYTES + 1
    assert stream.largest_read <= 64 * 1024


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b'{"type": "a",}', "not valid JSON"),
        (b'{"type": "\xff"}', "not valid UTF-8 (byte 10)"),
        (b'{"type": "\xed\xa0\x80"}', "not valid UTF-8"),  # an encoded surrogate
        (b'{"type": "\\ud800"}', "lone UTF-16 surrogate"),
        (b'{"\\udfff": 1}', "lone UTF-16 surrogate escape in a key"),
        (b'{"a": [["\\udc00"]]}', "lone UTF-16 surrogate"),
        (b'{"priority": NaN}', "NaN is not a JSON number"),
        (b'{"priority": Infinity}', "Infinity is not a JSON number"),
        (b'{"priority": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"type": "a", "type": "b"}', "key 'type' appears twice"),
        (b'{"p": {"k": 1, "k": 1}}', "key 'k' appears twice"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), f"deeper than {MAX_DEPTH}"),
        (b"[" * 100_000 + b"]" * 100_000, f"deeper than {MAX_DEPTH}"),
        (b'{"n": ' + b"9" * 5000 + b"}", "not usable JSON"),
        (b"\xef\xbb\xbf{}", "not valid JSON"),  # a byte-order mark
        (b'{"a": 1e400}', "number out of range: 1e400"),
    ],
)
def test_parse_json_refuses_with_a_message_that_says_what(raw: bytes, says: str) -> None:
    with pytest.raises(BodyError) as caught:
        parse_json(raw)
    assert caught.value.status == 400
    assert says in str(caught.value)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b'{"type": "\\ud83d\\ude00"}', {"type": "\U0001f600"}),  # a valid surrogate pair
        (b'{"a": "\\\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, not an escape
        ('{"type": "é"}'.encode(), {"type": "é"}),
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, [[]] if MAX_DEPTH == 2 else None),
        (b'{"a": 1.5e300, "b": -0.0}', {"a": 1.5e300, "b": -0.0}),
    ],
)
def test_parse_json_accepts_valid_documents(raw: bytes, value: object) -> None:
    doc = parse_json(raw)
    if value is not None:
        assert doc == value
