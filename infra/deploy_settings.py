"""The deployment's own settings: ``engram.deploy.json`` in the repository root, owned by the user.

Three layers, later ones winning (docs/aws.md, "Settings"):

1. the project's defaults — the field defaults of ``EngramConfig`` (infra/config.py); ``cdk.json`` holds
   only CDK's own feature flags, so an upgrade that changes a default never touches a user's choice;
2. ``engram.deploy.json`` — every choice this deployment made, git-ignored, edited by hand or written
   by the app;
3. ``-c engram:<key>=<value>`` on the command line — a change of the deployment's settings: it is applied
   and written back to the file, so the next plain ``cdk deploy`` keeps it.

The first synth of a deployment records the choices that decide what is built and indexed (search
backend, collection generation, embedder) in the file, so a later change of the project's default never
moves an existing deployment to another backend. A deployment made before the file existed is recognised
by the template its last deploy left in ``cdk.out`` (an OpenSearch collection there keeps OpenSearch).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from pathlib import Path
from typing import Any

from infra.config import EngramConfig, coerce

SETTINGS_FILE = "engram.deploy.json"
PREFIX = "engram:"
# Keys the app reads besides EngramConfig's fields.
APP_KEYS = ("stack_name",)
DEFAULT_STACK_NAME = "Engram"
# What a first synth records: changing any of these later means another backend or another index.
RECORDED_AT_FIRST_DEPLOY = ("search_backend", "collection_generation", "embedder")


@dataclass(frozen=True)
class Resolved:
    """The settings a synth uses, and what it changed in the file (for the message the app prints)."""

    values: dict[str, Any]
    written: dict[str, Any]
    path: Path

    @property
    def stack_name(self) -> str:
        return str(self.values.get("stack_name") or DEFAULT_STACK_NAME)

    def config(self) -> EngramConfig:
        return EngramConfig(**{k: v for k, v in self.values.items() if k not in APP_KEYS})

    def message(self) -> str:
        if not self.written:
            return ""
        pairs = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(self.written.items()))
        return f"engram: saved {pairs} to {self.path.name}; the next `cdk deploy` keeps them (docs/aws.md, Settings)"


def _default(f: Field[Any]) -> Any:
    """A field's default, from its factory when it has one."""
    return f.default if f.default_factory is MISSING else f.default_factory()


def known_keys() -> dict[str, Any]:
    """Every settings key with its project default."""
    defaults = {f.name: _default(f) for f in fields(EngramConfig)}
    return {**defaults, "stack_name": DEFAULT_STACK_NAME}


def _check_keys(keys: list[str], where: str) -> None:
    unknown = sorted(set(keys) - set(known_keys()))
    if unknown:
        raise ValueError(
            f"unknown Engram setting(s) {unknown} in {where}; the settings are listed in docs/aws.md, "
            "'Settings' (e.g. search_backend, embedder, alarm_email)"
        )


def load(path: Path) -> dict[str, Any]:
    """The file's settings (empty when it does not exist); a malformed file or unknown key stops the synth."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); fix or delete the file") from None
    if not isinstance(data, dict):
        raise ValueError(f'{path}: expected one JSON object of settings, e.g. {{"search_backend": "replica"}}')
    keys = [k.removeprefix(PREFIX) for k in data]
    _check_keys(keys, str(path))
    return {k.removeprefix(PREFIX): v for k, v in data.items()}


def _typed(values: Mapping[str, Any]) -> dict[str, Any]:
    """Values as the file stores them: the field's type (``-c`` passes strings), tuples as lists."""
    defaults = known_keys()
    out: dict[str, Any] = {}
    for key, raw in values.items():
        value = coerce(key, raw, defaults[key])
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def context_overrides(context: Mapping[str, Any]) -> dict[str, Any]:
    """The ``engram:*`` keys of the CDK context (``-c`` flags), typed; an unknown key stops the synth."""
    given = {k.removeprefix(PREFIX): v for k, v in context.items() if k.startswith(PREFIX)}
    _check_keys(list(given), "the CDK context (-c engram:<key>=...)")
    return _typed(given)


def deployed_backend(template: Path) -> dict[str, Any]:
    """The search backend a previous deploy left in ``cdk.out`` (empty when there is no template)."""
    if not template.is_file():
        return {}
    try:
        resources = json.loads(template.read_text(encoding="utf-8")).get("Resources", {})
    except (json.JSONDecodeError, AttributeError):
        return {}
    types = {r.get("Type") for r in resources.values() if isinstance(r, dict)}
    if "AWS::OpenSearchServerless::Collection" in types:
        nextgen = "AWS::OpenSearchServerless::CollectionGroup" in types
        return {"search_backend": "opensearch", "collection_generation": "nextgen" if nextgen else "classic"}
    if types:
        return {"search_backend": "replica"}
    return {}


def resolve(context: Mapping[str, Any], root: Path, *, write: bool = True) -> Resolved:
    """Merge defaults < ``engram.deploy.json`` < ``-c`` flags, validate, and write the file back.

    ``root`` is the directory of ``cdk.json``. The file is written only when something changed: a flag
    that differs from it, or the first synth's recorded choices.
    """
    path = root / SETTINGS_FILE
    saved = _typed(load(path))
    overrides = context_overrides(context)
    values = {**saved, **overrides}
    written = {k: v for k, v in overrides.items() if saved.get(k, object()) != v}
    if not path.is_file():
        stack_name = str(values.get("stack_name") or DEFAULT_STACK_NAME)
        previous = deployed_backend(root / "cdk.out" / f"{stack_name}.template.json")
        defaults = known_keys()
        for key in RECORDED_AT_FIRST_DEPLOY:
            if key not in values:
                values[key] = previous.get(key, defaults[key])
                written[key] = values[key]
    resolved = Resolved(values=values, written=written, path=path)
    resolved.config()  # validate before anything is written
    if write and written:
        path.write_text(json.dumps(dict(sorted(values.items())), indent=2) + "\n", encoding="utf-8")
    return resolved
