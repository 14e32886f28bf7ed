"""What a front end runs its next turn on: a prompt, or what arrived for it while idle.

Every front end runs one turn at a time and, between turns, waits for the next thing to run
one on. Each names its sources, in order of precedence, and :class:`NextInput` looks at them
in that order, then waits — on events, not a poll — until one of them has something:

- :class:`Prompts`: what a person typed (the REPL) or a program sent (a stream-json session),
  in the order it came; closed, it ends the input once those queued have run;
- :class:`Pending`: rows waiting in a mailbox — notifications of tasks that ended, messages
  from agents and other sessions. The turn takes them itself (an empty prompt): the engine
  drains them inside the turn, so that an interrupt before they are recorded hands them back
  instead of acknowledging them unseen;
- :class:`Taken`: rows taken from a mailbox at once, their bodies the prompt — a teammate's
  messages and its lead's protocol rows, held until its transcript records them.

Which front end takes what: stream mode its program's prompts, then messages for its session
once its first turn ran; the REPL typed prompts, then its session's notifications and
messages; a teammate its messages and protocol rows, then its own tasks' notifications.
Every message still arrives through the mailbox: nothing here is a second way to send one.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from taskloom._aio import first_of
from taskloom.messages import Message

if TYPE_CHECKING:
    from taskloom.tasks.mailbox import Kinds, Letter, Mailbox

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: How long an idle front end waits before it looks at its sources again. A bound, not a
#: poll: whatever arrives wakes it at once.
IDLE_WAIT_S = 3600.0


class _Ended:
    """What :meth:`Prompts.take` returns once the input is closed and drained."""


ENDED = _Ended()


class Source(Protocol[T_co]):
    """One place a turn's input comes from."""

    def take(self) -> T_co | _Ended | None:
        """What to run a turn on now (None: nothing yet; :data:`ENDED`: nothing ever)."""
        ...

    def listening(self) -> bool:
        """Whether to wait on it now (a source that is off wakes nobody)."""
        ...

    async def wait(self, timeout: float) -> object:
        """Return once it may have something (or ``timeout`` passed)."""
        ...


class Prompts(Generic[T]):
    """Prompts in the order they came; one is taken only when its turn starts."""

    def __init__(self) -> None:
        """An open, empty queue."""
        self._items: collections.deque[T] = collections.deque()
        #: Set while there is something to take, or the input has ended.
        self._ready = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        """How many wait for their turn."""
        return len(self._items)

    def put(self, item: T) -> None:
        """Run ``item`` once those before it have run."""
        self._items.append(item)
        self._ready.set()

    def close(self) -> None:
        """No more will come: the input ends once those queued have run."""
        self._closed = True
        self._ready.set()

    def take(self) -> T | _Ended | None:
        """The oldest prompt; :data:`ENDED` once closed and drained; else None."""
        if self._items:
            return self._items.popleft()
        if self._closed:
            return ENDED
        self._ready.clear()
        return None

    def listening(self) -> bool:
        """Always: a prompt can come at any time."""
        return True

    async def wait(self, timeout: float) -> bool:
        """Wait until there is a prompt to take, or the input ended; False on timeout."""
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True


class Pending:
    """Rows of ``kinds`` for ``recipient`` in ``mailbox``: a turn that takes them itself.

    Args:
        mailbox: Where they arrive.
        recipient: Whose they are.
        kinds: Which rows count (one kind, several, or None for all).
        when: Whether they count now (default: always); while not, they neither start a
            turn nor wake the wait.
    """

    def __init__(
        self,
        mailbox: Mailbox,
        recipient: str,
        kinds: Kinds,
        *,
        when: Callable[[], bool] | None = None,
    ) -> None:
        self.mailbox = mailbox
        self.recipient = recipient
        self.kinds = kinds
        self._when = when

    def listening(self) -> bool:
        """Whether they count now."""
        return self._when is None or self._when()

    def take(self) -> Message | None:
        """An empty prompt when rows wait (the engine takes them inside the turn), else None."""
        if self.listening() and self.mailbox.has_pending(self.recipient, self.kinds):
            return Message(role="user", content=[])
        return None

    async def wait(self, timeout: float) -> bool:
        """Wait until a row is pending; False on timeout."""
        return await self.mailbox.wait(timeout, self.recipient, self.kinds)


class Taken:
    """Rows of ``kinds`` for ``recipient`` taken as they are: their bodies are the prompt.

    Args:
        mailbox: Where they arrive.
        recipient: Whose they are.
        kinds: Which rows are taken.
        hold: Given the rows taken, to acknowledge once the transcript records them (and to
            act on protocol rows among them).
    """

    def __init__(
        self,
        mailbox: Mailbox,
        recipient: str,
        kinds: Kinds,
        hold: Callable[[list[Letter]], None],
    ) -> None:
        self.mailbox = mailbox
        self.recipient = recipient
        self.kinds = kinds
        self._hold = hold

    def listening(self) -> bool:
        """Always."""
        return True

    def take(self) -> str | None:
        """The bodies of the rows waiting, in order, a blank line apart; None if none wait."""
        letters = self.mailbox.take(self.recipient, self.kinds)
        if not letters:
            return None
        self._hold(letters)
        return "\n\n".join(letter.body for letter in letters)

    async def wait(self, timeout: float) -> bool:
        """Wait until a row is pending; False on timeout."""
        return await self.mailbox.wait(timeout, self.recipient, self.kinds)


class NextInput(Generic[T]):
    """A front end's sources, in order of precedence; calling it waits for the next input.

    Args:
        sources: Where inputs come from, the first one first.
        idle_wait_s: The bound of one wait before the sources are looked at again.
    """

    def __init__(self, *sources: Source[T], idle_wait_s: float = IDLE_WAIT_S) -> None:
        if not sources:
            raise ValueError("NextInput needs at least one source")
        self.sources = sources
        self.idle_wait_s = idle_wait_s

    def ready(self) -> T | _Ended | None:
        """What the first source that has something has, without waiting (None: nothing)."""
        for source in self.sources:
            item = source.take()
            if item is not None:
                return item
        return None

    async def __call__(self) -> T | None:
        """The next input, once there is one; None once the input has ended."""
        while True:
            item = self.ready()
            if isinstance(item, _Ended):
                return None
            if item is not None:
                return item
            listening = [source for source in self.sources if source.listening()]
            if not listening:
                raise RuntimeError("no source of input is listening: nothing could arrive")
            await first_of(*(s.wait(self.idle_wait_s) for s in listening), timeout=self.idle_wait_s)


__all__ = ["ENDED", "IDLE_WAIT_S", "NextInput", "Pending", "Prompts", "Source", "Taken"]
