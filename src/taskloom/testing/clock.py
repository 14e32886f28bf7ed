"""A fake clock whose time moves only when a test says so."""

from __future__ import annotations

import asyncio
import heapq
import itertools


class FakeClock:
    """A :class:`taskloom.clock.Clock` driven by :meth:`advance`.

    Sleepers wake in deadline order when time is advanced past their deadline. ``advance``
    is a coroutine: after waking sleepers it yields to the loop so they run before it returns.

    Example:
        >>> clock = FakeClock()
        >>> # in a test: task = asyncio.create_task(clock.sleep(5)); await clock.advance(5)
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        """Start at wall time ``start`` (monotonic time starts at 0)."""
        self._wall0 = start
        self._now = 0.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._parked: asyncio.Event | None = None

    def time(self) -> float:
        """Fake seconds since the epoch."""
        return self._wall0 + self._now

    def monotonic(self) -> float:
        """Fake monotonic seconds."""
        return self._now

    @property
    def sleepers(self) -> int:
        """How many sleeps are pending (useful to wait until a loop has parked)."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has been advanced by ``seconds``."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        if self._parked is not None:
            self._parked.set()
        await fut

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking due sleepers in order and letting each run."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            await _settle()
        self._now = target
        await _settle()

    async def wait_for_sleepers(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait (really) until at least ``count`` coroutines are parked in :meth:`sleep`."""
        async with asyncio.timeout(timeout):
            while self.sleepers < count:
                self._parked = self._parked or asyncio.Event()
                self._parked.clear()
                await self._parked.wait()


async def _settle(rounds: int = 20) -> None:
    # Several bare yields let a woken coroutine run through its await chain.
    for _ in range(rounds):
        await asyncio.sleep(0)
