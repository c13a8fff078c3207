"""Unsigned 64-bit decimals, as Redis stream ids and SCAN cursors hold them: a regex for the
OpenAPI document and a check for the server, so both draw the same line."""

from __future__ import annotations

LIMIT = 2**64  # the first value past what Redis holds


def _any(count: int) -> str:
    return {0: "", 1: "[0-9]"}.get(count, f"[0-9]{{{count}}}")


def _decimal_at_most(limit: int) -> str:
    """Return a regex of the ASCII decimals of up to len(str(limit)) digits (leading zeros
    included) whose value is at most `limit`: each alternative keeps a prefix of the limit's
    digits, then one lower digit, then any digits."""
    digits = str(limit)
    shorter = f"[0-9]{{1,{len(digits) - 1}}}"
    lower = [
        digits[:i] + ("0" if digit == "1" else f"[0-{int(digit) - 1}]") + _any(len(digits) - i - 1)
        for i, digit in enumerate(digits)
        if digit != "0"
    ]
    return "|".join([shorter, *lower, digits])


# 1 to 20 ASCII digits, at most 2^64 - 1 (JSON Schema's patterns have no numeric bound).
U64_PATTERN = f"(?:{_decimal_at_most(LIMIT - 1)})"


def is_u64(text: str) -> bool:
    """Tell whether `text` is 1 to 20 ASCII digits whose value is below 2^64."""
    return 1 <= len(text) <= 20 and text.isascii() and text.isdigit() and int(text) < LIMIT
