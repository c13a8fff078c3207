"""Read a request body within a size limit and parse it as strict JSON."""

from __future__ import annotations

import json
import math
import re
from typing import IO, Any

# 1 MiB: ample for a job's arguments (pass big data by reference), and a bound on what one
# request can make a gunicorn thread read and hold; a larger body is refused with 413.
MAX_BODY_BYTES = 1024 * 1024
READ_CHUNK = 64 * 1024
MAX_DEPTH = 64
# A "\udXXX" escape in the text is the only way a lone surrogate gets into a decoded string
# (raw surrogates are not valid UTF-8), so only bodies with one pay for the deep check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_CONTAINERS = (dict, list)


class BodyError(ValueError):
    """The body cannot be used; ``status`` is 400 (malformed) or 413 (too large)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# What to do about a body over the limit, by route: only a batch can be split.
_TOO_LARGE_HINTS = {
    "/enqueue": "a job's payload must fit in it: pass large data by reference (a URL or a key)",
    "/enqueue/batch": "split the batch into smaller requests",
}


def too_large(path: str = "") -> BodyError:
    """Return the error for a body over the limit sent to `path` (its hint depends on it)."""
    hint = _TOO_LARGE_HINTS.get(path)
    return BodyError(
        f"request body is larger than {MAX_BODY_BYTES} bytes (1 MiB)"
        + (f"; {hint}" if hint else ""),
        413,
    )


def read_limited(stream: IO[bytes], content_length: int | None, path: str = "") -> bytes:
    """Return the whole body, reading bounded chunks; raise 413 as soon as it passes the limit."""
    if content_length is not None and content_length > MAX_BODY_BYTES:
        raise too_large(path)  # refused from the header alone: not one byte of it is read
    chunks: list[bytes] = []
    total = 0
    while True:
        # Ask for at most one byte past the limit, so a chunked or lying body is cut short.
        chunk = stream.read(min(READ_CHUNK, MAX_BODY_BYTES + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise too_large(path)
        chunks.append(chunk)


def _refuse_constant(name: str) -> Any:
    raise BodyError(f"request body is not valid JSON: {name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise BodyError(f"request body has a number out of range: {text[:40]}")
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BodyError(f"request body is not valid JSON: key {key!r} appears twice")
            seen.add(key)
    return result


# What json.loads(text, object_pairs_hook=..., ...) builds per call, made once (like the
# stdlib's own decoder for json.loads without options, it is shared by every thread).
_DECODER = json.JSONDecoder(
    object_pairs_hook=_object, parse_constant=_refuse_constant, parse_float=_float
)
_BOM = "\ufeff"


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_depth(doc: Any) -> None:
    """Raise BodyError when `doc` nests deeper than MAX_DEPTH (one level at a time)."""
    level, depth = [doc], 1
    while level:
        if depth > MAX_DEPTH:
            raise BodyError(f"request body nests deeper than {MAX_DEPTH} levels")
        deeper: list[Any] = []
        for node in level:
            values = node.values() if type(node) is dict else node
            deeper.extend(v for v in values if type(v) in _CONTAINERS)
        level, depth = deeper, depth + 1


def _check_strings(doc: Any) -> None:
    """Raise BodyError when a key or string of `doc` holds a lone surrogate."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if not all(_is_unicode(k) for k in value):
                raise BodyError("request body has a lone UTF-16 surrogate escape in a key")
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and not _is_unicode(value):
            raise BodyError("request body has a lone UTF-16 surrogate escape in a string")


def parse_json(raw: bytes) -> Any:
    """Return the JSON document in `raw`; raise BodyError saying what is wrong with it."""
    if not raw.strip():
        raise BodyError("request body is empty: expected a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyError(f"request body is not valid UTF-8 (byte {exc.start})") from None
    try:
        if text.startswith(_BOM):  # what json.loads refuses before decoding, in its words
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        doc = _DECODER.decode(text)
    except BodyError:
        raise
    except json.JSONDecodeError as exc:
        raise BodyError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BodyError(f"request body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise BodyError(f"request body is not usable JSON: {exc}") from None
    # Fewer brackets than the limit cannot nest past it: most bodies skip the walk.
    if type(doc) in _CONTAINERS and raw.count(b"{") + raw.count(b"[") > MAX_DEPTH:
        _check_depth(doc)
    if _SURROGATE_ESCAPE.search(raw):
        _check_strings(doc)
    return doc
