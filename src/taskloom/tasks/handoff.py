"""The foreground-to-background hand-off: a caller waits on a task until it ends or is moved.

A foreground call (a Bash command, an Agent call) waits on its task's end. Three things race
with that end: a request to background it (:meth:`TaskRuntime.background`, from a UI or a
tool), the call's timeout, and the cancellation of the caller. :meth:`Handoff.wait` settles the
race the same way for every kind of task: the end wins over a request that came at the same
time; a timeout moves the task to the background (or kills it, if auto-background is off); a
cancelled caller takes its foreground task down with it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass

if TYPE_CHECKING:
    from taskloom.tasks.runtime import TaskRuntime


@dataclass(frozen=True, slots=True)
class ForegroundEnd:
    """How a foreground wait ended.

    Attributes:
        backgrounded: The task runs on in the background; its end will be notified.
        timed_out: The wait's timeout passed (the task was then backgrounded or killed).
    """

    backgrounded: bool
    timed_out: bool = False


class Handoff:
    """The live side's flag that its task was moved to the background, and the wait on it."""

    def __init__(self) -> None:
        """Start in the foreground."""
        self._moved = asyncio.Event()

    @property
    def moved(self) -> bool:
        """Whether the task has been moved to the background."""
        return self._moved.is_set()

    def release(self) -> None:
        """The task moved to the background: a foreground wait on it returns."""
        self._moved.set()

    async def wait(
        self,
        runtime: TaskRuntime,
        task_id: str,
        finished: asyncio.Future[Any],
        timeout: float | None,
        *,
        auto_background: bool = True,
    ) -> ForegroundEnd:
        """Wait until ``finished`` is done, the task is moved, or ``timeout`` passes.

        Args:
            runtime: The runtime holding the task.
            task_id: The task waited on.
            finished: Done when the task's live side has recorded its end.
            timeout: Longest foreground wait in seconds (None: no limit).
            auto_background: At the timeout move the task to the background (True) or kill
                it (False).

        Raises:
            asyncio.CancelledError: The caller was cancelled; the task was killed first.
        """
        moved = asyncio.ensure_future(self._moved.wait())
        try:
            await asyncio.wait(
                {finished, moved}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            # The caller was aborted: its foreground task must not outlive the call.
            await finish_despite_cancel(runtime.kill(task_id))
            raise
        finally:
            moved.cancel()
        if finished.done():
            return ForegroundEnd(backgrounded=False)
        if self._moved.is_set():
            return ForegroundEnd(backgrounded=True)
        if not auto_background:
            await runtime.kill(task_id)
            return ForegroundEnd(backgrounded=False, timed_out=True)
        # Its state may have ended while its live side still cleans up: nothing to move then.
        return ForegroundEnd(backgrounded=runtime.background(task_id), timed_out=True)


__all__ = ["ForegroundEnd", "Handoff"]
