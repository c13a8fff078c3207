"""The OpenAPI components generated from the contract's models (msgspec's JSON Schema)."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from gateway.contract import event_models as events
from gateway.contract import ops, requests, responses
from gateway.contract import queue_models as queues
from gateway.contract.error_models import Error

REF = "#/components/schemas/{name}"
MODELS: tuple[type[msgspec.Struct], ...] = (
    requests.EnqueueRequest,
    requests.BatchRequest,
    requests.CancelRequest,
    requests.BulkByIds,
    requests.BulkByFilter,
    requests.LimitsInput,
    requests.TypeLimitInput,
    responses.Job,
    responses.Jobs,
    responses.JobPage,
    responses.DeadPage,
    responses.History,
    responses.BulkResult,
    queues.Stats,
    queues.Throughput,
    queues.Limits,
    queues.LimitsList,
    queues.Queue,
    queues.Queues,
    ops.Host,
    ops.Hosts,
    ops.Probe,
    ops.Schedule,
    ops.Schedules,
    Error,
)
# Components no single model generates: a oneOf of two models (requests.BULK_REQUEST).
COMPOSED = {"BulkRequest": requests.BULK_REQUEST}


@cache
def schemas() -> dict[str, Any]:
    """Return the components/schemas of every model (and of the models they hold)."""
    _, components = msgspec.json.schema_components(MODELS, ref_template=REF)
    for model in MODELS:
        components[model.__name__] |= getattr(model, "json_schema_extra", {})
    return {name: tidy(schema) for name, schema in {**components, **COMPOSED}.items()}


@cache
def event_data() -> dict[str, Any]:
    """Return the schema of a GET /events message's data: an event or a gap, inline.

    Inline rather than as components: the stream's schema is read one message at a time, by
    tools that take the data's contentSchema on its own.
    """
    _, components = msgspec.json.schema_components((events.Event, events.Gap))
    return {"oneOf": [tidy(components[model.__name__]) for model in (events.Event, events.Gap)]}


def tidy(node: Any) -> Any:
    """Return `node` without msgspec's titles, with its whole numbers shown as integers."""
    if isinstance(node, list):
        return [tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    tidied = {key: tidy(value) for key, value in node.items() if key != "title"}
    # A float field that must be whole (so 8.0 is accepted, as JSON Schema's integer is):
    # "type": "integer" says the same to a reader and to a generator.
    if tidied.get("type") == "number" and tidied.get("multipleOf") == 1:
        del tidied["multipleOf"]
        tidied["type"] = "integer"
    return tidied
