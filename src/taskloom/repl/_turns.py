"""The REPL's turns: one at a time, typed prompts in order, and what arrives while idle.

A :class:`Turns` runs the main thread's turns of one session. A prompt typed while a turn runs
waits for it. While the session is idle, a notification (a background task ended) or a
message starts a turn by itself. What a turn says goes to the transcript view; an interrupt
(Esc, Ctrl+C) ends the running turn, and the model is told so in the next one. A
compaction (``/compact``, or the window filling up) is shown in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from taskloom.conversation.next_input import Held, NextInput, Pending, Prompts
from taskloom.conversation.turn_driver import TurnDriver, TurnEnd
from taskloom.errors import TaskloomError, describe
from taskloom.events import AssistantTurn, Compacted, Finished, ToolDone, UserTurn
from taskloom.messages import Message
from taskloom.session import compact_command
from taskloom.tasks.mailbox import MESSAGES

if TYPE_CHECKING:
    from taskloom.harness import Harness
    from taskloom.repl.transcript import TranscriptView

# The REPL's logger: what goes wrong in a turn is the REPL's to report, as before the split.
log = logging.getLogger("taskloom.repl.app")

T = TypeVar("T")

#: After asking for the next input failed, how long until it is asked again: doubled at each
#: failure in a row, up to RETRY_MAX_S. Short, because what the REPL waits on then is only a
#: typed prompt: a notification that arrives meanwhile is seen at the next try.
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 5.0


async def next_input(
    inputs: NextInput[T], prompts: Prompts[Any], failed: Callable[[str], None]
) -> T | None:
    """The next input of ``inputs``, asked again after a short, growing wait while it fails.

    Args:
        inputs: The front end's sources.
        prompts: Its typed prompts: one typed ends a wait before the next try at once.
        failed: Told what went wrong (one line), once for each new error in a row.
    """
    retry, said = RETRY_FIRST_S, None
    while True:
        try:
            return await inputs()
        except Exception as exc:  # the store failed: said, and tried again shortly
            log.debug("waiting for the next prompt failed", exc_info=True)
            text = describe(exc)
            if text != said:  # not once per try: a lasting failure would fill the view
                failed(text)
                said = text
            await prompts.wait(retry)
            retry = min(retry * 2, RETRY_MAX_S)


def compacted_line(event: Compacted) -> str:
    """What the REPL says of a compaction: ``Conversation compacted (N tokens before)``."""
    how = " automatically" if event.trigger == "auto" else ""
    return f"Conversation compacted{how} ({event.pre_tokens:,} tokens before)"


class Turns:
    """The main thread's turns (see the module docstring).

    Args:
        view: Where what a turn says is shown.
        redraw: Asks for the live area to be drawn again.
    """

    def __init__(self, view: TranscriptView, redraw: Callable[[], None]) -> None:
        self.view = view
        self._redraw = redraw
        #: Prompts typed, waiting for their turn (one is taken only when it runs).
        self.prompts: Prompts[str] = Prompts()
        #: Runs the turns, one at a time; Esc and Ctrl+C cut the running one short.
        self.driver: TurnDriver[None] = TurnDriver()

    @property
    def busy(self) -> bool:
        """Whether a turn is running."""
        return self.driver.busy

    @property
    def seconds(self) -> int:
        """How long the running turn has run."""
        return int(time.monotonic() - self.driver.started)

    def queue(self, prompt: str) -> None:
        """Send ``prompt`` once the turns before it have run."""
        self.prompts.put(prompt)

    def interrupt(self) -> bool:
        """Stop the running turn; whether there was one."""
        return self.driver.interrupt()

    async def stop(self) -> None:
        """Cancel the running turn, if any, and wait for it to end."""
        await self.driver.stop()

    async def serve(self, harness: Harness) -> None:
        """Run ``harness``'s turns, one at a time, until cancelled (the session closes).

        While idle, the session's notifications and messages start a turn too: the engine
        takes them inside it, so an interrupt before they are recorded gives them back.
        """
        me = harness.session_id
        inputs: NextInput[str | Message] = NextInput(
            self.prompts,
            Pending(harness.runtime.mailbox, me, ("notification", *MESSAGES)),
            Held(harness.runtime, me),
        )
        while True:
            harness.session_idle(True)  # with autoDream on, a dream starts if it stays so
            prompt = await next_input(
                inputs, self.prompts, lambda text: self.view.note(text, "error")
            )
            assert prompt is not None  # typed prompts never end: the session is closed
            harness.session_idle(False)
            await self.driver.run(self._turn(harness, prompt), self._ended)

    def _ended(self, end: TurnEnd[None]) -> None:
        if end.stopped:
            return  # this worker is stopped (exit, switch): the turn went with it
        if end.cancelled:  # interrupted before it began: nothing was sent
            self.view.note("Interrupted before the prompt was sent.", "warn")
        elif end.error is not None:
            self.view.note(describe(end.error), "error")
        self._redraw()

    async def _turn(self, harness: Harness, prompt: str | Message) -> None:
        if isinstance(prompt, str) and compact_command(prompt) is None:
            self.view.prompt(prompt)  # (``/compact``'s line was shown by the command)
        self._redraw()
        events = harness.run(prompt)
        try:
            async for event in events:
                if isinstance(event, AssistantTurn):
                    self.view.answer(event.message)
                elif isinstance(event, ToolDone):
                    self.view.result(event.call, event.result)
                elif isinstance(event, UserTurn) and event.origin == "messages":
                    self.view.arrived(event.message, bool(event.notifications))
                elif isinstance(event, Compacted):
                    self.view.flush()
                    self.view.note(compacted_line(event))
                elif isinstance(event, Finished) and event.reason == "max_turns":
                    self.view.note("Stopped at the turn limit (--max-turns).", "warn")
                self._redraw()
        except asyncio.CancelledError:
            if not self.driver.interrupted():
                raise
            self.view.flush()
            try:
                harness.session.recorder.interrupted()
            except (TaskloomError, OSError) as exc:
                self.view.note(describe(exc), "error")
            self.view.note("Interrupted by the user: the model is told so next turn.", "warn")
        except Exception as exc:  # shown, not a crash: the session goes on
            if not isinstance(exc, TaskloomError | OSError):
                log.debug("the turn failed", exc_info=True)
            self._failed(harness, describe(exc))
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()
            self.view.flush()

    def _failed(self, harness: Harness, text: str) -> None:
        self.view.flush()
        self.view.note(text, "error")
        with contextlib.suppress(Exception):
            harness.session.recorder.repair()
