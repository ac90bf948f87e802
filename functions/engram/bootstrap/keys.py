"""API keys: the owner key from settings, the keys file, and the local owner key `engram serve` creates."""

from __future__ import annotations

import json
import logging
import os
import secrets
from pathlib import Path

from engram.adapters.files import private_dir, readable_by_others
from engram.domain.access import ALL, ApiKey, KeyRing
from engram.domain.errors import InvalidInput, NotConfigured
from engram.settings import Settings

log = logging.getLogger(__name__)

LOCAL_KEYS_NAME = "keys.json"


def build_keyring(settings: Settings) -> KeyRing:
    keys: list[ApiKey] = []
    if settings.api_key is not None:
        keys.append(
            ApiKey.create(
                settings.api_key.get_secret_value(), name="owner", namespace=settings.default_namespace, scopes=[ALL]
            )
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
    if readable_by_others(path):
        log.warning("keys file %s is readable by other users of this machine: run `chmod 600 %s`", path, path)
    entries = raw.get("keys", raw) if isinstance(raw, dict) else raw
    if not isinstance(entries, list):
        raise InvalidInput(f"keys file {path} must hold a list of keys")
    out: list[ApiKey] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise InvalidInput(f"keys file {path}: entry {i} needs a string 'key'")
        name = str(entry.get("name") or f"key{i}")
        # Scopes are never implied: a missing list is a mistake, an empty one grants nothing.
        if "scopes" not in entry:
            raise InvalidInput(
                f"keys file {path}: key {name!r} has no 'scopes' (list what it may do, e.g. [\"chat:proxy\"], "
                "or [] for nothing)",
                code="missing_scopes",
            )
        scopes = entry["scopes"]
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise InvalidInput(f"keys file {path}: key {name!r}: 'scopes' must be a list of strings", code="bad_scopes")
        out.append(
            ApiKey.create(
                entry["key"],
                name=name,
                namespace=str(entry.get("namespace") or "default"),
                scopes=scopes,
                chat_per_minute=entry.get("chat_per_minute"),
                requests_per_minute=entry.get("requests_per_minute"),
                agent=entry.get("agent"),
                server_history=entry.get("server_history", False),
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
        private_dir(path.parent)
        created = "ek_" + secrets.token_urlsafe(24)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(
                [{"name": "owner", "key": created, "namespace": settings.default_namespace, "scopes": [ALL]}],
                fh,
                indent=2,
            )
    return settings.model_copy(update={"keys_file": path}), created
