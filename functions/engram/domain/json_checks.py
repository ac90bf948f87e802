"""Structural checks of decoded JSON from outside (client bodies, upstream answers) — pure.

``check_shape`` validates a value against a small subset of JSON Schema (``type`` as a name or a list,
``properties``, ``required``, ``items``): enough to guarantee that code reading a body with ``.get``
never meets a string where it expects an object. Unknown fields are allowed (wires grow), and
``properties`` / ``items`` apply only when the value has that type, as in JSON Schema. The same schema
dicts document the chat doors in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Schema = Mapping[str, Any]

_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
_NAMES = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


class ShapeError(ValueError):
    """``where`` (a path like ``messages[0].content``) does not have the shape the schema asks for."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where or 'the body'}: {problem}")
        self.where = where
        self.problem = problem


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _PYTHON_TYPES[name])


def check_shape(value: Any, schema: Schema, where: str = "") -> None:
    """Raise ``ShapeError`` at the first place ``value`` does not match ``schema``."""
    stack: list[tuple[Any, Schema, str]] = [(value, schema, where)]
    while stack:
        item, sch, path = stack.pop()
        kinds = sch.get("type")
        if kinds is not None:
            names = (kinds,) if isinstance(kinds, str) else tuple(kinds)
            if not any(_is(item, n) for n in names):
                raise ShapeError(path, "must be " + " or ".join(_NAMES[n] for n in names))
        if isinstance(item, dict):
            for key in sch.get("required", ()):
                if key not in item:
                    raise ShapeError(f"{path}.{key}" if path else key, "is required")
            props: Mapping[str, Schema] = sch.get("properties", {})
            # Reversed so the first field is checked first (the stack pops from the end).
            for key in reversed(list(props)):
                if key in item:
                    stack.append((item[key], props[key], f"{path}.{key}" if path else key))
        elif isinstance(item, list) and "items" in sch:
            stack.extend((item[i], sch["items"], f"{path}[{i}]") for i in reversed(range(len(item))))


def shape_checker(schema: Schema) -> Callable[[Any], None]:
    """``check_shape`` against ``schema``, compiled once: a well-formed value is checked by nested
    closures built from the schema (no paths built, no stack), and only a value that fails is checked
    again by ``check_shape`` for its error, so the error is the same. Every chat request and upstream
    stream event is checked (bench/gateway.py)."""
    valid = _compile(schema)

    def check(value: Any) -> None:
        if not valid(value):
            check_shape(value, schema)

    return check


def _compile(schema: Schema) -> Callable[[Any], bool]:
    """Whether a value matches ``schema`` (the rules of ``check_shape``; recursion only as deep as the
    schema)."""
    kinds = schema.get("type")
    names: tuple[str, ...] = () if kinds is None else (kinds,) if isinstance(kinds, str) else tuple(kinds)
    types = tuple(t for n in names for t in _PYTHON_TYPES[n])
    # ``True`` is an int to Python, not an integer or a number to JSON Schema (``_is``).
    no_bool = "boolean" not in names and ("integer" in names or "number" in names)
    required = tuple(schema.get("required", ()))
    props = tuple((key, _compile(sub)) for key, sub in schema.get("properties", {}).items())
    items = _compile(schema["items"]) if "items" in schema else None

    def valid(value: Any) -> bool:
        if names and (not isinstance(value, types) or (no_bool and isinstance(value, bool))):
            return False
        if isinstance(value, dict):
            for key in required:
                if key not in value:
                    return False
            for key, sub in props:
                if key in value and not sub(value[key]):
                    return False
        elif items is not None and isinstance(value, list):
            for element in value:
                if not items(element):
                    return False
        return True

    return valid


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when arrays/objects nest deeper than ``limit`` (recursing at most ``limit`` levels: deep input
    cannot overflow it)."""
    return isinstance(value, (dict, list)) and _deeper(value, 1, limit)


def _deeper(item: dict[str, Any] | list[Any], depth: int, limit: int) -> bool:
    if depth > limit:
        return True
    for child in item.values() if isinstance(item, dict) else item:
        if isinstance(child, (dict, list)) and _deeper(child, depth + 1, limit):
            return True
    return False
