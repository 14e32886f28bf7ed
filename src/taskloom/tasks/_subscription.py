"""The change stream behind :meth:`TaskRuntime.subscribe`."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Literal

from taskloom._dataclass import dataclass
from taskloom.tasks.types import TaskState

EventKind = Literal["registered", "updated", "evicted"]


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """A change seen by subscribers."""

    kind: EventKind
    state: TaskState


class Subscription:
    """An async stream of :class:`TaskEvent`; bounded, the oldest events are dropped first.

    A slow UI loses intermediate states, never the newest one. ``lagged`` counts drops.
    """

    def __init__(self, maxlen: int, on_close: Callable[[Subscription], None]) -> None:
        self._on_close = on_close
        self._events: deque[TaskEvent] = deque(maxlen=maxlen)
        self._ready = asyncio.Event()
        self.lagged = 0
        self.closed = False

    def push(self, event: TaskEvent) -> None:
        if len(self._events) == self._events.maxlen:
            self.lagged += 1
        self._events.append(event)
        self._ready.set()

    async def get(self, timeout: float | None = None) -> TaskEvent | None:
        """Return the next event, or None on timeout or when closed."""
        try:
            async with asyncio.timeout(timeout):
                while not self._events:
                    if self.closed:
                        return None
                    self._ready.clear()
                    await self._ready.wait()
        except TimeoutError:
            return None
        return self._events.popleft()

    def drain_nowait(self) -> list[TaskEvent]:
        """Take every event already queued, without waiting."""
        events = list(self._events)
        self._events.clear()
        return events

    def close(self) -> None:
        """Stop receiving events."""
        self.closed = True
        self._on_close(self)
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[TaskEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[TaskEvent]:
        while (event := await self.get()) is not None:
            yield event
