"""Request bodies go through their contract models (gateway/model_gate.py, gateway/contract).

The model decides what is accepted; the field checks only word a refusal. These check the
gate itself, and that every body operation of the route table names a model the document
holds, so a body the document describes is the one the gateway converts.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.contract.route_table import OPERATIONS
from gateway.http_errors import ApiError
from gateway.model_gate import through
from gateway.openapi import document


class Pair(msgspec.Struct, forbid_unknown_fields=True):
    left: int
    right: int = 0


def explain_nothing(body: Any) -> None:
    """Field checks that see nothing wrong: the model's refusal must stand all the same."""


def explain_left(body: Any) -> None:
    if not isinstance(body.get("left"), int):
        raise ApiError(400, "left must be an integer")


def test_an_accepted_body_comes_back_as_the_model() -> None:
    assert through(Pair, {"left": 1}, explain_nothing) == Pair(1, 0)


def test_the_field_checks_word_a_refusal() -> None:
    with pytest.raises(ApiError, match=r"^left must be an integer$") as refused:
        through(Pair, {"left": "1"}, explain_left)
    assert refused.value.http_status == 400


def test_a_refusal_the_checks_miss_still_refuses_with_the_models_words() -> None:
    with pytest.raises(ApiError, match="invalid body: Object contains unknown field `up`"):
        through(Pair, {"left": 1, "up": 2}, explain_nothing)


def test_every_body_of_the_route_table_is_a_component_of_the_document() -> None:
    schemas = document(True)["components"]["schemas"]
    bodies = {
        op.body if isinstance(op.body, str) else op.body.__name__ for op in OPERATIONS if op.body
    }
    assert bodies == {
        "EnqueueRequest",
        "BatchRequest",
        "CancelRequest",
        "BulkRequest",
        "LimitsInput",
        "TypeLimitInput",
    }
    assert bodies <= set(schemas)
