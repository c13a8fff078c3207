"""bench.guessing on a short run against real gunicorn: nine 401s, then only 429s, and the
right token refused while the address is locked out."""

from __future__ import annotations

from typing import Any

from bench.guessing import TOKEN, guess
from gateway.lockout import MAX_FAILURES


def test_a_guesser_gets_its_failures_compared_then_only_429(start_gateway: Any, r: Any) -> None:
    with start_gateway(TASKFORGE_API_TOKEN=TOKEN) as gateway:
        found = guess(gateway.port, 0.5)
    assert found["answered_401"] == MAX_FAILURES - 1
    statuses = found["statuses"]
    assert isinstance(statuses, dict) and set(statuses) == {401, 429}
    assert found["right_token_while_locked"] == 429
