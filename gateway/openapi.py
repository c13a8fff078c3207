"""The OpenAPI 3.1 document of the gateway, generated: nothing in it is written by hand here.

Its schemas come from the contract's models (gateway/contract/schema.py), its paths from the
route table (gateway/contract/route_table.py). The document states what the server enforces,
no more and no less: tests/gateway/test_schemathesis.py fuzzes real gunicorn from it and fails
on any disagreement either way.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import msgspec

from gateway.contract.route_params import PARAMETERS, SHARED, Answer, Operation, Param
from gateway.contract.route_table import OPERATIONS
from gateway.contract.schema import schemas, tidy

INFO = {
    "title": "TaskForge gateway",
    "version": "1",
    "description": (
        "Enqueue background jobs and follow them. Errors are JSON "
        '{"error": "..."}; unsupported methods get 405 with Allow; HEAD works '
        "wherever GET does; OPTIONS is not supported. A query parameter an operation "
        "does not list is refused with 400."
    ),
}
HEADER_TYPES = {int: {"type": "integer"}, str: {"type": "string"}}


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _schema_of(model: type | str) -> dict[str, Any]:
    return _ref("schemas", model if isinstance(model, str) else model.__name__)


def _parameter(param: Param) -> dict[str, Any]:
    schema = tidy(msgspec.json.schema(param.kind))
    if param.default is not None:
        schema["default"] = param.default
    doc: dict[str, Any] = {"name": param.name, "in": param.where}
    if param.where == "path":
        doc["required"] = True
    if param.description is not None:
        doc["description"] = param.description
    doc["schema"] = schema
    if param.example is not None:
        doc["example"] = param.example
    return doc


def _answer(answer: Answer) -> dict[str, Any]:
    doc: dict[str, Any] = {"description": answer.description}
    if answer.headers:
        doc["headers"] = {
            name: {"schema": HEADER_TYPES[kind]} for name, kind in answer.headers.items()
        }
    if answer.schema is not None:
        doc["content"] = {answer.media: {"schema": answer.schema}}
    elif answer.model is not None:
        doc["content"] = {answer.media: {"schema": _schema_of(answer.model)}}
    return doc


def _operation(op: Operation) -> dict[str, Any]:
    doc: dict[str, Any] = {"operationId": op.op_id, "summary": op.summary}
    if op.params:
        doc["parameters"] = [
            _ref("parameters", p) if isinstance(p, str) else _parameter(p) for p in op.params
        ]
    if op.body is not None:
        # Any Content-Type is read as JSON; application/json is what clients should send.
        doc["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": _schema_of(op.body)}},
        }
    if op.public:
        doc["security"] = []
    doc["responses"] = {
        status: _ref("responses", answer) if isinstance(answer, str) else _answer(answer)
        for status, answer in op.answers.items()
    }
    return doc


def _paths() -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        item = paths.setdefault(op.path, {})
        if op.method in item:
            raise ValueError(f"{op.method.upper()} {op.path} is declared twice")
        item[op.method] = _operation(op)
    return paths


def _without_auth(doc: dict[str, Any]) -> dict[str, Any]:
    """Return `doc` for a gateway without a token: no security requirement, no 401 or 429."""
    doc = copy.deepcopy(doc)
    del doc["security"], doc["components"]["securitySchemes"]
    del doc["components"]["responses"]["Unauthorized"]
    del doc["components"]["responses"]["TooManyFailures"]
    for item in doc["paths"].values():
        for operation in item.values():
            operation.pop("security", None)
            operation["responses"].pop("401", None)
            operation["responses"].pop("429", None)
    return doc


def _with_lockout(doc: dict[str, Any]) -> dict[str, Any]:
    """Give every operation that may answer 401 its 429: a lockout replaces the 401."""
    for item in doc["paths"].values():
        for operation in item.values():
            if "401" in operation["responses"]:
                operation["responses"]["429"] = _ref("responses", "TooManyFailures")
    return doc


@cache
def document(auth: bool) -> dict[str, Any]:
    """Return the OpenAPI document of a gateway with or without a token (built once each).

    An open gateway's document names no security scheme: a client, or a fuzzer, told to send
    a token the server never checks would be told something untrue.
    """
    doc = _with_lockout(_document())
    return doc if auth else _without_auth(doc)


def _document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": INFO,
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "schemas": schemas(),
            "parameters": {name: _parameter(param) for name, param in PARAMETERS.items()},
            "responses": {name: _answer(shared.answer) for name, shared in SHARED.items()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
