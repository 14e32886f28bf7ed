"""Small asyncio helpers for cleanup that must not be cut short."""

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
