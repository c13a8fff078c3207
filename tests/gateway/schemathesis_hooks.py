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

A job's own id is documented by its shape (a UUIDv8); its first 8 hex digits must also be its
queue's tag, a hash no schema can state, and the id excludes an Idempotency-Key header, which
a schema of the body cannot state either: a well-shaped id is given its queue's tag (a fresh
one when the batch already holds it) and the request loses its key. Ids of any other shape are
sent as generated. tests/gateway/test_client_ids.py checks those rules themselves.
"""

from __future__ import annotations

import re
from typing import Any

import schemathesis

from gateway.waiting import parse_wait
from shared.model.job_ids import CLIENT_ID_PATTERN, new_client_id, queue_tag
from shared.model.jobs import DURATION_PATTERN, parse_delay, parse_timeout
from shared.model.queues import DEFAULT_QUEUE, is_queue_name

DURATION_PARSERS = {"delay": parse_delay, "timeout": parse_timeout}
VALID_DURATION = "5m"  # within both bounds
SHORT_WAIT = "0.01"  # seconds, itself a valid wait (the fuzz run sends thousands of these)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """Shorten a valid ``wait`` longer than SHORT_WAIT, bring a duration text of the right
    shape within its bound; leave anything else as generated."""
    _bound_durations(case.body)
    if _tag_client_ids(case.body):
        # The case's headers and those about to be sent (built from them already).
        for headers in (case.headers, kwargs.get("headers")):
            for name in [n for n in headers or () if n.lower() == "idempotency-key"]:
                del headers[name]
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


def _tag_client_ids(body: Any) -> bool:
    """Give each well-shaped client id of an enqueue or batch body its queue's tag, once per
    body; return whether the body holds one."""
    jobs = body.get("jobs") if isinstance(body, dict) else None
    seen: set[str] = set()
    for job in jobs if isinstance(jobs, list) else [body]:
        given = job.get("id") if isinstance(job, dict) else None
        queue = job.get("queue", DEFAULT_QUEUE) if isinstance(job, dict) else None
        if not (isinstance(given, str) and CLIENT_ID_PATTERN.fullmatch(given.lower())):
            continue
        if is_queue_name(queue):
            tagged = queue_tag(queue) + given.lower()[8:]
            job["id"] = tagged if tagged not in seen else new_client_id(queue)
        seen.add(job["id"])
    return bool(seen)
