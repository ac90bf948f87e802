"""Structural checks of decoded JSON from outside (client bodies, upstream answers) — pure.

``check_shape`` validates a value against a small subset of JSON Schema (``type`` as a name or a list,
``properties``, ``required``, ``items``): enough to guarantee that code reading a body with ``.get``
never meets a string where it expects an object. Unknown fields are allowed (wires grow), and
``properties`` / ``items`` apply only when the value has that type, as in JSON Schema. The same schema
dicts document the chat doors in the OpenAPI document.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
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
    """``check_shape`` against ``schema``, compiled once: a well-formed value is checked by one function
    generated from the schema (``_compile``: no paths built, no stack), and only a value that fails is
    checked again by ``check_shape`` for its error, so the error is the same. Every chat request and
    upstream stream event is checked (bench/gateway.py)."""
    valid = _compile(schema)

    def check(value: Any) -> None:
        if not valid(value):
            check_shape(value, schema)

    return check


def _compile(schema: Schema) -> Callable[[Any], bool]:
    """Whether a value matches ``schema`` (the rules of ``check_shape``), as one flat function written
    from the schema: a type test per field, a loop per array, no call per nested value (an upstream
    stream event is checked ~4x faster than by nested closures: bench/README.md, "Gateway overhead").
    The source holds only the schema's own keys (``repr``) and the type tuples (named constants)."""
    consts: dict[str, Any] = {}
    lines: list[str] = []
    _emit(schema, "v0", 1, lines, consts, itertools.count(1))
    namespace: dict[str, Any] = dict(consts)
    exec(compile("def valid(v0):\n" + "".join(lines) + "    return True\n", "<shape check>", "exec"), namespace)
    valid: Callable[[Any], bool] = namespace["valid"]
    return valid


def _emit(schema: Schema, var: str, depth: int, out: list[str], consts: dict[str, Any], fresh: Iterator[int]) -> None:
    """The lines (indented ``depth`` levels) that ``return False`` when the value named ``var`` does not
    match ``schema``: its type; then, for an object, the required keys and each present property; for an
    array, each element (``properties`` and ``items`` apply only to a value of that type)."""
    pad = "    " * depth
    kinds = schema.get("type")
    names: tuple[str, ...] = () if kinds is None else (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if names:
        const = f"T{len(consts)}"
        consts[const] = tuple(t for n in names for t in _PYTHON_TYPES[n])
        test = f"not isinstance({var}, {const})"
        if "boolean" not in names and ("integer" in names or "number" in names):
            test += f" or isinstance({var}, bool)"  # True is an int to Python, not a number to JSON Schema
        out.append(f"{pad}if {test}:\n{pad}    return False\n")
    # A value that can only be an object (or only an array) needs no second isinstance test.
    inner = depth if set(names) == {"object"} else depth + 1
    ipad = "    " * inner
    body: list[str] = []
    for key in schema.get("required", ()):
        body.append(f"{ipad}if {key!r} not in {var}:\n{ipad}    return False\n")
    for key, sub in schema.get("properties", {}).items():
        child = f"v{next(fresh)}"
        checks: list[str] = []
        _emit(sub, child, inner + 1, checks, consts, fresh)
        if checks:  # a property with no rule accepts anything
            body.append(f"{ipad}if {key!r} in {var}:\n{ipad}    {child} = {var}[{key!r}]\n")
            body.extend(checks)
    if body:
        if inner != depth:
            out.append(f"{pad}if isinstance({var}, dict):\n")
        out.extend(body)
    if "items" in schema:
        inner = depth if set(names) == {"array"} else depth + 1
        child = f"v{next(fresh)}"
        checks = []
        _emit(schema["items"], child, inner + 1, checks, consts, fresh)
        if checks:
            if inner != depth:
                out.append(f"{pad}if isinstance({var}, list):\n")
            out.append(f"{'    ' * inner}for {child} in {var}:\n")
            out.extend(checks)


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
