"""Small asyncio helpers: cleanup that must not be cut short, and the first of several waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def finish_despite_cancel(aw: Awaitable[T], on_cancel: Callable[[], None] | None = None) -> T:
    """Await ``aw`` to the end even if the caller is cancelled meanwhile, then re-raise.

    Cleanup (killing processes, closing a session) runs as its own task, so a cancellation
    aimed at the caller — a second Ctrl-C, a SIGTERM — cannot interrupt it half-way.
    ``on_cancel`` runs on each such cancellation (e.g. to skip an optional wait); the cleanup
    must bound its own duration.
    """
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
            if on_cancel is not None:
                on_cancel()
    if cancelled:
        raise asyncio.CancelledError
    return result


async def first_of(*waits: Awaitable[object], timeout: float | None = None) -> None:
    """Wait until the first of ``waits`` ends (or ``timeout`` passes); the others are cancelled.

    The others are waited for once cancelled, so that each has undone what it set up (a
    mailbox's waiter entry, say) before this returns; what any of them raised is dropped:
    the caller looks again at what it was waiting for.
    """
    futures = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(futures, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
        await asyncio.gather(*futures, return_exceptions=True)
