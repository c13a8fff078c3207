"""Schemathesis hooks for tests/gateway/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

GET /jobs/<id>?wait= on a job that never finishes (the stateful phase follows POST /enqueue's
Location to jobs no worker runs) would hold each call for the whole wait, up to 60 s, past the
request timeout. A valid wait is therefore shortened to another valid one just before it is
sent: the document's rule is still checked both ways (values it forbids are sent unchanged),
only the time spent waiting shrinks. tests/gateway/test_wait.py tests the waiting itself.

A duration text (an enqueue's delay or timeout) is documented by its shape and its bound in
x-maximum-seconds, an extension keyword no generator reads: a text of the right shape beyond
its bound is replaced by a valid one before it is sent. Texts of any other shape, and numbers
(bounded by minimum and maximum), are sent as generated, so both ways are still checked.
tests/test_jobs.py and tests/gateway/test_api.py check the bounds themselves.
"""

from __future__ import annotations

import re
from typing import Any

import schemathesis

from gateway.waiting import parse_wait
from shared.model.jobs import DURATION_PATTERN, parse_delay, parse_timeout

DURATION_PARSERS = {"delay": parse_delay, "timeout": parse_timeout}
VALID_DURATION = "5m"  # within both bounds
SHORT_WAIT = "0.01"  # seconds, itself a valid wait (the fuzz run sends thousands of these)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Shorten a valid ``wait`` longer than SHORT_WAIT, bring a duration text of the right
    shape within its bound; leave anything else as generated."""
    _bound_durations(case.body)
    query = case.query
    value = query.get("wait") if isinstance(query, dict) else None
    if isinstance(value, str):
        seconds = parse_wait(value)
        if seconds is not None and seconds > float(SHORT_WAIT):
            query["wait"] = SHORT_WAIT


def _bound_durations(body: Any) -> None:
    """Replace, in an enqueue or batch body, a well-shaped duration text beyond its bound."""
    jobs = body.get("jobs") if isinstance(body, dict) else None
    for job in jobs if isinstance(jobs, list) else [body]:
        if not isinstance(job, dict):
            continue
        for name, parse in DURATION_PARSERS.items():
            text = job.get(name)
            if isinstance(text, str) and re.fullmatch(DURATION_PATTERN, text):
                try:
                    parse(text)
                except ValueError:
                    job[name] = VALID_DURATION
