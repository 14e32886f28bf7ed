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

Which front end takes what: stream mode its program's prompts, then its session's
notifications and messages once its first turn ran; the REPL typed prompts, then its session's
notifications and messages; a teammate its messages and protocol rows, then its own tasks'
notifications. Every message still arrives through the mailbox: nothing here is a second way to
send one.

An input that ends (its prompts closed and run) may still have to wait for what the session
itself started: ``until`` (:class:`OwnWork`) says whether that has settled, and until it has,
the other sources still start turns. A stream-json session whose program closed its input thus
lives on while its background tasks run, and each of their notifications starts a turn.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from taskloom._aio import first_of
from taskloom.messages import Message
from taskloom.tasks.mailbox import HELD, MESSAGES
from taskloom.tasks.owner_wait import OwnerWait, held_due
from taskloom.tasks.wait_bound import WaitBound, task_wait_seconds

if TYPE_CHECKING:
    from taskloom.tasks.mailbox import Kinds, Letter, Mailbox
    from taskloom.tasks.runtime import TaskRuntime

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

    @property
    def closed(self) -> bool:
        """Whether the input has ended (those queued may still wait for their turn)."""
        return self._closed

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


class Held:
    """A recipient's held rows (idle notices): a turn once they are due (its team idle).

    Held rows wake nobody while a teammate works: they go with the owner's next turn (see
    :mod:`taskloom.conversation.held`). Once every teammate is idle or ended, rows still held
    start a turn, so that a lead waiting for its team is told, whatever its own commands or
    background agents are doing (see :func:`~taskloom.tasks.owner_wait.held_due`).

    Args:
        runtime: The session's tasks and mailbox.
        owner: Whose rows and team (the main thread: the session id).
        when: Whether they count now (default: always).
    """

    def __init__(
        self, runtime: TaskRuntime, owner: str, *, when: Callable[[], bool] | None = None
    ) -> None:
        self.runtime = runtime
        self.owner = owner
        self._when = when
        self._since = runtime.changes()

    def listening(self) -> bool:
        """Whether they count now."""
        return self._when is None or self._when()

    def take(self) -> Message | None:
        """An empty prompt when held rows are due; else None."""
        self._since = self.runtime.changes()  # a task going idle after this look wakes the wait
        if not self.listening() or not held_due(self.runtime, self.owner):
            return None
        return Message(role="user", content=[])

    async def wait(self, timeout: float) -> None:
        """Wait for a held row, or, with rows held already, for a task to end or go idle.

        Held rows become due only by a change (a teammate going idle or ending): with some
        held, waiting for rows would return at once, and the wait would spin.
        """
        if self.runtime.mailbox.has_pending(self.owner, HELD):
            await self.runtime.wait_for_change(timeout, self.owner, since=self._since)
        else:
            await self.runtime.mailbox.wait(timeout, self.owner, HELD)


class Settling(Protocol):
    """What an ended input still waits for before it ends (see :class:`OwnWork`)."""

    def settled(self) -> bool:
        """Whether nothing is left to wait for: the input may end."""
        ...

    async def wait(self, timeout: float) -> object:
        """Return once it may have settled (or ``timeout`` passed)."""
        ...


class OwnWork:
    """An owner's own work under way: its live tasks, and rows waiting for it.

    What a stream-json session still waits for once its program closed its input, as a ``-p``
    run waits for its tasks: nothing has settled while a task the owner started works (not
    detached) or a notification or message waits for it. A task with no end of its own (a
    server, ``tail -f``) is waited for at most ``taskWaitSeconds`` in all, then stopped: its
    notification starts the last turn (see :mod:`taskloom.tasks.wait_bound`).

    Args:
        runtime: The session's tasks and mailbox.
        owner: Whose work it is (the main thread: the session id).
        settings: The session's settings (``taskWaitSeconds``, ``notificationBatchMs``).
        when: Whether the work counts now (default: always); while not, it has settled.
    """

    def __init__(
        self,
        runtime: TaskRuntime,
        owner: str,
        settings: dict[str, object],
        *,
        when: Callable[[], bool] | None = None,
    ) -> None:
        self.runtime = runtime
        self.owner = owner
        self._when = when
        self._waiting = OwnerWait(runtime, owner, dict(settings), listens=True)
        self._bound = WaitBound(runtime, owner, task_wait_seconds(settings))
        self._since: int | None = None

    def settled(self) -> bool:
        """Whether no task of the owner works and nothing waits for it (held rows included)."""
        self._since = self.runtime.changes()  # an end after this look ends the next wait
        if self._when is not None and not self._when():
            return True
        pending = self.runtime.mailbox.has_pending(self.owner, ("notification", *MESSAGES, *HELD))
        return not pending and not self._waiting.must_wait()

    async def wait(self, timeout: float) -> None:
        """Wait until a task ends or a row arrives for the owner; tasks bounded meanwhile.

        Only the time spent here counts against a task's bound: not the turns it starts.
        """
        self._bound.arm()
        try:
            await self.runtime.wait_for_change(
                timeout, self.owner, messages=True, since=self._since
            )
        finally:
            self._bound.pause()


class NextInput(Generic[T]):
    """A front end's sources, in order of precedence; calling it waits for the next input.

    Args:
        sources: Where inputs come from, the first one first.
        idle_wait_s: The bound of one wait before the sources are looked at again.
        until: Once a source has ended, the input ends only when this has settled; until
            then the other sources are still taken from (None: it ends at once).
    """

    def __init__(
        self, *sources: Source[T], idle_wait_s: float = IDLE_WAIT_S, until: Settling | None = None
    ) -> None:
        if not sources:
            raise ValueError("NextInput needs at least one source")
        self.sources = sources
        self.idle_wait_s = idle_wait_s
        self.until = until
        #: The sources that have ended: never waited on again.
        self._ended: list[Source[T]] = []

    def ready(self) -> T | _Ended | None:
        """What the first source that has something has, without waiting (None: nothing).

        :data:`ENDED` when a source has ended and, with ``until``, no other has anything.
        """
        ended = False
        for source in self.sources:
            item = source.take()
            if isinstance(item, _Ended):
                if self.until is None:
                    return item
                if not any(source is s for s in self._ended):
                    self._ended.append(source)
                ended = True
            elif item is not None:
                return item
        return ENDED if ended else None

    async def __call__(self) -> T | None:
        """The next input, once there is one; None once the input has ended."""
        while True:
            item = self.ready()
            ended = isinstance(item, _Ended)
            if isinstance(item, _Ended):
                if self.until is None or self.until.settled():
                    return None
            elif item is not None:
                return item
            waits = [
                s.wait(self.idle_wait_s)
                for s in self.sources
                if s.listening() and not any(s is e for e in self._ended)
            ]
            if ended and self.until is not None:
                waits.append(self.until.wait(self.idle_wait_s))
            if not waits:
                raise RuntimeError("no source of input is listening: nothing could arrive")
            await first_of(*waits, timeout=self.idle_wait_s)


__all__ = [
    "ENDED",
    "IDLE_WAIT_S",
    "Held",
    "NextInput",
    "OwnWork",
    "Pending",
    "Prompts",
    "Settling",
    "Source",
    "Taken",
]
