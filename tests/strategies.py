"""Hypothesis strategies from JSON Schema (the subset pydantic and ``engram.domain.wire.shapes`` emit).

``from_schema(schema)`` draws values that fit; ``from_schema(schema, hostile=True)`` also puts arbitrary
JSON (wrong types, lone surrogates, deep nesting, unknown keys) wherever a value goes, for fuzzing what
an entry point does with input a client made up. Sizes are kept small: the point is shapes, not volume.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

MAX_TEXT = 40
MAX_ITEMS = 4

tricky_text = st.text(max_size=12) | st.sampled_from(["", " ", "\ud800", "a\udfffb", "é" * 3, "记住", "\x00", "%s{}"])
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | tricky_text,
    lambda inner: st.lists(inner, max_size=MAX_ITEMS) | st.dictionaries(tricky_text, inner, max_size=MAX_ITEMS),
    max_leaves=12,
)


def from_schema(
    schema: Mapping[str, Any], *, hostile: bool = False, defs: Mapping[str, Any] | None = None
) -> st.SearchStrategy[Any]:
    defs = defs if defs is not None else schema.get("$defs", {})
    strategy = _valid(schema, hostile, defs)
    if schema.get("examples"):  # the values that steer code paths (a role, a block type) half the time
        strategy = st.sampled_from(schema["examples"]) | strategy
    return strategy | json_values if hostile else strategy


def _valid(schema: Mapping[str, Any], hostile: bool, defs: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], hostile=hostile, defs=defs))
    if "anyOf" in schema:
        return st.one_of([from_schema(s, hostile=hostile, defs=defs) for s in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kinds = schema.get("type")
    if kinds is None:
        return json_values
    if isinstance(kinds, list):
        return st.one_of([_valid({**schema, "type": k}, hostile, defs) for k in kinds])
    return _TYPED[kinds](schema, hostile, defs)


def _string(schema: Mapping[str, Any], hostile: bool, defs: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    if schema.get("format") == "date-time":
        return st.datetimes(min_value=datetime(2000, 1, 1), timezones=st.just(UTC)).map(datetime.isoformat)
    low = schema.get("minLength", 0)
    high = max(low, min(schema.get("maxLength", MAX_TEXT), MAX_TEXT))
    return st.text(min_size=low, max_size=high)


def _integer(schema: Mapping[str, Any], hostile: bool, defs: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    return st.integers(schema.get("minimum"), schema.get("maximum"))


def _number(schema: Mapping[str, Any], hostile: bool, defs: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False, allow_infinity=False)


def _array(schema: Mapping[str, Any], hostile: bool, defs: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    items = from_schema(schema.get("items", {}), hostile=hostile, defs=defs)
    low = schema.get("minItems", 0)
    return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", MAX_ITEMS), MAX_ITEMS)))


def _object(schema: Mapping[str, Any], hostile: bool, defs: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    props: Mapping[str, Any] = schema.get("properties", {})
    required = [k for k in schema.get("required", ()) if k in props]
    optional = {k: from_schema(v, hostile=hostile, defs=defs) for k, v in props.items() if k not in required}
    base = st.fixed_dictionaries(
        {k: from_schema(props[k], hostile=hostile, defs=defs) for k in required}, optional=optional
    )
    if not hostile:
        return base
    extra = st.dictionaries(tricky_text, json_values, max_size=2)
    return st.tuples(base, extra).map(lambda pair: {**pair[1], **pair[0]})


_TYPED = {
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": lambda s, h, d: st.booleans(),
    "null": lambda s, h, d: st.none(),
    "array": _array,
    "object": _object,
}
