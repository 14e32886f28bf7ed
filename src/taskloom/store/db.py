"""SQLite store: task records, the durable mailbox, names, sessions, process and tag records.

One connection per process, WAL mode so that another process (``taskloom tasks``, a teammate)
reads while this one writes. Writes from the event loop are *group-committed* (``_commit.py``):
they are queued and committed together once per loop iteration, which keeps task churn above
10,000 tasks/s. Every read, and :meth:`Store.flush`, commits the queue first, so a caller always
reads its own writes, and the notification queue flushes before it hands anything out (nothing
is delivered that is not durable).

A full disk is expected, not a bug: see ``_disk.py`` for the reserve given back then. It is
logged as one line naming the database and what to do, without a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from taskloom.errors import StoreError
from taskloom.settings import ensure_private_dir, refuse_symlinks
from taskloom.store import _sql
from taskloom.store._commit import BUSY_TIMEOUT_MS, GroupCommit
from taskloom.store._disk import RESERVE_BYTES, Reserve, describe, is_full
from taskloom.store.rows import MailRow, ProcessRow, SessionRow, TagRow
from taskloom.store.schema import MIGRATIONS, SCHEMA_VERSION

_T = TypeVar("_T")
#: How many values :meth:`Store.add_mail_values` takes (a MailRow's fields but delivered_at).
_MAIL_FIELDS = 12


class Store:
    """The embedded store. Safe to share between threads of one process."""

    def __init__(self, path: Path | str, *, reserve_bytes: int = RESERVE_BYTES) -> None:
        """Open (creating and migrating as needed) the database at ``path``.

        Args:
            path: The database file.
            reserve_bytes: Size of the reserve file kept for a full disk (0: none).
        """
        self.path = Path(path)
        self._closed = False
        ensure_private_dir(self.path.parent)
        # SQLite follows links: none may stand where it writes (and the database is opened
        # with O_NOFOLLOW below, against one planted after this check).
        for suffix in ("", "-wal", "-shm"):
            refuse_symlinks(self.path.parent, (self.path.name + suffix,))
        self._lock = threading.RLock()
        self._reserve = Reserve(self.path, reserve_bytes)
        # SQLite gives the -wal and -shm files the database file's mode: create it private.
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        os.close(os.open(self.path, flags, 0o600))
        self._open()
        self._writes = GroupCommit(self.path, self._conn, self._lock, self._reserve)
        self._reserve.open()

    def _open(self) -> None:
        """Connect, set up and migrate; on a full disk give the reserve back and try again.

        Raises:
            StoreError: The database cannot be opened (one line: the path, what to do).
        """
        for last in (False, True):
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30
            )
            try:
                self._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
                # Creates the -wal and -shm files: on a full disk, this fails first.
                self._conn.execute("PRAGMA journal_mode = WAL")
                # NORMAL in WAL mode: a commit survives a process crash; only an OS crash or
                # power loss can drop the last transactions. That is the durability we promise.
                self._conn.execute("PRAGMA synchronous = NORMAL")
                # Checkpoints fsync; a thread of ours runs them so the event loop never waits
                # on the disk (see _commit.py).
                self._conn.execute("PRAGMA wal_autocheckpoint = 0")
                self._migrate()
                return
            except BaseException as exc:
                self._conn.close()
                if not isinstance(exc, sqlite3.DatabaseError):
                    raise
                if not last and is_full(exc, self.path) and self._reserve.release():
                    continue
                raise StoreError(f"cannot open store: {describe(self.path, exc)}") from exc

    # -- schema -------------------------------------------------------------------------------

    def _migrate(self) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"store {self.path} has schema version {version}, newer than this "
                    f"taskloom understands ({SCHEMA_VERSION}); upgrade taskloom"
                )
            for number in range(version, SCHEMA_VERSION):
                for statement in _split_sql(MIGRATIONS[number]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    # -- write queue (see _commit.py) ---------------------------------------------------------

    def write(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Queue a write; it commits with the others at the end of this loop iteration."""
        self._writes.write(sql, params)

    def flush(self) -> None:
        """Commit every queued write in one transaction."""
        self._writes.flush()

    def _transaction(self, op: Callable[[sqlite3.Connection], _T]) -> _T:
        """Commit what is queued, then run ``op`` in its own immediate transaction, now.

        For compare-and-set writes, whose outcome the caller must know before going on.

        Raises:
            StoreError: The transaction failed (it was rolled back).
        """
        conn = self._conn

        def attempt() -> _T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = op(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        with self._lock:
            self._writes.flush_locked()
            try:
                return self._writes.with_reserve(attempt)
            except sqlite3.Error as exc:
                raise StoreError(f"store write failed: {describe(self.path, exc)}") from exc

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            self._writes.flush_locked()
            cur = self._conn.execute(sql, params)
            cur.row_factory = sqlite3.Row
            return cur.fetchall()

    def transaction(self, op: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``op`` in one immediate transaction, now, after what is queued (compare-and-set).

        Raises:
            StoreError: The transaction failed (it was rolled back).
        """
        return self._transaction(op)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Commit what is queued, then return the rows ``sql`` reads."""
        return self._query(sql, params)

    def close(self) -> None:
        """Commit what is queued, checkpoint, and close the connection."""
        with self._lock:
            try:
                self._writes.flush_locked()
            finally:
                self._writes.stop()
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                self._conn.close()
                self._closed = True

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called (writes would fail from now on)."""
        return self._closed

    # -- sessions -----------------------------------------------------------------------------

    def upsert_session(self, row: SessionRow) -> None:
        """Record that ``row.id`` is (again) run by process ``row.pid``."""
        self.write(
            "INSERT INTO sessions(id, pid, pid_start, boot_id, cwd, started_at, ended_at) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL) ON CONFLICT(id) DO UPDATE SET pid = excluded.pid, "
            "pid_start = excluded.pid_start, boot_id = excluded.boot_id, cwd = excluded.cwd, "
            "ended_at = NULL",
            (row.id, row.pid, row.pid_start, row.boot_id, row.cwd, row.started_at),
        )

    def claim_session(
        self, row: SessionRow, may_take: Callable[[SessionRow], bool]
    ) -> tuple[bool, SessionRow | None]:
        """Make ``row.pid`` the process running session ``row.id``, atomically.

        In one transaction: read the session; if it exists and ``may_take(current)`` is false,
        leave it; otherwise insert it or set its owner (keeping its start time), compare-and-set
        on the owner that was read.

        Args:
            row: The session as the claiming process would run it.
            may_take: Whether the current record may be taken over (its owner is gone).

        Returns:
            Whether the claim succeeded, and the record as it was before (None if new).

        Raises:
            StoreError: The transaction failed.
        """
        return self._transaction(lambda conn: _sql.claim(conn, row, may_take))

    def end_session_of(
        self,
        session: SessionRow,
        when: float,
        *,
        statuses: Collection[str] = (),
        settle: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> bool:
        """End ``session`` only if it is still open and run by the process it names, now.

        If it is ended, its tasks in ``statuses`` are settled in the same transaction: each
        record is passed to ``settle``, and what that returns (None: leave it) is written.
        So whoever claims the session next sees them settled, never still running.

        Args:
            session: The session as it was read, owner included (the compare-and-set).
            when: Its end time.
            statuses: Which of its tasks to hand to ``settle``.
            settle: A task record's new state dict, or None to leave it as it is.

        Returns:
            Whether it was ended (False: another process has claimed it meanwhile).

        Raises:
            StoreError: The transaction failed.
        """
        return self._transaction(
            lambda conn: _sql.end_session_of(conn, session, when, statuses, settle)
        )

    def end_session(self, session_id: str, when: float | None = None) -> None:
        """Mark a session as cleanly ended."""
        self.write(
            "UPDATE sessions SET ended_at = ? WHERE id = ?",
            (when if when is not None else time.time(), session_id),
        )

    def get_session(self, session_id: str) -> SessionRow | None:
        """Return one session, or None."""
        rows = self._query("SELECT * FROM sessions WHERE id = ?", (session_id,))
        return SessionRow(**dict(rows[0])) if rows else None

    def open_sessions(self) -> list[SessionRow]:
        """Return sessions not marked as ended (running, or crashed)."""
        rows = self._query("SELECT * FROM sessions WHERE ended_at IS NULL")
        return [SessionRow(**dict(r)) for r in rows]

    def list_sessions(self) -> list[SessionRow]:
        """Return every session, newest first."""
        rows = self._query("SELECT * FROM sessions ORDER BY started_at DESC")
        return [SessionRow(**dict(r)) for r in rows]

    # -- tasks --------------------------------------------------------------------------------

    def upsert_task(self, data: dict[str, Any]) -> None:
        """Queue a task record (a state's ``to_dict()``); the latest one per id is written."""
        self.upsert_task_lazy(data["id"], lambda: data)

    def upsert_task_lazy(self, task_id: str, make: Callable[[], dict[str, Any]]) -> None:
        """Queue a task record built by ``make()`` at commit time (only the latest is built)."""
        self._writes.write_task(task_id, make)

    def get_task(self, task_id: str) -> dict[str, Any] | None:
        """Return a task record's state dict, or None."""
        rows = self._query("SELECT data FROM tasks WHERE id = ?", (task_id,))
        return json.loads(rows[0]["data"]) if rows else None

    def list_tasks(
        self,
        session_id: str | None = None,
        statuses: Iterable[str] | None = None,
        types: Iterable[str] | None = None,
        *,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Return task state dicts, oldest first, optionally for one session, statuses, types.

        ``types`` are the stored values (``remote_agent``). ``limit`` and ``offset`` give one
        page of them (a session may hold thousands): at most ``limit`` after the first
        ``offset``.
        """
        sql = "SELECT data FROM tasks"
        clauses: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        for column, values in (("status", statuses), ("type", types)):
            if values is not None:
                wanted = list(values)
                clauses.append(f"{column} IN ({','.join('?' * len(wanted))})")
                params.extend(wanted)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY start_time"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            params.extend((-1 if limit is None else max(0, limit), max(0, offset)))
        return [json.loads(r["data"]) for r in self._query(sql, params)]

    def count_tasks(self, session_id: str | None = None) -> int:
        """How many task records there are (of one session)."""
        if session_id is None:
            rows = self._query("SELECT COUNT(*) AS n FROM tasks", ())
        else:
            rows = self._query(
                "SELECT COUNT(*) AS n FROM tasks WHERE session_id = ?", (session_id,)
            )
        return int(rows[0]["n"])

    # -- the mailbox ---------------------------------------------------------------------------

    def add_mail(self, row: MailRow) -> None:
        """Queue a mailbox row durably (committed with the next group commit)."""
        self.write(_sql.INSERT_MAIL, _sql.mail_params(row))

    def add_mail_values(self, *values: Any) -> None:
        """:meth:`add_mail` of a row given as its values, in :class:`MailRow`'s order.

        ``values``: id, seq, session_id, recipient, sender, kind, topic, priority, body,
        summary, created_at, payload (the row is undelivered). For the mailbox, which posts a
        row per task notification: a ``MailRow`` built only to be read back costs more than
        queueing the write.

        Raises:
            TypeError: Not one value per field.
        """
        if len(values) != _MAIL_FIELDS:
            raise TypeError(f"a mailbox row has {_MAIL_FIELDS} fields, not {len(values)}")
        self._writes.write(_sql.INSERT_MAIL, values)

    def undelivered_mail(self, session_id: str) -> list[MailRow]:
        """Return a session's mailbox rows not yet acknowledged, in posting order."""
        rows = self._query(
            "SELECT * FROM mailbox WHERE session_id = ? AND delivered_at IS NULL "
            "ORDER BY created_at, seq",
            (session_id,),
        )
        return [MailRow(**dict(r)) for r in rows]

    def mail_taken_after(self, session_id: str, recipient: str, since: float) -> bool:
        """Whether a row for ``recipient`` is undelivered, or was delivered after ``since``.

        Whether what an agent said at ``since`` (that it is idle) is old news: it has taken,
        or has yet to take, a row since. The stamps compared are the recipient process's own.
        """
        rows = self._query(
            "SELECT 1 FROM mailbox WHERE session_id = ? AND recipient = ? AND "
            "(delivered_at IS NULL OR delivered_at > ?) LIMIT 1",
            (session_id, recipient, since),
        )
        return bool(rows)

    def ack_mail(self, ids: Iterable[str], when: float | None = None) -> None:
        """Mark mailbox rows as delivered (the first stamp stays); they are not replayed."""
        stamp = when if when is not None else time.time()
        wanted = list(ids)
        for start in range(0, len(wanted), 500):  # stay far below SQLite's variable limit
            chunk = wanted[start : start + 500]
            self.write(
                "UPDATE mailbox SET delivered_at = ? WHERE delivered_at IS NULL AND id IN "
                f"({','.join('?' * len(chunk))})",
                (stamp, *chunk),
            )

    # -- the directory of addresses -----------------------------------------------------------

    def bind_address(
        self,
        session_id: str,
        name: str,
        address: str,
        *,
        team: str = "",
        when: float = 0.0,
        replace: bool = False,
    ) -> bool:
        """Give ``address`` the name ``name`` in a session, now; False if the name is taken.

        With ``replace`` a taken name is moved to ``address`` (always True).

        Raises:
            StoreError: The store could not be written.
        """
        return self._transaction(
            lambda conn: _sql.bind_address(conn, session_id, team, name, address, when, replace)
        )

    def addresses(self, session_id: str, team: str = "") -> dict[str, str]:
        """Return a session's names and the addresses they name."""
        rows = self._query(
            "SELECT name, address FROM addresses WHERE session_id = ? AND team = ? "
            "ORDER BY created_at, name",
            (session_id, team),
        )
        return {r["name"]: r["address"] for r in rows}

    # -- process records ----------------------------------------------------------------------

    def add_process(self, row: ProcessRow) -> None:
        """Record a spawned process group leader for the orphan sweep."""
        self.write(
            "INSERT OR REPLACE INTO processes(pid, pid_start, pgid, session_id, task_id, "
            "owner_pid, owner_start, boot_id, detached) VALUES (?,?,?,?,?,?,?,?,?)",
            _sql.process_params(row),
        )

    def remove_process(self, pid: int, pid_start: float) -> None:
        """Forget a process that has ended."""
        self.write("DELETE FROM processes WHERE pid = ? AND pid_start = ?", (pid, pid_start))

    def set_process_detached(self, task_id: str) -> None:
        """Exempt a task's processes from the orphan sweep (exit policy ``detach``)."""
        self.write("UPDATE processes SET detached = 1 WHERE task_id = ?", (task_id,))

    def list_processes(self) -> list[ProcessRow]:
        """Return every recorded process."""
        rows = self._query("SELECT * FROM processes")
        return [ProcessRow(**{**dict(r), "detached": bool(r["detached"])}) for r in rows]

    # -- tag records ---------------------------------------------------------------------------

    def record_tags(
        self,
        session_id: str,
        tags: Iterable[str],
        *,
        owner_pid: int,
        owner_start: float,
        boot_id: str = "",
        when: float | None = None,
        path: str = "",
    ) -> list[TagRow]:
        """Record ``tags`` for the orphan sweep durably, now: before anything carrying them starts.

        All or none, in one transaction; returned in the order of ``tags``. Each record has an
        id of its own (a tag recorded twice is two records). ``owner_pid`` and ``owner_start``
        (seconds since boot) name the session process recording them: the sweep acts once it
        is gone. ``when`` is the wall-clock time of the record (default: now). ``path``: a
        directory the tagged processes own, removed with them.

        Raises:
            StoreError: They could not be recorded (none is).
        """
        wanted = list(tags)
        if not wanted:
            return []
        stamp = when if when is not None else time.time()
        return self._transaction(
            lambda conn: _sql.insert_tags(
                conn, wanted, session_id, owner_pid, owner_start, boot_id, stamp, path
            )
        )

    def forget_tags(self, rows: Iterable[TagRow]) -> None:
        """Forget tag records whose processes are reaped (committed with the next batch)."""
        ids = [r.id for r in rows]
        for start in range(0, len(ids), 500):  # stay far below SQLite's variable limit
            chunk = ids[start : start + 500]
            self.write(f"DELETE FROM tags WHERE id IN ({','.join('?' * len(chunk))})", chunk)

    def list_tags(self, session_id: str | None = None) -> list[TagRow]:
        """Return the recorded tags, oldest first: every session's, or one session's."""
        if session_id is None:
            rows = self._query("SELECT * FROM tags ORDER BY id")
        else:
            rows = self._query("SELECT * FROM tags WHERE session_id = ? ORDER BY id", (session_id,))
        return [TagRow(**dict(r)) for r in rows]


def _split_sql(script: str) -> list[str]:
    # executescript() would COMMIT our migration transaction; run statements one by one.
    return [s.strip() for s in script.split(";") if s.strip()]
