"""The raw baseline of bench/task_churn.py: the same commits with SQLite and asyncio alone.

What the TaskRuntime writes for one task of the churn, written by the least code that can:

* the task's record (``tasks``, the runtime's upsert, its state as JSON): queued at register
  and again at its end, written once per commit with its latest state (as the runtime's group
  commit coalesces a task updated twice in one loop iteration);
* its notification (a ``mailbox`` row, the runtime's insert), queued at its end;
* the acknowledgement of each drained batch (the runtime's ``UPDATE ... delivered_at``).

Committed as the runtime's store commits: one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``)
of everything queued, scheduled once per loop iteration, and at once before a batch is handed
out and after it is acknowledged; the same pragmas (WAL, ``synchronous = NORMAL``, automatic
checkpoints off, passive ones from a thread of their own). The database is made by taskloom's
own store (its schema and indexes) before the clock starts. The producer and the consumer are
those of the churn: one coroutine registers and ends tasks, yielding every ``burst``; the
other wakes on an event, takes what is pending and acknowledges it.
"""

from __future__ import annotations

import asyncio
import secrets
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from taskloom.store import Store, _sql
from taskloom.tasks.types import ShellTaskState, TaskStatus

_CHECKPOINT_EVERY_COMMITS = 500


class RawStore:
    """A queue of writes committed once per loop iteration, on one connection."""

    def __init__(self, path: Path) -> None:
        Store(path).close()  # taskloom's schema and indexes, made before the clock starts
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA wal_autocheckpoint = 0")
        self.path = path
        self.tasks: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, tuple[Any, ...]]] = []
        self.scheduled = False
        self.commits = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._checkpoints = threading.Thread(target=self._checkpoint_loop, daemon=True)
        self._checkpoints.start()

    def queue_task(self, data: dict[str, Any]) -> None:
        self.tasks[data["id"]] = data
        self._schedule()

    def queue(self, sql: str, params: tuple[Any, ...]) -> None:
        self.writes.append((sql, params))
        self._schedule()

    def _schedule(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if not self.tasks and not self.writes:
            return
        tasks, self.tasks = self.tasks, {}
        writes, self.writes = self.writes, []
        self.conn.execute("BEGIN IMMEDIATE")
        if tasks:
            self.conn.executemany(_sql.UPSERT_TASK, [_sql.task_params(d) for d in tasks.values()])
        for sql, params in writes:
            self.conn.execute(sql, params)
        self.conn.execute("COMMIT")
        self.commits += 1
        if self.commits % _CHECKPOINT_EVERY_COMMITS == 0:
            self._wake.set()

    def _checkpoint_loop(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        while not self._stop.is_set():
            self._wake.wait(2.0)
            self._wake.clear()
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        conn.close()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._checkpoints.join(timeout=10)
        self.conn.close()


def _notification(task_id: str, description: str) -> str:
    """A notification's text, of the runtime's form and length."""
    return (
        f"<task-notification>\n<task-id>{task_id}</task-id>\n<status>completed</status>\n"
        f'<summary>Background command "{description}" completed (exit code 0)</summary>\n'
        "</task-notification>"
    )


async def raw_churn(path: Path, n_tasks: int, burst: int) -> dict[str, Any]:
    """Churn ``n_tasks`` through :class:`RawStore`; the figures of bench/task_churn.py."""
    store = RawStore(path)
    template = ShellTaskState(
        id="", owner="", description="", status=TaskStatus.RUNNING, is_backgrounded=True
    ).to_dict()
    session = "raw-session"
    pending: list[tuple[str, str]] = []  # (mail id, task id): committed, not handed out yet
    wake = asyncio.Event()
    t_update: dict[str, float] = {}
    latencies: list[float] = []
    received: set[str] = set()
    seq = 0

    async def consumer() -> None:
        while len(received) < n_tasks:
            async with asyncio.timeout(60):  # as the mailbox waits: no task in between
                await wake.wait()
            wake.clear()
            store.flush()  # nothing is handed out before it is durable
            batch, pending[:] = list(pending), []
            t1 = time.perf_counter()
            for _, task_id in batch:
                latencies.append(t1 - t_update[task_id])
                received.add(task_id)
            ids = [mail_id for mail_id, _ in batch]
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                store.queue(
                    "UPDATE mailbox SET delivered_at = ? WHERE delivered_at IS NULL AND id IN "
                    f"({','.join('?' * len(chunk))})",
                    (time.time(), *chunk),
                )
            store.flush()  # acknowledged durably

    async def producer() -> None:
        nonlocal seq
        for i in range(n_tasks):
            task_id = f"b{secrets.token_hex(4)}"
            while task_id in t_update:  # unused, as the runtime's new_id makes sure
                task_id = f"b{secrets.token_hex(4)}"
            description = f"bench task {i}"
            now = time.time()
            state = {**template, "id": task_id, "owner": session, "session_id": session}
            state.update(description=description, start_time=now)
            store.queue_task(state)
            t_update[task_id] = time.perf_counter()
            ended = {**state, "status": "completed", "exit_code": 0, "end_time": time.time()}
            ended["notified"] = True
            store.queue_task(ended)
            mail_id = secrets.token_hex(8)
            row = (mail_id, seq, session, session, task_id, "notification", "terminal")
            body = _notification(task_id, description)
            store.queue(_sql.INSERT_MAIL, (*row, "later", body, "", time.time(), ""))
            seq += 1
            pending.append((mail_id, task_id))
            wake.set()
            if (i + 1) % burst == 0:
                await asyncio.sleep(0)

    try:
        start = time.perf_counter()
        consuming = asyncio.create_task(consumer())
        await producer()
        await consuming
        store.flush()
        elapsed = time.perf_counter() - start
    finally:
        store.close()
    return {"elapsed": elapsed, "latencies": latencies, "received": len(received)}


__all__ = ["raw_churn"]
