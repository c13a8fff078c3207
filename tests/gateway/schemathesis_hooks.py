"""Schemathesis hooks for tests/gateway/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

GET /jobs/<id>?wait= on a job that never finishes (the stateful phase follows POST /enqueue's
Location to jobs no worker runs) would hold each call for the whole wait, up to 60 s, past the
request timeout. A valid wait is therefore shortened to another valid one just before it is
sent: the document's rule is still checked both ways (values it forbids are sent unchanged),
only the time spent waiting shrinks. tests/gateway/test_wait.py tests the waiting itself.
"""

from __future__ import annotations

from typing import Any

import schemathesis

from gateway.waiting import parse_wait

SHORT_WAIT = "0.01"  # seconds, itself a valid wait (the fuzz run sends thousands of these)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Shorten a valid ``wait`` longer than SHORT_WAIT; leave anything else as generated."""
    query = case.query
    value = query.get("wait") if isinstance(query, dict) else None
    if isinstance(value, str):
        seconds = parse_wait(value)
        if seconds is not None and seconds > float(SHORT_WAIT):
            query["wait"] = SHORT_WAIT
