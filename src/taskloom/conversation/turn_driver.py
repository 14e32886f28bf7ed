"""One turn at a time, as a task of its own: shielded from its caller, ended by an interrupt.

A front end's worker waits for its next input and hands each turn to :meth:`TurnDriver.run`.
The turn runs as a task of its own, awaited through a shield, so the two ways it can be cut
short stay apart:

- an **interrupt** (Esc, Ctrl+C, an ``interrupt`` control request) cancels the turn alone:
  its own handler asks :meth:`TurnDriver.interrupted` (or withdraws the cancellation itself),
  records that it was cut short, and returns; the worker goes on to the next input. A second
  interrupt while the first is being handled is refused: it would cut that cleanup short;
- a **stop** of the worker (the session closes, a signal) reaches the turn as a cancellation
  that is not an interrupt; the worker waits for the turn to end its own way, then goes.

Either way the front end hears how the turn ended, once (:class:`TurnEnd`), before the worker
goes on or stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from taskloom._dataclass import dataclass

R = TypeVar("R")


@dataclass(frozen=True)
class TurnEnd(Generic[R]):
    """How a turn ended.

    Attributes:
        result: What the turn returned (None when it raised or was cancelled).
        error: What it raised, if it did.
        cancelled: It ended cancelled, giving no result: interrupted before it began, or
            stopped before its own handler could report it.
        stopped: Its worker was stopped meanwhile (the worker goes too, once told).
    """

    result: R | None = None
    error: BaseException | None = None
    cancelled: bool = False
    stopped: bool = False


def _end_of(turn: asyncio.Task[R], stopped: bool) -> TurnEnd[R]:
    if turn.cancelled():
        return TurnEnd(cancelled=True, stopped=stopped)
    error = turn.exception()
    if error is not None:
        return TurnEnd(error=error, stopped=stopped)
    return TurnEnd(result=turn.result(), stopped=stopped)


class TurnDriver(Generic[R]):
    """Runs a front end's turns one at a time (see the module docstring)."""

    def __init__(self) -> None:
        """No turn yet."""
        #: The running turn, or the last one.
        self.turn: asyncio.Task[R] | None = None
        #: When the running (or last) turn started, on the monotonic clock.
        self.started = 0.0
        self._interrupting = False

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        return self.turn is not None and not self.turn.done()

    def interrupt(self) -> bool:
        """Cut the running turn short; whether there was one to cut (and not being cut)."""
        if not self.busy or self._interrupting:
            return False
        assert self.turn is not None
        self._interrupting = True
        self.turn.cancel()
        return True

    def interrupted(self) -> bool:
        """For the turn's own handler of a cancellation: whether it is an interrupt.

        If so the cancellation is withdrawn, so the turn may record that it was cut short
        (and bounded waits in that cleanup time out as they should) and return. If not, its
        worker is stopping: the turn must let the cancellation go on.
        """
        task = asyncio.current_task()
        if not self._interrupting or task is None or task is not self.turn:
            return False
        task.uncancel()
        return True

    async def run(self, turn: Coroutine[Any, Any, R], finish: Callable[[TurnEnd[R]], None]) -> None:
        """Run ``turn`` to its end, then tell ``finish`` how it ended.

        Raises:
            asyncio.CancelledError: The caller was stopped (after the turn ended, and
                ``finish`` was told).
        """
        task = self.turn = asyncio.get_running_loop().create_task(turn)
        self.started = time.monotonic()
        try:
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                worker = asyncio.current_task()
                if worker is None or not worker.cancelling():
                    pass  # the turn itself was cancelled (interrupted before it began)
                else:
                    # This worker is stopped: the turn goes with it, and ends its own way.
                    if not task.done():
                        task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task  # what it raised is in its end
                    finish(_end_of(task, stopped=True))
                    raise
            except Exception:  # what it raised is in its end, told below
                pass
            finish(_end_of(task, stopped=False))
        finally:
            self._interrupting = False

    async def stop(self) -> None:
        """Cancel the running turn, if any (not an interrupt), and wait for it to end."""
        task = self.turn
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


__all__ = ["TurnDriver", "TurnEnd"]
