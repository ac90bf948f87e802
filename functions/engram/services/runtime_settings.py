"""Runtime settings: the few settings the owner may change from the admin panel, without a restart.

Overrides live in the store (one cache row under a reserved namespace), so every process of a
deployment sees them. Only names on the allowlist are accepted, each value is validated against
the constraints of its field in the settings class, and processes re-read the row at most every
``ttl_seconds``. Secrets, endpoints, adapters and auth are never changeable here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, TypeAdapter, ValidationError

from engram.domain.errors import InvalidInput
from engram.domain.ports import KeyValueRows

log = logging.getLogger(__name__)

SYSTEM_NAMESPACE = "__engram__"
SETTINGS_KEY = "runtime_settings"

S = TypeVar("S", bound=BaseModel)
T = TypeVar("T")


class Live(Generic[T]):
    """A service's config as it is now, read per use: ``live()``. Fixed (``Live.of(config)``), or rebuilt
    from the owner's runtime settings when they change (``RuntimeSettings.provider``), so the admin panel
    changes it without a restart. The one way a service holds a config (docs/ARCHITECTURE.md)."""

    __slots__ = ("_read",)

    def __init__(self, read: Callable[[], T]) -> None:
        self._read = read

    def __call__(self) -> T:
        return self._read()

    @staticmethod
    def of(config: T | Live[T]) -> Live[T]:
        """``config`` as a ``Live``: a plain config (tests, a fixed deployment) never changes."""
        if isinstance(config, Live):
            return config
        return Live(lambda: config)


@dataclass(frozen=True)
class RuntimeSetting:
    name: str
    group: str
    label: str


# The allowlist, in display order. Names the settings class does not have (yet) are skipped.
ALLOWLIST: tuple[RuntimeSetting, ...] = (
    RuntimeSetting("chat_model", "Models", "Chat model"),
    RuntimeSetting("vision_model", "Models", "Vision model"),
    RuntimeSetting("extract_model", "Models", "Extraction model"),
    RuntimeSetting("dream_model", "Models", "Dreaming model"),
    RuntimeSetting("compress_model", "Models", "Compression model"),
    RuntimeSetting("recall_top_k", "Recall", "Memories injected per turn"),
    RuntimeSetting("recall_min_score", "Recall", "Score floor"),
    RuntimeSetting("recall_min_relevance", "Recall", "Relevance floor (chat, memory_recall)"),
    RuntimeSetting("recall_diversity", "Recall", "Diversity penalty"),
    RuntimeSetting("recall_candidates", "Recall", "Candidates per retriever"),
    RuntimeSetting("recall_keyword_weight", "Recall", "Keyword weight"),
    RuntimeSetting("recall_vector_weight", "Recall", "Vector weight"),
    RuntimeSetting("recall_importance_weight", "Recall", "Importance weight"),
    RuntimeSetting("recall_recency_weight", "Recall", "Recency weight"),
    RuntimeSetting("recall_recency_half_life_days", "Recall", "Recency half-life (days)"),
    RuntimeSetting("recall_repeat_window_minutes", "Recall", "Anti-repeat window (minutes)"),
    RuntimeSetting("recall_repeat_decay", "Recall", "Anti-repeat factor"),
    RuntimeSetting("chat_patch_max_tokens", "Recall", "Per-turn recall budget (tokens)"),
    RuntimeSetting("conversation_recall_enabled", "Past conversations", "Recall past conversations"),
    RuntimeSetting("conversation_recall_threads", "Past conversations", "Threads per turn"),
    RuntimeSetting("conversation_recall_fragments", "Past conversations", "Fragments per thread"),
    RuntimeSetting("conversation_recall_neighbours", "Past conversations", "Neighbouring messages"),
    RuntimeSetting("conversation_recall_seen_ttl_hours", "Past conversations", "Not repeated for (hours)"),
    RuntimeSetting("conversation_recall_min_relevance", "Past conversations", "Relevance floor"),
    RuntimeSetting("dedup_cosine", "Memory rules", "Duplicate threshold (cosine)"),
    RuntimeSetting("review_confidence", "Memory rules", "Review below confidence"),
    RuntimeSetting("memory_min_importance", "Memory rules", "Extracted memories: least importance"),
    RuntimeSetting("timezone", "Time", "Time zone"),
)


class RuntimeSettings(Generic[S]):
    """The effective settings: ``base`` (from the environment) with the stored overrides applied."""

    def __init__(
        self, store: KeyValueRows, base: S, *, ttl_seconds: float = 5.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._store = store
        self._base = base
        self._ttl = ttl_seconds
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._fields = type(base).model_fields
        self._specs = {s.name: s for s in ALLOWLIST if s.name in self._fields}
        # Each setting's validator, built by its first use (the admin panel's list or a change): building
        # all of them cost every process's init ~3 ms of CPU, and only the panel's requests read them.
        self._adapters: dict[str, TypeAdapter[Any]] = {}
        self._overrides: dict[str, Any] = {}
        # The effective settings and their version (bumped whenever they change), replaced as one
        # tuple so a reader on another thread never pairs one version's settings with another's number.
        self._current: tuple[S, int] = (base, 0)
        self._loaded_at: float | None = None

    # -- reading --------------------------------------------------------------------------------
    @property
    def base(self) -> S:
        return self._base

    def effective(self) -> S:
        """The settings to use now (re-reads the stored overrides at most every ``ttl_seconds``)."""
        return self.versioned()[0]

    def versioned(self) -> tuple[S, int]:
        """The settings to use now and their version, read together (safe from any thread)."""
        now = self._monotonic()
        if self._loaded_at is None or now - self._loaded_at >= self._ttl:
            self._reload(now)
        return self._current

    def get(self, name: str) -> Any:
        return getattr(self.effective(), name)

    def provider(self, build: Callable[[S], T]) -> Live[T]:
        """A ``Live`` config for a service: ``build`` applied to the effective settings,
        rebuilt only when they change. Safe from any thread: a caller gets the value built from the
        settings it read, and the memo (one ``(version, value)`` tuple, swapped whole) only moves forward."""
        memo: list[tuple[int, T]] = []

        def current() -> T:
            effective, version = self.versioned()
            cached = memo[-1] if memo else None
            if cached is not None and cached[0] == version:
                return cached[1]
            value = build(effective)
            if cached is None or cached[0] < version:
                memo[:] = [(version, value)]
            return value

        return Live(current)

    def overrides(self) -> dict[str, Any]:
        self.effective()
        return dict(self._overrides)

    def describe(self) -> list[dict[str, Any]]:
        """Every changeable setting with its current, default and overridden state (for the panel)."""
        effective = self.effective()
        out: list[dict[str, Any]] = []
        for name, spec in self._specs.items():
            field = self._fields[name]
            schema = self._validator(name).json_schema()
            out.append(
                {
                    "name": name,
                    "group": spec.group,
                    "label": spec.label,
                    "description": field.description or "",
                    "kind": _kind(schema, name),
                    "minimum": _bound(schema, "minimum", "exclusiveMinimum"),
                    "maximum": _bound(schema, "maximum", "exclusiveMaximum"),
                    "value": getattr(effective, name),
                    "default": getattr(self._base, name),
                    "overridden": name in self._overrides,
                }
            )
        return out

    # -- writing --------------------------------------------------------------------------------
    def update(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and store ``changes`` (a value of ``None`` removes the override). All or nothing."""
        unknown = sorted(set(changes) - set(self._specs))
        if unknown:
            raise InvalidInput(f"not a runtime setting: {', '.join(unknown)}", code="unknown_setting")
        with self._lock:
            current = self._read()
            for name, value in changes.items():
                if value is None:
                    current.pop(name, None)
                else:
                    current[name] = self._validate(name, value)
            self._store.put_cache(SYSTEM_NAMESPACE, SETTINGS_KEY, current)
            self._apply(current, self._monotonic())
        return dict(current)

    # -- internals ------------------------------------------------------------------------------
    def _validate(self, name: str, value: Any) -> Any:
        try:
            parsed = self._validator(name).validate_python(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise InvalidInput(f"{name}: {first.get('msg', 'invalid value')}", code="invalid_setting") from exc
        if name == "timezone":
            try:
                ZoneInfo(str(parsed))
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise InvalidInput(f"timezone: unknown time zone {parsed!r}", code="invalid_setting") from exc
        if isinstance(parsed, str):
            parsed = parsed.strip()
        return parsed

    def _read(self) -> dict[str, Any]:
        raw = self._store.get_cache(SYSTEM_NAMESPACE, SETTINGS_KEY)
        if not isinstance(raw, dict):
            return {}
        valid: dict[str, Any] = {}
        for name, value in raw.items():
            if name not in self._specs:
                continue
            try:
                valid[name] = self._validate(name, value)
            except InvalidInput:  # a row edited by hand: ignore the bad value, keep the rest
                log.warning("ignoring invalid stored runtime setting %s", name)
        return valid

    def _reload(self, now: float) -> None:
        with self._lock:
            try:
                overrides = self._read()
            except Exception:  # the store is down: keep the last known settings
                log.exception("could not read runtime settings; keeping the last known values")
                self._loaded_at = now
                return
            self._apply(overrides, now)

    def _validator(self, name: str) -> TypeAdapter[Any]:
        adapter = self._adapters.get(name)
        if adapter is None:  # two threads may both build it: the same validator, either is kept
            adapter = self._adapters[name] = _adapter(self._fields[name])
        return adapter

    def _apply(self, overrides: dict[str, Any], now: float) -> None:
        if overrides != self._overrides or self._loaded_at is None:
            self._overrides = dict(overrides)
            self._current = (self._base.model_copy(update=overrides), self._current[1] + 1)
        self._loaded_at = now


def _adapter(field: Any) -> TypeAdapter[Any]:
    if field.metadata:
        return TypeAdapter(Annotated[field.annotation, *field.metadata])
    return TypeAdapter(field.annotation)


def _kind(schema: dict[str, Any], name: str) -> str:
    if name == "timezone":
        return "timezone"
    types = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
    if "integer" in types:
        return "integer"
    if "number" in types:
        return "number"
    if "boolean" in types:
        return "boolean"
    return "string"


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> float | None:
    for source in (schema, *schema.get("anyOf", [])):
        for key in (inclusive, exclusive):
            if key in source:
                return float(source[key])
    return None
