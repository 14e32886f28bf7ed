"""Knowing at once that a process we did not start has ended: a pidfd, read by the event loop.

A lead watches the teammate processes in its panes (children of the tmux server, not its
own), and each teammate watches its lead. ``os.pidfd_open`` gives a descriptor that becomes
readable when the process ends, whoever its parent is: the loop is woken by the kernel, and
nothing polls. The process is named by its pid and start time, so that a pid used again by
another process is never mistaken for it.

How it ended is read at that moment from ``/proc/<pid>/stat`` (its ``exit_code`` field, kept
while the process is a zombie its parent has not reaped yet): tmux, the parent of a pane's
command, sometimes leaves its own record of it unset for a long while.
"""

from __future__ import annotations

import asyncio
import os

from taskloom.process.identity import process_start_time, zombie_status

#: How far a start time read again may differ from the one recorded (clock ticks round it).
_TOLERANCE_S = 0.05


async def wait_exit(pid: int, start: float | None = None) -> int | None:
    """Return once the process ``pid`` (started at ``start`` seconds after boot) has ended.

    Returns at once if it is gone already, or if ``pid`` is now another process.

    Returns:
        Its wait status (as :func:`os.waitpid` gives it), when it could be read: the process
        was not reaped yet by its parent. None otherwise.

    Raises:
        OSError: The kernel has no pidfds (Linux before 5.3).
    """
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    try:
        # Checked after the open: a process that was ours at the open stays ours in the fd.
        actual = process_start_time(pid)
        if actual is None or (start is not None and abs(actual - start) > _TOLERANCE_S):
            return zombie_status(pid, start)
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
        return zombie_status(pid, actual)
    finally:
        os.close(fd)


def describe_status(status: int | None) -> str:
    """``exit code 3`` or ``signal 9`` for a wait status; '' for None."""
    if status is None:
        return ""
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    if os.WIFEXITED(status):
        return f"exit code {os.WEXITSTATUS(status)}"
    return ""


__all__ = ["describe_status", "wait_exit"]
