"""Structural checks of decoded JSON from outside (client bodies, upstream answers) — pure.

``check_shape`` validates a value against a small subset of JSON Schema (``type`` as a name or a list,
``properties``, ``required``, ``items``): enough to guarantee that code reading a body with ``.get``
never meets a string where it expects an object. Unknown fields are allowed (wires grow), and
``properties`` / ``items`` apply only when the value has that type, as in JSON Schema. The same schema
dicts document the chat doors in the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Mapping
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


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when arrays/objects nest deeper than ``limit`` (iterative: deep input cannot overflow it)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
