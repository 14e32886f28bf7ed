"""The store on a full disk: a reserve file to give back, and one-line descriptions.

A full disk is expected, not a bug. The store keeps a small reserve file next to the database;
when a commit (or opening the store) fails for lack of space it gives that space back and
retries at once, so the state that matters (a command's end, the session's end) still reaches
the disk. The reserve is made again once commits succeed again, so it serves every full disk,
not just the first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

#: Bytes set aside next to the database, given back when a commit finds the disk full.
RESERVE_BYTES = 1024 * 1024
#: Seconds between tries to make a missing reserve while commits succeed but it does not fit.
RESERVE_RETRY_S = 1.0
FULL_ADVICE = "free some space on that file system, or point TASKLOOM_HOME elsewhere"

log = logging.getLogger("taskloom.store.db")


def reserve_path(db: Path) -> Path:
    """Where the reserve file of database ``db`` lives."""
    return db.with_name(db.name + "-reserve")


def make_reserve(db: Path, size: int) -> bool:
    """Set ``size`` bytes aside next to ``db`` if there is space now; whether they are."""
    if size <= 0:
        return True
    path = reserve_path(db)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        if os.fstat(fd).st_size < size:
            os.posix_fallocate(fd, 0, size)
    except OSError:
        # A half-made reserve only takes space that others need right now.
        with contextlib.suppress(OSError):
            os.unlink(path)
        return False
    finally:
        os.close(fd)
    return True


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


class Reserve:
    """The reserve of one database: given back on a full disk, made again afterwards.

    While the reserve is in place, a commit pays one attribute test for it. Once it is missing
    (it did not fit when the store opened, or a full disk took it), the next successful commit
    tries to make it again; while it still does not fit, one try per :data:`RESERVE_RETRY_S`.
    """

    def __init__(self, db: Path, size: int) -> None:
        """The reserve of ``db``, ``size`` bytes (0: none); call :meth:`open` to make it."""
        self.db = db
        self.size = size
        # When to try making it next (monotonic clock); None while it is in place or unwanted.
        self._due: float | None = None

    def open(self) -> None:
        """Make the reserve as the store opens; if it does not fit, try from the next commit."""
        if not self._make():
            self._due = 0.0

    def release(self) -> bool:
        """Give the reserve's space back (the disk is full); False when there was none."""
        self.missed()
        return release_reserve(self.db)

    def missed(self) -> None:
        """A write found the disk full: make the reserve at the next one that succeeds."""
        if self.size > 0:
            self._due = 0.0

    def committed(self) -> None:
        """A commit succeeded: make the reserve if it is missing and a try is due."""
        if self._due is not None and time.monotonic() >= self._due:
            self._make()

    def _make(self) -> bool:
        made = make_reserve(self.db, self.size)
        self._due = None if made else time.monotonic() + RESERVE_RETRY_S
        return made


def is_full(exc: BaseException, db: Path | None = None) -> bool:
    """Whether SQLite failed for lack of disk space.

    SQLITE_FULL says so. Creating or growing the WAL or shared-memory file on a full disk gives
    only "disk I/O error": given the database ``db``, such an error counts as a full disk when
    its file system has less than :data:`RESERVE_BYTES` left.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL:
        return True
    if db is None or code is None or code & 0xFF != sqlite3.SQLITE_IOERR:
        return False
    try:
        fs = os.statvfs(db.parent)
    except OSError:
        return False
    return fs.f_bavail * fs.f_frsize < RESERVE_BYTES


def describe(db: Path, exc: sqlite3.Error) -> str:
    """One line for a failed statement: the database, the error and what to do about it."""
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return f"{db}: {exc} ({FULL_ADVICE})"
    if is_full(exc, db):
        return f"{db}: {exc}: the disk is full ({FULL_ADVICE})"
    return f"{db}: {exc}"
