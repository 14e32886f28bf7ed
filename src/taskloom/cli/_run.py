"""Running a command's coroutine so that termination signals still clean up.

SIGINT, SIGTERM and SIGHUP cancel the main task: ``async with TaskRuntime()`` blocks then
close, which kills the session's commands instead of leaving them to the next session's
orphan sweep.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any


class _Brief(logging.Formatter):
    """The message alone: tracebacks belong to ``--debug``, not to a user's terminal."""

    def formatException(self, ei: Any) -> str:
        return ""

    def formatStack(self, stack_info: str) -> str:
        return ""


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time, not the one seen when installed."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # StreamHandler.__init__ assigns it; the property above decides


def configure_logging(debug: bool) -> None:
    """Show taskloom's log records on stderr: warnings as one line, or all with tracebacks.

    Records still propagate to the root logger, so an embedding program's handlers see them.

    Args:
        debug: ``--debug``: debug records too, with time, logger name and tracebacks.
    """
    logger = logging.getLogger("taskloom")
    handler = _StderrHandler()
    if debug:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.setLevel(logging.DEBUG)
    else:
        handler.setFormatter(_Brief("%(message)s"))
        handler.setLevel(logging.WARNING)
    logger.handlers[:] = [h for h in logger.handlers if not isinstance(h, _StderrHandler)]
    logger.addHandler(handler)


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
            code = await main()
        except asyncio.CancelledError:
            if received:
                return 128 + received[0]
            raise
        # main() may catch the cancellation to report the run as interrupted; the exit code
        # still says which signal ended it.
        return 128 + received[0] if received else code

    try:
        return asyncio.run(guarded())
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
