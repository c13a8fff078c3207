"""Handlers for tests/workerd/test_job_record.py: a failure three calls deep, bad results."""

from __future__ import annotations

from typing import Any

from workerd import JobContext, handler


@handler("record.deep")
def deep(payload: dict[str, Any], job: JobContext) -> None:
    """Fail three calls below the handler, with payload["message"] as the message."""
    validate_order(payload)


def validate_order(payload: dict[str, Any]) -> None:
    charge_card(payload)


def charge_card(payload: dict[str, Any]) -> None:
    call_gateway(payload)


def call_gateway(payload: dict[str, Any]) -> None:
    raise ValueError(payload.get("message", "declined"))


@handler("record.unserialisable")
def unserialisable(payload: dict[str, Any], job: JobContext) -> set[int]:
    """Return a value JSON cannot hold."""
    return {1, 2}


@handler("record.big")
def big(payload: dict[str, Any], job: JobContext) -> str:
    """Return payload["size"] characters."""
    return "x" * int(payload["size"])
