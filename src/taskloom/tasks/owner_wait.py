"""An owner's wait at the end of its turn: for its tasks at work, and what they deliver.

With ``wait_for_tasks`` an agent's run does not end while a task it owns still works or a
notification for it is undelivered: at the end of a turn it waits for the next delivery (or a
message sent to it), then goes on with a new turn. Tasks that end together are delivered in
one message, not one turn each; a task with no end of its own is waited for only so long
(:mod:`taskloom.tasks.wait_bound`); and a stopped owner (its budget ran out) stops waiting.

A lead's held rows (its teammates' idle notices, see :mod:`taskloom.conversation.held`) end
the wait once they are due (:func:`held_due`): whatever its own commands are doing, a lead
waiting for its team is told once the team is idle.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any

from taskloom._aio import first_of
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.mailbox import HELD, MESSAGES
from taskloom.tasks.notifications import Notification
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskState, TaskType
from taskloom.tasks.wait_bound import WaitBound, task_wait_seconds

#: How long one wait for a notification lasts before the loop looks again.
_NOTIFICATION_POLL_S = 30.0
#: After a first notification, how long (ms) to wait for others still arriving: tasks that
#: end together are delivered in one message, not one turn each. Setting notificationBatchMs.
#: A quiet window (it restarts at each end): ends that come together are a few ms apart, and
#: a longer one only delays every notification that arrives while other tasks run.
DEFAULT_BATCH_WINDOW_MS = 25


def team_at_work(runtime: TaskRuntime, owner: str) -> bool:
    """Whether a teammate of ``owner``'s team is at work: in a turn, or about to start one.

    A teammate is about to when a notification waits for it (its command ended): it wakes
    for it. Its own background commands do not count, no more than its lead's do: their ends
    wake it, and its next idle notice says so.
    """
    return any(
        s.type == TaskType.IN_PROCESS_TEAMMATE
        and (kind_of(s).busy(s) or runtime.notifications.has_pending(s.id))
        for s in runtime.live(owner)
    )


def held_due(runtime: TaskRuntime, owner: str) -> bool:
    """Whether ``owner``'s held rows (idle notices) are due: some wait, and its team is idle.

    The one rule for when held rows start a turn of their own (see
    :mod:`taskloom.conversation.held`): once every teammate is idle or ended, whatever
    ``owner``'s other tasks (commands, background agents, monitors) are doing; those tell of
    themselves as they end.
    """
    return runtime.mailbox.has_pending(owner, HELD) and not team_at_work(runtime, owner)


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
        # Only the live ones are read: a main thread that started thousands asks this
        # each time one of them ends.
        return any(
            s.exit_policy != "detach" and self._at_work(s) for s in self.runtime.live(self.owner)
        )

    def _at_work(self, state: TaskState) -> bool:
        """A live task works while its kind says so, or while it owns work of its own.

        An idle teammate with a background command running (or its notice not yet taken)
        will wake for it: the run must not end under it.
        """
        if kind_of(state).busy(state) or self.runtime.notifications.has_pending(state.id):
            return True
        return any(child.exit_policy != "detach" for child in self.runtime.live(state.id))

    def must_wait(self) -> bool:
        """Whether the owner may not end yet: a task of it works, or a notification waits."""
        return self.live_tasks() or self.runtime.notifications.has_pending(self.owner)

    async def next_delivery(self) -> list[Notification]:
        """Wait while the owner must; the notifications to deliver then.

        Empty when nothing is left to wait for, when it was stopped, or when (``listens``) a
        message sent to it, or its held rows falling due, woke it without a notification.
        """
        owner = self.owner
        if self._bound is None:
            self._bound = WaitBound(self.runtime, owner, task_wait_seconds(self.settings))
        try:  # only the time spent waiting counts against a command's bound
            while True:
                # Counted before looking: a task that ends (or goes idle) after the look, and
                # before the wait starts, ends the wait at once.
                since = self.runtime.changes()
                if not self.must_wait() or self._stop.is_set():
                    break
                if not self._told():  # what is due already is handed over with no wait
                    self._bound.arm()  # a command that may run forever is waited for so long
                    await self._unless_stopped(self._change(since))
                if self.runtime.notifications.has_pending(owner):
                    await self._gather_more()
                notes = self.runtime.drain(owner=owner)
                if notes or self._told():
                    return notes
            return []
        finally:
            self._bound.pause()

    def _told(self) -> bool:
        """Whether, listening, something was sent to it: a message, or held rows now due."""
        if not self.listens:
            return False
        mailbox = self.runtime.mailbox
        return mailbox.has_pending(self.owner, MESSAGES) or held_due(self.runtime, self.owner)

    async def _change(self, since: int) -> None:
        """Wait until a task ends or goes idle, a notification comes or (listening) a message.

        A message wakes it now, not after the next task ends. So does a held row while none
        is held: it may come after its sender went idle (a pane teammate's). Once rows are
        held, only a change can make them due: waiting for them would wake it at once.
        """
        owner, mailbox = self.owner, self.runtime.mailbox
        waits: list[Awaitable[object]] = [
            self.runtime.wait_for_change(
                _NOTIFICATION_POLL_S, owner, messages=self.listens, since=since
            )
        ]
        if self.listens and not mailbox.has_pending(owner, HELD):
            waits.append(mailbox.wait(_NOTIFICATION_POLL_S, owner, HELD))
        await first_of(*waits, timeout=_NOTIFICATION_POLL_S)

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


__all__ = ["DEFAULT_BATCH_WINDOW_MS", "OwnerWait", "held_due", "team_at_work"]
