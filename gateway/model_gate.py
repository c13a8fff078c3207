"""Validate a request body through its contract model; word a refusal as the field checks do.

The model decides: it is what ``GET /openapi.json`` states (gateway/contract), so the server
accepts what the document says and refuses what it refuses. The field checks only say what
is wrong, in the words clients already match on. Should they find nothing wrong in a body the
model refused, msgspec's own message is the answer: a body the document refuses is never let
through.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from gateway.http_errors import ApiError

Model = TypeVar("Model")


def through(model: type[Model], body: Any, explain: Callable[[Any], object]) -> Model:
    """Return `body` converted through `model`; when it refuses, raise the 400 `explain` raises."""
    try:
        return msgspec.convert(body, model)
    except msgspec.ValidationError as exc:
        explain(body)  # raises the 400 naming the field, in its usual words
        raise ApiError(400, f"invalid body: {exc}") from None
