"""The store's group commit: writes queued, committed together, retried, checkpointed.

Writes from the event loop are queued and committed in one transaction once per loop
iteration (with no loop running, at once); a task record updated several times meanwhile is
written once, built at commit time. A batch that fails is queued again in front of what came
meanwhile and retried every :data:`_RETRY_DELAY_S`: a full disk or a lock held too long is
logged once, in one line, and its end too. A statement that can never succeed is left out and
reported, and the rest of its batch committed. On a full disk a commit gives the reserve back
and tries once more (see ``_disk.py``). The WAL is copied back into the database by a thread
of its own, so that the event loop never waits on the disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from taskloom.errors import StoreError
from taskloom.store import _sql
from taskloom.store._disk import Reserve, describe, is_full

#: How long a statement waits for another process's lock.
BUSY_TIMEOUT_MS = 10_000
_CHECKPOINT_EVERY_COMMITS = 500
_CHECKPOINT_INTERVAL_S = 2.0
_RETRY_DELAY_S = 0.5

# The store's logger, whichever of its modules speaks.
log = logging.getLogger("taskloom.store.db")
#: A statement that can never succeed: a broken constraint, or a value SQLite cannot bind
#: (text with a lone surrogate cannot be encoded; an integer past 64 bits).
_INVALID = (sqlite3.IntegrityError, UnicodeError, OverflowError)
_T = TypeVar("_T")


class GroupCommit:
    """The write queue of one store's connection (see the module docstring).

    Args:
        path: The database file (named in errors; the checkpoints open it too).
        conn: The store's connection, which the batches are committed on.
        lock: The store's lock: whoever calls a ``_locked`` method holds it.
        reserve: The database's reserve, given back when a commit finds the disk full.
    """

    def __init__(
        self, path: Path, conn: sqlite3.Connection, lock: threading.RLock, reserve: Reserve
    ) -> None:
        self.path = path
        self._conn = conn
        self._lock = lock
        self._reserve = reserve
        self._failing = False
        self._pending: list[tuple[str, Sequence[Any]]] = []
        # Task records queued for the next commit, by id: a task updated several times in one
        # loop iteration is serialised and written once.
        self._pending_tasks: dict[str, Callable[[], dict[str, Any]]] = {}
        self._flush_scheduled = False
        self._commits = 0
        self._checkpointer: threading.Thread | None = None
        self._ckpt_wake = threading.Event()
        self._ckpt_stop = threading.Event()

    def write(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Queue a write; it commits with the others at the end of this loop iteration."""
        with self._lock:
            self._pending.append((sql, params))
            if not self._flush_scheduled:  # tested here: a churn writes thrice per task
                self._schedule_locked()

    def write_task(self, task_id: str, make: Callable[[], dict[str, Any]]) -> None:
        """Queue a task record built by ``make()`` at commit time (only the latest is built)."""
        with self._lock:
            self._pending_tasks[task_id] = make
            if not self._flush_scheduled:
                self._schedule_locked()

    def _schedule_locked(self) -> None:
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self.flush_locked()
        else:
            self._flush_scheduled = True
            loop.call_soon(self._scheduled_flush, loop)

    def _scheduled_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            self.flush()
        except StoreError as exc:
            # Nothing was lost (the batch is queued again); try again shortly. A full disk or a
            # lock held too long is expected: one line when it starts, no traceback, no repeats.
            if not self._failing:
                self._failing = True
                if isinstance(exc.__cause__, sqlite3.OperationalError):
                    log.warning("%s; retrying every %gs", exc, _RETRY_DELAY_S)
                else:
                    log.error("store commit failed; retrying", exc_info=exc)
            else:  # for --debug only: the user has been told once
                log.debug("store commit failed again; retrying in %gs", _RETRY_DELAY_S)
            with self._lock:
                self._flush_scheduled = True
            loop.call_later(_RETRY_DELAY_S, self._scheduled_flush, loop)

    def flush(self) -> None:
        """Commit every queued write in one transaction."""
        with self._lock:
            self.flush_locked()

    def flush_locked(self) -> None:
        """:meth:`flush`, the lock held.

        Raises:
            StoreError: The batch failed (it is queued again), or some of its statements can
                never succeed (the others are committed).
        """
        self._flush_scheduled = False
        if not self._pending and not self._pending_tasks:
            return
        batch, self._pending = self._pending, []
        tasks, self._pending_tasks = self._pending_tasks, {}
        try:
            try:
                self.with_reserve(lambda: self._commit(batch, tasks, skip_invalid=False))
            except _INVALID as exc:
                # A statement that can never succeed must not block the rest of the batch
                # forever: commit the others, and report the bad ones.
                rejected = self._commit(batch, tasks, skip_invalid=True)
                raise StoreError(
                    f"store write rejected ({len(rejected)} statement(s)): {exc}"
                ) from exc
        except sqlite3.Error as exc:
            # Put the batch back in front of what was queued meanwhile: a later flush retries.
            self._pending = batch + self._pending
            tasks.update(self._pending_tasks)
            self._pending_tasks = tasks
            raise StoreError(f"store write failed: {describe(self.path, exc)}") from exc
        if self._failing:
            self._failing = False
            log.warning("%s: store writes succeed again", self.path)
        self._commits += 1
        if self._checkpointer is None:
            self._checkpointer = threading.Thread(
                target=self._checkpoint_loop, name="taskloom-checkpoint", daemon=True
            )
            self._checkpointer.start()
        elif self._commits % _CHECKPOINT_EVERY_COMMITS == 0:
            self._ckpt_wake.set()

    def _commit(
        self,
        batch: list[tuple[str, Sequence[Any]]],
        tasks: dict[str, Callable[[], dict[str, Any]]],
        *,
        skip_invalid: bool,
    ) -> list[str]:
        """Run one transaction; returns the statements skipped as invalid."""
        conn = self._conn
        rejected: list[str] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            if tasks:
                conn.executemany(
                    _sql.UPSERT_TASK, [_sql.task_params(make()) for make in tasks.values()]
                )
            for sql, params in batch:
                try:
                    conn.execute(sql, params)
                except _INVALID:
                    if not skip_invalid:
                        raise
                    rejected.append(sql)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return rejected

    def with_reserve(self, op: Callable[[], _T]) -> _T:
        """Run ``op`` (one transaction); if the disk is full, release the reserve and retry."""
        try:
            result = op()
        except sqlite3.OperationalError as exc:
            if not is_full(exc, self.path):
                raise
            if not self._reserve.release():
                raise
            result = op()
        self._reserve.committed()  # makes the reserve again if it is missing
        return result

    def _checkpoint_loop(self) -> None:
        """Copy the WAL back into the database now and then, off the event loop's thread."""
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            seen = 0
            while not self._ckpt_stop.is_set():
                self._ckpt_wake.wait(_CHECKPOINT_INTERVAL_S)
                self._ckpt_wake.clear()
                if self._commits != seen:
                    seen = self._commits
                    # PASSIVE never blocks writers; a busy database is simply tried again later.
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        finally:
            conn.close()

    def stop(self) -> None:
        """End the checkpoints (the store closes): wait for the thread that runs them."""
        self._ckpt_stop.set()
        self._ckpt_wake.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=10)
