"""An owner's wait at the end of its turn: for its tasks at work, and what they deliver.

With ``wait_for_tasks`` an agent's run does not end while a task it owns still works or a
notification for it is undelivered: at the end of a turn it waits for the next delivery (or a
message sent to it), then goes on with a new turn. Tasks that end together are delivered in
one message, not one turn each; a task with no end of its own is waited for only so long
(:mod:`taskloom.tasks.wait_bound`); and a stopped owner (its budget ran out) stops waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from taskloom.tasks.kinds import kind_of
from taskloom.tasks.mailbox import MESSAGES
from taskloom.tasks.notifications import Notification
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskState
from taskloom.tasks.wait_bound import WaitBound, task_wait_seconds

#: How long one wait for a notification lasts before the loop looks again.
_NOTIFICATION_POLL_S = 30.0
#: After a first notification, how long (ms) to wait for others still arriving: tasks that
#: end together are delivered in one message, not one turn each. Setting notificationBatchMs.
#: A quiet window (it restarts at each end): ends that come together are a few ms apart, and
#: a longer one only delays every notification that arrives while other tasks run.
DEFAULT_BATCH_WINDOW_MS = 25


class OwnerWait:
    """What one owner waits for at the end of its turn, and the wait itself."""

    def __init__(
        self, runtime: TaskRuntime, owner: str, settings: dict[str, Any], *, listens: bool
    ) -> None:
        """Wait for ``owner``'s tasks; with ``listens``, a message sent to it wakes it too."""
        self.runtime = runtime
        self.owner = owner
        self.settings = settings
        self.listens = listens
        self._stop = asyncio.Event()
        #: How long it waits for its tasks that have no end of their own (armed once waiting).
        self._bound: WaitBound | None = None

    def stop(self) -> None:
        """Stop waiting, now and from now on (the owner's budget ran out)."""
        self._stop.set()

    def resume(self) -> None:
        """Wait again (a new run of an owner that was stopped)."""
        self._stop = asyncio.Event()

    def live_tasks(self) -> bool:
        """Whether a task of the owner (not detached) still works."""
        return any(
            not s.terminal and s.exit_policy != "detach" and self._at_work(s)
            for s in self.runtime.list(owner=self.owner)
        )

    def _at_work(self, state: TaskState) -> bool:
        """A live task works while its kind says so, or while it owns work of its own.

        An idle teammate with a background command running (or its notice not yet taken)
        will wake for it: the run must not end under it.
        """
        if kind_of(state).busy(state) or self.runtime.notifications.has_pending(state.id):
            return True
        return any(
            not child.terminal and child.exit_policy != "detach"
            for child in self.runtime.list(owner=state.id)
        )

    def must_wait(self) -> bool:
        """Whether the owner may not end yet: a task of it works, or a notification waits."""
        return self.live_tasks() or self.runtime.notifications.has_pending(self.owner)

    async def next_delivery(self) -> list[Notification]:
        """Wait while the owner must; the notifications to deliver then.

        Empty when nothing is left to wait for, when it was stopped, or when a message sent to
        it (``listens``) woke it without a notification.
        """
        owner, listens = self.owner, self.listens
        if self._bound is None:
            self._bound = WaitBound(self.runtime, owner, task_wait_seconds(self.settings))
        try:  # only the time spent waiting counts against a command's bound
            while True:
                # Counted before looking: a task that ends (or goes idle) after the look, and
                # before the wait starts, ends the wait at once.
                since = self.runtime.changes()
                if not self.must_wait() or self._stop.is_set():
                    break
                self._bound.arm()  # a command that may run forever is waited for so long only
                # A message sent to it wakes it too: it sees it now, not after the next task ends.
                change = self.runtime.wait_for_change(
                    _NOTIFICATION_POLL_S, owner, messages=listens, since=since
                )
                await self._unless_stopped(change)
                if self.runtime.notifications.has_pending(owner):
                    await self._gather_more()
                notes = self.runtime.drain(owner=owner)
                if notes or (listens and self.runtime.mailbox.has_pending(owner, MESSAGES)):
                    return notes
            return []
        finally:
            self._bound.pause()

    async def _unless_stopped(self, waiting: Coroutine[Any, Any, None]) -> None:
        """Wait for ``waiting``, or until the wait is stopped."""
        wait = asyncio.ensure_future(waiting)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait((wait, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            wait.cancel()
            stop.cancel()

    async def _gather_more(self) -> None:
        """Let tasks that end at about the same time join the batch (bounded to 1 s)."""
        window = float(self.settings.get("notificationBatchMs", DEFAULT_BATCH_WINDOW_MS))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(window * 10, 1000) / 1000
        while self.live_tasks() and loop.time() < deadline:
            if not await self.runtime.wait_for_task_end(window / 1000):
                return  # quiet for a whole window: deliver what there is


__all__ = ["DEFAULT_BATCH_WINDOW_MS", "OwnerWait"]
