"""Monitors: long-lived commands whose every new output line is told to their owner.

A monitor is a shell task (``local_bash``) of kind ``monitor``: its output file is read every
:data:`BATCH_S`; the whole lines that appeared since the last read become one notification of
priority ``next`` to its owner (``Monitor "…" printed 2 new lines``, the lines as its
result), until the command ends or is stopped. Its end is told as any shell's, as a monitor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from taskloom.errors import TaskloomError
from taskloom.tasks.notifications import render_notification
from taskloom.tasks.output import read_delta
from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)

#: How often the output is read: the lines of one such window make one notification.
BATCH_S = 0.2
#: Most characters of new lines in one notification (the rest: in the output file).
MAX_CHARS = 4000


async def follow_lines(
    runtime: TaskRuntime, task_id: str, path: str, finished: asyncio.Future[Any]
) -> None:
    """Tell ``task_id``'s owner of each batch of new lines in ``path`` until ``finished``.

    The last, unterminated line is told once the command has ended.
    """
    offset, partial = 0, b""
    while True:
        done = finished.done()  # read after: the last read sees all it wrote
        try:
            chunk, offset = read_delta(path, offset, 1024 * 1024)
            while done and chunk:  # its end: all that is left, not one window of it
                more, offset = read_delta(path, offset, 1024 * 1024)
                if not more:
                    break
                chunk += more
        except (OSError, TaskloomError):
            return  # its file is gone: there is nothing more to tell
        *lines, partial = (partial + chunk).split(b"\n")
        if done and partial:
            lines, partial = [*lines, partial], b""
        if lines and not runtime.closing:
            _tell(runtime, task_id, [line.decode("utf-8", "replace") for line in lines])
        if done or runtime.closing:
            return
        await asyncio.wait([finished], timeout=BATCH_S)


def _tell(runtime: TaskRuntime, task_id: str, lines: list[str]) -> None:
    state = runtime.get(task_id)
    if state is None:
        return
    text = "\n".join(lines)
    if len(text) > MAX_CHARS:
        rest = len(text) - MAX_CHARS
        text = text[:MAX_CHARS] + f"\n[{rest} more characters in {state.output_file}]"
    count = f"{len(lines)} new line{'s' if len(lines) != 1 else ''}"
    note = render_notification(
        task_id=task_id,
        tool_use_id=state.tool_use_id,
        output_file=state.output_file,
        status=state.status.value,
        summary=f'Monitor "{state.description}" printed {count}',
        result=text,
    )
    with contextlib.suppress(TaskloomError):  # a full disk: the lines stay in its file
        runtime.notify(task_id, note, kind="monitor", priority="next")


__all__ = ["BATCH_S", "MAX_CHARS", "follow_lines"]
