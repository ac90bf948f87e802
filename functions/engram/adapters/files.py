"""Owner-only files: the local data (SQLite database and its -wal/-shm, keys file, ANN graphs) holds
memories and keys, so no other user of the machine may read it (README, section Keys).

The data directory is created 0700 and every file Engram writes 0600. An existing directory is left
as it is (it may be one the user chose for other things too); the files in it are tightened.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
# SQLite creates these next to the database, with the database file's permissions.
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def private_dir(path: Path) -> Path:
    """``path`` as a directory; created owner-only (parents too) when it does not exist."""
    if not path.is_dir():
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        for created in missing:
            _chmod(created, DIR_MODE)
    return path


def private_data_dir(path: Path) -> Path:
    """The data directory: created owner-only, or an existing one that others may enter tightened to
    0700 at start, with a log line (README, section Keys)."""
    if path.is_dir():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            _chmod(path, mode & 0o700)
            log.warning("data dir %s was open to other users (mode %o): made owner-only (0700)", path, mode)
        return path
    return private_dir(path)


def private_file(path: Path) -> Path:
    """``path`` as an owner-only file: created empty (0600) when missing, else its mode tightened."""
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        tighten(path)
    else:
        os.close(fd)
    return path


def private_sqlite(path: Path) -> Path:
    """A SQLite database file (and the side files an earlier, looser run left) owner-only.

    Call before connecting: SQLite then gives the -wal/-shm files it creates the database's mode.
    """
    private_file(path)
    for suffix in SQLITE_SIDE_FILES:
        tighten(path.with_name(path.name + suffix))
    return path


def write_private(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Replace ``path`` with ``data`` (bytes, or a function writing to the open file) atomically and
    owner-only from the first byte: a temporary file unique to this writer (``mkstemp``: mode 0600,
    never shared by two writers of one path, in this process or another) in the same directory, then
    a rename. A reader sees the old file or the new one, never a part; no temporary file outlives a failure."""
    private_dir(path.parent)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(data):
                data(fh)
            else:
                fh.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def tighten(path: Path) -> None:
    """Drop group and other permissions from an existing file (nothing when it is missing)."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        _chmod(path, mode & 0o700)


def readable_by_others(path: Path) -> bool:
    """Whether users other than the owner may read ``path``."""
    return bool(path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH))


def _chmod(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except PermissionError:  # not ours (a shared mount): say so and keep going
        log.warning("cannot make %s owner-only (mode %o): it belongs to another user", path, mode)
