"""Read the gateway's own OpenAPI document: Hypothesis strategies for its inputs, and a
validator for its responses (the JSON Schema subset the document uses)."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from hypothesis import strategies as st

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
ANY_JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


class Document:
    """An OpenAPI document with its $refs resolved on demand."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        """Return the node a $ref points to (or the node itself)."""
        while "$ref" in node:
            target: Any = self.doc
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        return node

    def operations(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Return (path, method, operation) for every operation, in a stable order."""
        return [
            (path, method, op)
            for path, item in sorted(self.doc["paths"].items())
            for method, op in sorted(item.items())
        ]

    # --- strategies ---------------------------------------------------------------------

    def strategy(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        """Return a strategy of values valid for `schema`."""
        schema = self.resolve(schema)
        kinds = schema.get("type")
        if kinds is None:
            return ANY_JSON
        if isinstance(kinds, list):
            return st.one_of([self.strategy({**schema, "type": k}) for k in kinds])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        return getattr(self, f"_strategy_{kinds}")(schema)

    def _strategy_object(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {k: self.strategy(v) for k, v in props.items() if k in required},
            optional={k: self.strategy(v) for k, v in props.items() if k not in required},
        )

    def _strategy_array(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        items = self.strategy(schema.get("items", {}))
        low = schema.get("minItems", 0)
        return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", 5), 5)))

    def _strategy_string(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        if schema.get("format") == "date-time":
            return st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat())
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.text(max_size=40)

    def _strategy_integer(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        return st.integers(schema.get("minimum"), schema.get("maximum"))

    def _strategy_number(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        low = schema.get("exclusiveMinimum", schema.get("minimum"))
        return st.floats(
            low, schema.get("maximum"), exclude_min="exclusiveMinimum" in schema, allow_nan=False
        )

    def _strategy_boolean(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        return st.booleans()

    def _strategy_null(self, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
        return st.none()

    # --- validation ---------------------------------------------------------------------

    def errors(self, schema: dict[str, Any], value: Any, where: str = "$") -> list[str]:
        """Return what is wrong with `value` under `schema` (empty when it conforms)."""
        schema = self.resolve(schema)
        kinds = schema.get("type")
        if kinds is not None:
            kinds = kinds if isinstance(kinds, list) else [kinds]
            if not any(_is(kind, value) for kind in kinds):
                return [f"{where}: {value!r:.60} is not {kinds}"]
        found = []
        if "enum" in schema and value not in schema["enum"]:
            found.append(f"{where}: {value!r} not in enum")
        if isinstance(value, str):
            found += _string_errors(schema, value, where)
        if _is("number", value):
            found += _number_errors(schema, value, where)
        if isinstance(value, list):
            if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", math.inf):
                found.append(f"{where}: {len(value)} items")
            for i, item in enumerate(value):
                found += self.errors(schema.get("items", {}), item, f"{where}[{i}]")
        if isinstance(value, dict):
            found += self._object_errors(schema, value, where)
        return found

    def _object_errors(
        self, schema: dict[str, Any], value: dict[str, Any], where: str
    ) -> list[str]:
        found = [f"{where}: missing {k}" for k in schema.get("required", []) if k not in value]
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            found += [f"{where}: unexpected {k}" for k in value if k not in props]
        for key, sub in props.items():
            if key in value:
                found += self.errors(sub, value[key], f"{where}.{key}")
        return found


def _is(kind: str, value: Any) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, TYPES[kind])


def _string_errors(schema: dict[str, Any], value: str, where: str) -> list[str]:
    found = []
    if "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{where}: {value!r:.60} does not match {schema['pattern']}")
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            found.append(f"{where}: {value!r} is not a date-time")
    return found


def _number_errors(schema: dict[str, Any], value: float, where: str) -> list[str]:
    if "minimum" in schema and value < schema["minimum"]:
        return [f"{where}: {value} < minimum"]
    if "maximum" in schema and value > schema["maximum"]:
        return [f"{where}: {value} > maximum"]
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        return [f"{where}: {value} <= exclusiveMinimum"]
    return []
