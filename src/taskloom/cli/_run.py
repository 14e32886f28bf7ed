"""Running a command's coroutine so that termination signals still clean up.

SIGINT, SIGTERM and SIGHUP cancel the main task: ``async with TaskRuntime()`` blocks then
close, which kills the session's commands instead of leaving them to the next session's
orphan sweep.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable


def run_main(main: Callable[[], Awaitable[int]]) -> int:
    """Run ``main()`` on a fresh loop; returns its exit code (128 + N after signal N)."""
    received: list[int] = []

    async def guarded() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None

        def on_signal(signum: int) -> None:
            received.append(signum)
            task.cancel()

        # SIGINT too: left to asyncio, a second Ctrl-C raises KeyboardInterrupt in the middle
        # of cleanup; here every signal only asks the main task to cancel, and cleanup runs
        # to its end (see finish_despite_cancel).
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            return await main()
        except asyncio.CancelledError:
            if received:
                return 128 + received[0]
            raise

    try:
        return asyncio.run(guarded())
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
