"""Waiting on task ends: per-task futures woken by the terminal transition, and "any end".

"Any end" counts a task going idle too (a teammate between turns): its owner, waiting while
it worked, must look again. Each such change is numbered (:meth:`EndWaiters.changes`), so that
a waiter that looked before it started waiting misses none that came in between.

The runtime's :meth:`~taskloom.tasks.runtime.TaskRuntime.update` hands the ended state to
:meth:`EndWaiters.take`'s futures itself, so a wait returns with the very state that ended the
task, never a later one, and never misses an end that happened between two polls.
"""

from __future__ import annotations

import asyncio
import threading

from taskloom._aio import first_of
from taskloom.tasks.mailbox import Kinds, Mailbox
from taskloom.tasks.types import TaskState


class EndWaiters:
    """The futures waiting on each task's end, and the event set when any task ends."""

    def __init__(self, lock: threading.RLock) -> None:
        """Guard the table with ``lock`` (the runtime's: ends are taken under it)."""
        self._lock = lock
        self._futures: dict[str, list[asyncio.Future[TaskState]]] = {}
        self._any_ended = asyncio.Event()
        self._changes = 0

    def take(self, task_id: str) -> list[asyncio.Future[TaskState]]:
        """Remove and return the futures waiting on ``task_id`` (to be given its end)."""
        with self._lock:
            return self._futures.pop(task_id, [])

    def signal(self) -> None:
        """Some task has just ended, or gone idle."""
        self._changes += 1
        self._any_ended.set()

    def changes(self) -> int:
        """How many ends (and goings idle) there have been: a waiter's ``since``."""
        return self._changes

    async def wait(self, task_id: str, timeout: float) -> TaskState | None:
        """Wait for ``task_id``'s end; its ended state, or None if ``timeout`` passed first."""
        fut: asyncio.Future[TaskState] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._futures.setdefault(task_id, []).append(fut)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            return None
        finally:
            with self._lock:
                waiting = self._futures.get(task_id)
                if waiting and fut in waiting:
                    waiting.remove(fut)

    async def any_end(self, timeout: float) -> bool:
        """Wait until some task ends; False if none did within ``timeout``."""
        self._any_ended.clear()
        try:
            await asyncio.wait_for(self._any_ended.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def change(
        self,
        timeout: float,
        mailbox: Mailbox,
        owner: str | None,
        kind: Kinds,
        since: int | None = None,
    ) -> None:
        """Wait until ``mailbox`` holds a row (of ``kind``) for ``owner``, a task ends, or timeout.

        ``kind``: one kind, several (a message wakes it as a notification does), or None.
        ``since``: :meth:`changes` when the caller last looked (an end since returns at once).
        """
        if mailbox.has_pending(owner, kind) or (since is not None and since != self._changes):
            return
        self._any_ended.clear()
        await first_of(mailbox.wait(timeout, owner, kind), self._any_ended.wait(), timeout=timeout)
