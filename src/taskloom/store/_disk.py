"""The store on a full disk: a reserve file to give back, and one-line descriptions.

A full disk is expected, not a bug. The store keeps a small reserve file next to the database;
when a commit fails for lack of space it gives that space back and retries at once, so the state
that matters (a command's end, the session's end) still reaches the disk.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from pathlib import Path

#: Bytes set aside next to the database, given back when a commit finds the disk full.
RESERVE_BYTES = 1024 * 1024
FULL_ADVICE = "free some space on that file system, or point TASKLOOM_HOME elsewhere"

log = logging.getLogger("taskloom.store.db")


def reserve_path(db: Path) -> Path:
    """Where the reserve file of database ``db`` lives."""
    return db.with_name(db.name + "-reserve")


def make_reserve(db: Path, size: int) -> None:
    """Set ``size`` bytes aside next to ``db`` if there is space now (else go without)."""
    if size <= 0:
        return
    path = reserve_path(db)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return
    try:
        if os.fstat(fd).st_size < size:
            os.posix_fallocate(fd, 0, size)
    except OSError:
        # A half-made reserve only takes space that others need right now.
        with contextlib.suppress(OSError):
            os.unlink(path)
    finally:
        os.close(fd)


def release_reserve(db: Path) -> bool:
    """Give the reserve's space back; False when there was none left to give."""
    path = reserve_path(db)
    try:
        size = os.stat(path).st_size
        os.unlink(path)
    except OSError:
        return False
    log.warning(
        "%s: the disk is full; released %d KiB kept in reserve to save the session's state (%s)",
        db,
        size // 1024,
        FULL_ADVICE,
    )
    return True


def is_full(exc: BaseException) -> bool:
    """Whether SQLite failed for lack of disk space."""
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


def describe(db: Path, exc: sqlite3.Error) -> str:
    """One line for a failed statement: the database, the error and what to do about it."""
    if is_full(exc):
        return f"{db}: {exc} ({FULL_ADVICE})"
    return f"{db}: {exc}"
