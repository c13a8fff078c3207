"""The OpenAPI components generated from the contract's models (msgspec's JSON Schema)."""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec

from gateway.contract.errors import Error
from gateway.contract.requests import BatchRequest, CancelRequest, EnqueueRequest
from gateway.contract.responses import DeadPage, Job, JobPage, Jobs

REF = "#/components/schemas/{name}"
MODELS: tuple[type[msgspec.Struct], ...] = (
    EnqueueRequest,
    BatchRequest,
    CancelRequest,
    Job,
    Jobs,
    JobPage,
    DeadPage,
    Error,
)


@cache
def schemas() -> dict[str, Any]:
    """Return the components/schemas of every model (and of the models they hold)."""
    _, components = msgspec.json.schema_components(MODELS, ref_template=REF)
    for model in MODELS:
        components[model.__name__] |= getattr(model, "json_schema_extra", {})
    return {name: _tidy(schema) for name, schema in components.items()}


def _tidy(node: Any) -> Any:
    """Return `node` without msgspec's titles, with its whole numbers shown as integers."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    tidy = {key: _tidy(value) for key, value in node.items() if key != "title"}
    # A float field that must be whole (so 8.0 is accepted, as JSON Schema's integer is):
    # "type": "integer" says the same to a reader and to a generator.
    if tidy.get("type") == "number" and tidy.get("multipleOf") == 1:
        del tidy["multipleOf"]
        tidy["type"] = "integer"
    return tidy
