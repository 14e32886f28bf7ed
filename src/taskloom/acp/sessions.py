"""ACP sessions: each one a :class:`~taskloom.harness.Harness`, its turns on the shared driver.

An :class:`AcpSession` serves one ACP session id. Its harness is built from :class:`Options`
as every front end's is, with an observer that streams the main thread's deltas and a prompter
that asks the editor. Its worker waits on the shared next-input loop (the client's prompts
first; once a turn has run, what arrives for the main thread while it is idle — a task's
notification, a message — starts a turn of its own, whose updates stream without a prompt to
answer) and hands each turn to the shared :class:`TurnDriver`. ``session/cancel`` is the
driver's interrupt: the turn ends, the foreground tools it runs are stopped with it (their
processes killed, as an Esc in the REPL), the model is told so next turn, and the prompt
answers ``cancelled``. Background tasks go on: they are tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING

import acp
from acp.helpers import update_current_mode

from taskloom._dataclass import dataclass
from taskloom.acp.updates import AcpObserver, Translator, UpdateSink
from taskloom.conversation.next_input import Held, NextInput, Pending, Prompts
from taskloom.conversation.turn_driver import TurnDriver, TurnEnd
from taskloom.errors import TaskloomError, describe
from taskloom.events import AssistantTurn, Finished
from taskloom.messages import Message
from taskloom.tasks.mailbox import MESSAGES

if TYPE_CHECKING:
    from taskloom.acp.tasks_view import TaskView
    from taskloom.harness import Harness

log = logging.getLogger(__name__)

#: What an idle session takes as a turn of its own: its tasks' notifications, messages.
_WAKES = ("notification", *MESSAGES)

#: The model's stop reasons that are ACP stop reasons of their own.
_STOP_REASONS = {"max_tokens": "max_tokens", "refusal": "refusal"}


@dataclass
class Turn:
    """A prompt waiting for its turn, and the answer to its ``session/prompt``."""

    prompt: str | Message
    answer: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class AcpSession:
    """One ACP session: its harness, its updates and its turns.

    Args:
        session_id: The ACP session id (the taskloom session's id).
        harness: The session, started.
        sink: Where its updates go.
        observer: The engines' observer the harness was built with.
        mode_changed: Told the permission mode whenever a turn changed it.
    """

    def __init__(
        self,
        session_id: str,
        harness: Harness,
        sink: UpdateSink,
        observer: AcpObserver,
        mode_changed: Callable[[str], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.harness = harness
        self.sink = sink
        self.observer = observer
        self.translator = Translator(sink, observer, harness.cwd)
        self.prompts: Prompts[Turn] = Prompts()
        #: Runs the turns one at a time; ``session/cancel`` interrupts the running one.
        self.driver: TurnDriver[str] = TurnDriver()
        self._mode_changed = mode_changed
        self._mode = str(harness.policy.mode)
        self._ran = False
        me, runtime = harness.session_id, harness.runtime
        self.inputs: NextInput[Turn | Message] = NextInput(
            self.prompts,
            Pending(runtime.mailbox, me, _WAKES, when=lambda: self._ran),
            Held(runtime, me, when=lambda: self._ran),
        )
        self._worker: asyncio.Task[None] | None = None
        #: Its tasks as the editor sees them (in-progress tool calls, child sessions).
        self.tasks: TaskView | None = None

    def start(self) -> None:
        """Start taking prompts."""
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._serve())

    async def prompt(self, prompt: str | Message) -> str:
        """Run ``prompt`` once the turns before it have run; the ACP stop reason.

        Raises:
            acp.RequestError: The turn failed (the model's error, a hook's refusal).
        """
        turn = Turn(prompt)
        self.prompts.put(turn)
        return await turn.answer

    def cancel(self) -> bool:
        """End the running turn (``session/cancel``); whether one was running."""
        return self.driver.interrupt()

    def mode_now(self) -> None:
        """Tell the client the permission mode, if it changed since it was last told."""
        mode = str(self.harness.policy.mode)
        if mode != self._mode:
            self._mode = mode
            self.sink.put(update_current_mode(mode))
            if self._mode_changed is not None:
                self._mode_changed(mode)

    async def _serve(self) -> None:
        while True:
            self.harness.session_idle(True)
            item = await self.inputs()
            if item is None:
                return
            turn = item if isinstance(item, Turn) else None
            prompt = item.prompt if isinstance(item, Turn) else item
            self.harness.session_idle(False)
            await self.driver.run(self._turn(prompt), functools.partial(self._ended, turn))

    async def _turn(self, prompt: str | Message) -> str:
        """Run one turn, sending its updates; its stop reason."""
        self._ran = True
        stop = "end_turn"
        events = self.harness.run(prompt)
        try:
            async for event in events:
                self.translator.event(event)
                if isinstance(event, AssistantTurn):
                    stop = _STOP_REASONS.get(event.message.stop_reason or "", "end_turn")
                elif isinstance(event, Finished) and event.reason == "max_turns":
                    stop = "max_turn_requests"
                self.mode_now()
        except asyncio.CancelledError:
            if not self.driver.interrupted():
                raise
            stop = "cancelled"
            with contextlib.suppress(TaskloomError, OSError):
                self.harness.session.recorder.interrupted()
        except Exception:
            with contextlib.suppress(Exception):
                self.harness.session.recorder.repair()
            raise
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()
        self.mode_now()
        await self.sink.drain()  # every update of the turn before its answer
        return stop

    def _ended(self, turn: Turn | None, end: TurnEnd[str]) -> None:
        if turn is None or turn.answer.done():
            if end.error is not None:
                log.warning("a turn of session %s failed: %s", self.session_id, end.error)
            return
        if end.error is not None:
            if not isinstance(end.error, TaskloomError | OSError):
                log.debug("the turn failed", exc_info=end.error)
            turn.answer.set_exception(
                acp.RequestError.internal_error({"details": describe(end.error)})
            )
        elif end.result is not None:
            turn.answer.set_result(end.result)
        elif end.stopped:
            turn.answer.set_exception(
                acp.RequestError.internal_error({"details": "the session closed"})
            )
        else:  # interrupted before it began
            turn.answer.set_result("cancelled")

    async def aclose(self) -> None:
        """Stop the worker (a running turn ends its own way), then the harness."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._worker
        for turn in _drain(self.prompts):
            if not turn.answer.done():
                turn.answer.set_exception(acp.RequestError.internal_error({"details": "closed"}))
        with contextlib.suppress(Exception):
            await self.sink.drain()
        await self.sink.aclose()
        try:
            await self.harness.end()
        finally:
            await self.harness.aclose()
            if self.tasks is not None:  # after the harness: its tasks' ends are told
                await self.tasks.aclose()


def _drain(prompts: Prompts[Turn]) -> list[Turn]:
    left: list[Turn] = []
    while len(prompts):
        item = prompts.take()
        if isinstance(item, Turn):
            left.append(item)
    return left


__all__ = ["AcpSession", "Turn"]
