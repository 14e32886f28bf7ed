"""Knowing at once that a process we did not start has ended: a pidfd, read by the event loop.

A lead watches the teammate processes in its panes (children of the tmux server, not its
own), and each teammate watches its lead. ``os.pidfd_open`` gives a descriptor that becomes
readable when the process ends, whoever its parent is: the loop is woken by the kernel, and
nothing polls. The process is named by its pid and start time, so that a pid used again by
another process is never mistaken for it.
"""

from __future__ import annotations

import asyncio
import os

from taskloom.process.identity import process_start_time

#: How far a start time read again may differ from the one recorded (clock ticks round it).
_TOLERANCE_S = 0.05


async def wait_exit(pid: int, start: float | None = None) -> None:
    """Return once the process ``pid`` (started at ``start`` seconds after boot) has ended.

    Returns at once if it is gone already, or if ``pid`` is now another process.

    Raises:
        OSError: The kernel has no pidfds (Linux before 5.3).
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        # Checked after the open: a process that was ours at the open stays ours in the fd.
        actual = process_start_time(pid)
        if actual is None or (start is not None and abs(actual - start) > _TOLERANCE_S):
            return
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not ended.done():
                ended.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await ended
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


__all__ = ["wait_exit"]
