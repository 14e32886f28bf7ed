"""One watchdog for every kind of task: stalls, deadlines and per-tick checks.

A watch names a progress probe (output size for a shell; model and tool events for an agent).
On each tick the watchdog compares it with the last reading. When it has not grown for
``stall_after`` seconds, ``on_stall`` runs once for that stall episode (progress starts a new
one); if ``kill_after_stall`` is set and there is still no progress that much later, ``kill``
runs. When ``deadline`` passes, ``on_deadline`` runs once. ``on_tick`` runs every tick (the
output-cap check). All timing goes through a :class:`~taskloom.clock.Clock`, so tests drive it
with a fake clock.

A single loop serves every watch; it runs only while there is something to watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import field

from taskloom._dataclass import dataclass
from taskloom.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

#: Seconds between stall checks of a shell.
STALL_CHECK_INTERVAL_S = 5.0
#: Seconds without output growth before a shell counts as stalled.
STALL_THRESHOLD_S = 45.0
#: How much of the output's end is inspected for a prompt.
STALL_TAIL_BYTES = 1024

PROMPT_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\(y/n\)",
        r"\[y/n\]",
        r"\(yes/no\)",
        r"\b(?:Do you|Would you|Shall I|Are you sure|Ready to)\b.*\?\s*$",
        r"Press (?:any key|Enter)",
        r"Continue\?",
        r"Overwrite\?",
    )
)

Action = Callable[[], Awaitable[None] | None]


def looks_like_prompt(tail: str) -> bool:
    """Tell whether the end of some output looks like a question waiting for an answer."""
    # A prompt is at the very end; look at the last few non-blank lines only.
    lines = [line for line in tail.splitlines() if line.strip()][-3:]
    text = "\n".join(lines)
    return any(p.search(text) for p in PROMPT_PATTERNS)


@dataclass
class Watch:
    """What to watch for one task; see the module docstring."""

    task_id: str
    probe: Callable[[], int] | None = None
    stall_after: float | None = STALL_THRESHOLD_S
    check_every: float = STALL_CHECK_INTERVAL_S
    on_stall: Action | None = None
    kill_after_stall: float | None = None
    deadline: float | None = None
    on_deadline: Action | None = None
    on_tick: Action | None = None
    kill: Action | None = None
    # Running state, owned by the watchdog.
    last_value: int = -1
    last_growth: float = 0.0
    last_check: float = float("-inf")
    stall_reported_at: float | None = None
    deadline_fired: bool = False
    killed: bool = False
    _done: bool = field(default=False, repr=False)


class Watchdog:
    """Runs every :class:`Watch` on one loop ticking every ``tick`` seconds."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, tick: float = 1.0) -> None:
        """Create an idle watchdog; it starts its loop with the first watch."""
        self.clock = clock
        self.tick = tick
        self._watches: dict[str, Watch] = {}
        self._loop_task: asyncio.Task[None] | None = None

    def watch(self, watch: Watch) -> Callable[[], None]:
        """Start watching; returns a function that stops this watch."""
        now = self.clock.monotonic()
        watch.last_growth = now
        self._watches[watch.task_id] = watch
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

        def stop() -> None:
            watch._done = True
            if self._watches.get(watch.task_id) is watch:
                del self._watches[watch.task_id]

        return stop

    @property
    def watching(self) -> list[str]:
        """Ids of the tasks being watched."""
        return list(self._watches)

    async def _run(self) -> None:
        while self._watches:
            await self.clock.sleep(self.tick)
            for watch in list(self._watches.values()):
                if watch._done:
                    continue
                try:
                    await self.check(watch)
                except Exception:  # a broken probe must not stop the other watches
                    log.exception("watchdog check failed for task %s", watch.task_id)

    async def check(self, watch: Watch) -> None:
        """Run one round of checks on ``watch`` now."""
        now = self.clock.monotonic()
        if watch.on_tick is not None:
            await _call(watch.on_tick)
            if watch._done:  # the tick ended the task
                return
        if watch.deadline is not None and not watch.deadline_fired and now >= watch.deadline:
            watch.deadline_fired = True
            await _call(watch.on_deadline or watch.kill)
        if watch.probe is None or watch.stall_after is None:
            return
        if now - watch.last_check < watch.check_every:
            return
        watch.last_check = now
        value = watch.probe()
        if value != watch.last_value:
            watch.last_value = value
            watch.last_growth = now
            watch.stall_reported_at = None
            return
        if now - watch.last_growth < watch.stall_after:
            return
        if watch.stall_reported_at is None:
            watch.stall_reported_at = now
            if watch.on_stall is not None:
                await _call(watch.on_stall)
        elif (
            watch.kill_after_stall is not None
            and not watch.killed
            and now - watch.stall_reported_at >= watch.kill_after_stall
        ):
            watch.killed = True
            await _call(watch.kill)

    async def close(self) -> None:
        """Stop every watch and the loop."""
        self._watches.clear()
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task


async def _call(action: Action | None) -> None:
    if action is None:
        return
    result = action()
    if inspect.isawaitable(result):
        await result
