"""Validate a request body through its contract model; word a refusal as the field checks do.

The model decides: it is what ``GET /openapi.json`` states (gateway/contract), so the server
accepts what the document says and refuses what it refuses. The field checks only say what
is wrong, in the words clients already match on. Should they find nothing wrong in a body the
model refused, msgspec's own message is the answer: a body the document refuses is never let
through.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from gateway.http_errors import ApiError

Model = TypeVar("Model")


def prepare() -> None:
    """Have msgspec build the type information of every request model now, in one thread.

    msgspec builds a Struct's type information at its first conversion, and two threads doing
    that first conversion at once can crash the process: a gateway worker died of SIGSEGV in
    CI, faulthandler showing one thread in msgspec.convert and another in msgspec's
    get_class_annotations (msgspec 0.22; tests/gateway/test_model_prepare.py reproduces it in a
    fresh process). create_app calls this before the worker's threads serve anything.
    """
    from gateway.contract import requests
    from shared.model.jobs import EnqueueBody

    models = [EnqueueBody]
    models += [
        value
        for value in vars(requests).values()
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    ]
    for model in models:
        with contextlib.suppress(msgspec.ValidationError):
            msgspec.convert(None, model)  # builds the type information, then refuses None


def through(model: type[Model], body: Any, explain: Callable[[Any], object]) -> Model:
    """Return `body` converted through `model`; when it refuses, raise the 400 `explain` raises."""
    try:
        return msgspec.convert(body, model)
    except msgspec.ValidationError as exc:
        explain(body)  # raises the 400 naming the field, in its usual words
        raise ApiError(400, f"invalid body: {exc}") from None
