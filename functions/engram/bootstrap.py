"""The composition root: Settings -> adapters -> services. The only module that picks adapters."""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram.domain.access import ALL, ApiKey, KeyRing
from engram.domain.errors import InvalidInput, NotConfigured
from engram.domain.ports import Clock, Embedder, JobQueue, MemoryStore, SearchIndex
from engram.settings import Settings, load_settings

log = logging.getLogger(__name__)

LOCAL_DB_NAME = "engram.sqlite3"
LOCAL_KEYS_NAME = "keys.json"


@dataclass
class Container:
    """Everything a process needs, built once."""

    settings: Settings
    store: MemoryStore
    index: SearchIndex
    embedder: Embedder | None
    clock: Clock
    keys: KeyRing
    memories: Any
    candidates: Any
    library: Any
    transfer: Any
    recall: Any
    queue: JobQueue | None = None
    # RuntimeSettings: the owner's overrides of the safe settings (admin panel); `.effective()`.
    runtime: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
    _closers: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for closer in reversed(self._closers):
            try:
                closer()
            except Exception:  # closing is best effort at shutdown
                log.exception("error while closing")
        self._closers.clear()


def build_container(settings: Settings | None = None, **overrides: Any) -> Container:
    """Build the object graph. ``overrides`` replace adapters (tests pass fakes: ``store=...``)."""
    from engram.adapters.clock import SystemClock
    from engram.services.curation import CandidateService
    from engram.services.library import LibraryService
    from engram.services.memories import MemoryRules, MemoryService
    from engram.services.runtime_settings import RuntimeSettings
    from engram.services.transfer import TransferService

    settings = settings or load_settings()
    closers: list[Any] = []
    clock: Clock = overrides.get("clock") or SystemClock()
    store: MemoryStore = overrides.get("store") or _build_store(settings, closers)
    index: SearchIndex = overrides.get("index") or _build_index(settings, closers)
    embedder: Embedder | None = overrides["embedder"] if "embedder" in overrides else _build_embedder(settings)
    keys = overrides.get("keys") or build_keyring(settings)
    _check_index_model(index, embedder)

    runtime = RuntimeSettings(store, settings)
    rules = runtime.provider(lambda s: MemoryRules(dedup_cosine=s.dedup_cosine))
    memories = MemoryService(store, index, embedder, clock, rules)
    library = LibraryService(store, clock, runtime.provider(lambda s: s.timezone))
    recall = overrides.get("recall") or _build_recall(runtime, store, index, embedder, clock, memories)
    container = Container(
        settings=settings,
        store=store,
        index=index,
        embedder=embedder,
        clock=clock,
        keys=keys,
        memories=memories,
        candidates=CandidateService(store, memories, clock),
        library=library,
        transfer=TransferService(store, memories, clock),
        recall=recall,
        queue=overrides.get("queue"),
        runtime=runtime,
    )
    container._closers = closers
    return container


# -- adapters -------------------------------------------------------------------------------
def local_db_path(settings: Settings) -> Path:
    return Path(settings.data_dir).expanduser() / LOCAL_DB_NAME


def _build_store(settings: Settings, closers: list[Any]) -> MemoryStore:
    if settings.store == "memory":
        from engram.adapters.storage.inmemory import InMemoryMemoryStore

        return InMemoryMemoryStore()
    if settings.store == "sqlite":
        from engram.adapters.storage.sqlite import SqliteMemoryStore

        path = local_db_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        sqlite_store = SqliteMemoryStore(path)
        closers.append(sqlite_store.close)
        return sqlite_store
    raise NotConfigured(f"store {settings.store!r} is not available in this build")


def _build_index(settings: Settings, closers: list[Any]) -> SearchIndex:
    if settings.search == "memory":
        from engram.adapters.search.inmemory import InMemorySearchIndex

        return InMemorySearchIndex()
    if settings.search == "local":
        from engram.adapters.search.local import SqliteSearchIndex

        path = local_db_path(settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        index = SqliteSearchIndex(path)
        closers.append(index.close)
        return index
    raise NotConfigured(f"search index {settings.search!r} is not available in this build")


def _build_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "none":
        return None
    if settings.embedder == "local":
        from engram.adapters.embed.local import LocalEmbedder

        return LocalEmbedder()
    if settings.embedder == "openai":
        from engram.adapters.embed.openai_compat import OpenAIEmbedder

        if not settings.embedding_base_url or not settings.embedding_model:
            raise NotConfigured("ENGRAM_EMBEDDER=openai needs ENGRAM_EMBEDDING_BASE_URL and ENGRAM_EMBEDDING_MODEL")
        return OpenAIEmbedder(
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None,
            model=settings.embedding_model,
            dimensions=settings.embedding_dimensions,
        )
    raise NotConfigured(f"embedder {settings.embedder!r} is not available in this build")


def _build_recall(runtime: Any, store: MemoryStore, index: SearchIndex, embedder: Embedder | None,
                  clock: Clock, memories: Any) -> Any:
    from engram.services.recall import RecallConfig, RecallService

    config = runtime.provider(RecallConfig.from_settings)
    return RecallService(store, index, embedder, None, None, clock, config)


def _check_index_model(index: SearchIndex, embedder: Embedder | None) -> None:
    """Record the embedding model on a fresh index; warn when it changed (run `engram reindex`)."""
    if embedder is None:
        return
    info = index.info()
    if info.model_id is None:
        index.reset(embedder.model_id, embedder.dimension)
    elif info.model_id != embedder.model_id or info.dimension != embedder.dimension:
        log.warning(
            "the search index was built with %s (%s dims) but the embedder is %s (%s dims): "
            "vector search is off until `engram reindex` rebuilds it",
            info.model_id, info.dimension, embedder.model_id, embedder.dimension,
        )


def index_model_mismatch(container: Container) -> bool:
    if container.embedder is None:
        return False
    info = container.index.info()
    return info.model_id != container.embedder.model_id or info.dimension != container.embedder.dimension


# -- keys -----------------------------------------------------------------------------------
def build_keyring(settings: Settings) -> KeyRing:
    keys: list[ApiKey] = []
    if settings.api_key is not None:
        keys.append(
            ApiKey.create(settings.api_key.get_secret_value(), name="owner", namespace=settings.default_namespace, scopes=[ALL])
        )
    if settings.keys_file is not None:
        keys.extend(load_keys_file(Path(settings.keys_file)))
    return KeyRing(keys)


def load_keys_file(path: Path) -> list[ApiKey]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise NotConfigured(f"keys file {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"keys file {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from exc
    entries = raw.get("keys", raw) if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise InvalidInput(f"keys file {path} must hold a list of keys")
    out: list[ApiKey] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise InvalidInput(f"keys file {path}: entry {i} needs a string 'key'")
        out.append(
            ApiKey.create(
                entry["key"],
                name=str(entry.get("name") or f"key{i}"),
                namespace=str(entry.get("namespace") or "default"),
                scopes=entry.get("scopes") or [ALL],
            )
        )
    return out


def ensure_local_owner_key(settings: Settings) -> tuple[Settings, str | None]:
    """For `engram serve` with no key configured: create an owner key in the data dir once.

    Returns the settings pointing at the keys file and the new secret (only when just created).
    """
    if settings.api_key is not None or settings.keys_file is not None:
        return settings, None
    path = Path(settings.data_dir).expanduser() / LOCAL_KEYS_NAME
    created: str | None = None
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        created = "ek_" + secrets.token_urlsafe(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump([{"name": "owner", "key": created, "namespace": settings.default_namespace, "scopes": [ALL]}], fh, indent=2)
    return settings.model_copy(update={"keys_file": path}), created
