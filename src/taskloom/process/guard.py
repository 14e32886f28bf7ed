"""A guard: a small process that sweeps a session's records the moment the session dies.

What a session starts is recorded before it starts, and the next session's start sweeps what a
crashed one left (:mod:`taskloom.process.sweep`). Some of it must not wait that long: the local
Ray of remote agents (its agents live on for a minute once its raylet is killed, and its files
stay) and the remote agents' commands. A guard is started for it: it reads a pipe from the
session, which the kernel closes when the session dies, however it dies. If the session said
``bye`` first, it ended normally and cleaned up itself; otherwise the guard waits for the
session's process to be gone (pid and start time, through a pidfd) and sweeps every record that
process owned (:func:`~taskloom.process.sweep.sweep_orphans` with ``owner_pid``): what carries
their tags is killed, verified, and the directories they own are removed. The records of what
could not be verified gone stay for the next start; the session's tasks are settled there.

The guard carries the tag it is started with (so a guard left behind is swept with the rest),
and never signals itself. It imports nothing heavy until it has work.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import IO

from taskloom.process.identity import process_start_time
from taskloom.process.spawn import TASK_ENV

#: What the session writes before it closes the pipe on a normal end.
BYE = b"bye\n"
#: Longest wait for the session's process to be gone once its pipe has closed.
_GONE_WAIT_S = 10.0


class Guard:
    """The session's side of a guard: started with :meth:`start`, told ``bye`` by :meth:`stop`."""

    def __init__(self, db: Path, tag: str, *, grace: float = 2.0) -> None:
        """Guard the records this process owns in the store at ``db``; the guard carries ``tag``.

        ``grace``: seconds between SIGTERM and SIGKILL in its sweep.
        """
        self.db = db
        self.tag = tag
        self.grace = grace
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, stderr: IO[str] | None = None) -> None:
        """Start the guard (``stderr``: where it says what went wrong; default: nowhere).

        Raises:
            OSError: It could not be started.
        """
        me = os.getpid()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "taskloom.process.guard", "--db", str(self.db),
             "--pid", str(me), "--start", repr(process_start_time(me) or 0.0),
             "--grace", str(self.grace)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=stderr if stderr is not None else subprocess.DEVNULL,
            env={**os.environ, TASK_ENV: self.tag},
            # Its own session: a Ctrl+C at the terminal is the session's to handle, not its.
            start_new_session=True, close_fds=True,
        )  # fmt: skip

    async def stop(self) -> None:
        """The session ends normally: the guard is told so, and exits (waited for, bounded)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.write(BYE)
                proc.stdin.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(proc.wait), 5.0)
        except TimeoutError:
            proc.kill()
            await asyncio.to_thread(proc.wait)


async def _sweep(db: Path, pid: int, start: float, grace: float) -> None:
    from taskloom.process.sweep import sweep_orphans
    from taskloom.process.watch import wait_exit
    from taskloom.store import Store

    with contextlib.suppress(TimeoutError, OSError):
        # Its pipe closes as it exits; its records count as orphaned once it is gone.
        await asyncio.wait_for(wait_exit(pid, start), _GONE_WAIT_S)
    store = Store(db, reserve_bytes=0)
    try:
        await sweep_orphans(store, grace=grace, owner_pid=pid)
    finally:
        store.close()


def main(argv: list[str] | None = None) -> int:
    """Run a guard (see the module docstring); its exit code."""
    parser = argparse.ArgumentParser(prog="python -m taskloom.process.guard")
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--pid", required=True, type=int)
    parser.add_argument("--start", required=True, type=float)
    parser.add_argument("--grace", type=float, default=2.0)
    args = parser.parse_args(argv)
    said = sys.stdin.buffer.read()  # until the session closes it, or dies
    if said.endswith(BYE):
        return 0
    asyncio.run(_sweep(args.db, args.pid, args.start, args.grace))
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["BYE", "Guard", "main"]
