"""The client's typed answers (taskforge/models.py) against the gateway's generated document.

The client depends only on urllib3 and click, so it cannot import the server's models; this
test holds each of its dataclasses to the component the gateway's /openapi.json generates:
every field names a property the server sends, and its type can hold every value the schema
allows (null included, and absence: an optional property the client reads with a default).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from datetime import datetime
from typing import Any

import pytest

from gateway.openapi import document
from taskforge import models

Schema = dict[str, Any]


def components() -> dict[str, Schema]:
    return document(auth=False)["components"]["schemas"]


def resolve(schema: Schema) -> Schema:
    """Return the schema a local $ref names (or the schema itself)."""
    while "$ref" in schema:
        schema = components()[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def at(name: str, *path: str) -> Schema:
    """Return the component `name`, or the schema reached from it through `path`."""
    schema = resolve(components()[name])
    for step in path:
        schema = resolve(schema[step])
    return schema


# Each client dataclass and the schema of the JSON object it is built from.
MODELS: dict[type, typing.Callable[[], Schema]] = {
    models.Job: lambda: at("Job"),
    models.JobPage: lambda: at("JobPage"),
    models.History: lambda: at("History"),
    models.HistoryEntry: lambda: at("History", "properties", "history", "items"),
    models.BulkResult: lambda: at("BulkResult"),
    models.Limits: lambda: at("Limits"),
    models.ScopeLimit: lambda: at("Limits", "properties", "types", "additionalProperties"),
    models.Queue: lambda: at("Queue"),
    models.Host: lambda: at("Host"),
    models.Stats: lambda: at("Stats"),
    models.Schedule: lambda: at("Schedule"),
}
# Client fields named apart from the JSON (History.entries is the answer's "history"), or not
# read from one property (Limits.own: the queue's own limits, the object's top-level fields).
RENAMED = {(models.History, "entries"): "history"}
COMPOSED = {(models.Limits, "own")}
# Fields whose from_json turns a null or absent value into the type's empty value (a count
# of 0, no jobs), so the annotation need not admit None.
DEFAULTED = {
    (models.Stats, "jobs"),
    (models.Stats, "total"),
    (models.Stats, "workers"),
    (models.Stats, "queues"),
    (models.Queue, "paused"),
    (models.Host, "quiet"),
    (models.Host, "quiet_requested"),
    (models.Job, "warnings"),
}
JSON_TYPES = {
    str: {"string"},
    int: {"integer"},
    float: {"number", "integer"},
    bool: {"boolean"},
    datetime: {"string"},
    list: {"array"},
    tuple: {"array"},
    dict: {"object"},
    type(None): {"null"},
}


def schema_types(schema: Schema) -> set[str]:
    """Return the JSON types a schema allows ("any" when it does not say)."""
    schema = resolve(schema)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        return set().union(*(schema_types(branch) for branch in branches))
    if "enum" in schema:
        return {"null" if v is None else "string" for v in schema["enum"]}
    kind = schema.get("type")
    if kind is None:
        return {"any"}
    return set(kind) if isinstance(kind, list) else {kind}


def held_types(annotation: Any) -> set[str]:
    """Return the JSON types a client annotation can hold."""
    if annotation is Any:
        return {"any"}
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return set().union(*(held_types(a) for a in typing.get_args(annotation)))
    origin = typing.get_origin(annotation) or annotation
    if dataclasses.is_dataclass(origin):
        return {"object"}
    return JSON_TYPES[origin]


def fields_of(model: type) -> list[tuple[str, Any]]:
    hints = typing.get_type_hints(model, vars(models))
    return [(f.name, hints[f.name]) for f in dataclasses.fields(model) if f.name != "raw"]


CASES = [(model, name, hint) for model in MODELS for name, hint in fields_of(model)]


@pytest.mark.parametrize(
    ("model", "name", "hint"), CASES, ids=[f"{m.__name__}.{n}" for m, n, _ in CASES]
)
def test_every_client_field_holds_what_the_document_says_the_server_sends(
    model: type, name: str, hint: Any
) -> None:
    if (model, name) in COMPOSED:
        return
    schema = MODELS[model]()
    prop = RENAMED.get((model, name), name)
    assert prop in schema["properties"], f"{model.__name__}.{name}: not in the document"
    sent = schema_types(schema["properties"][prop])
    if prop not in schema.get("required", []):
        sent.add("null")  # absent: from_json reads it with .get()
    held = held_types(hint)
    if (model, name) in DEFAULTED:
        sent.discard("null")
    if "any" in held:
        return
    # float holds an integer: Python's float() of a JSON integer is what json.loads gives.
    assert "any" not in sent and sent <= held, (
        f"{model.__name__}.{name}: the server may send {sorted(sent)}, the client holds "
        f"{sorted(held)}"
    )


def test_every_model_in_the_client_is_checked() -> None:
    answers = {
        obj
        for obj in vars(models).values()
        if isinstance(obj, type)
        and dataclasses.is_dataclass(obj)
        and obj.__module__ == models.__name__
    }
    assert answers == set(MODELS)
