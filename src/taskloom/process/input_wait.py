"""Whether a command waits for input that nobody will give.

Commands read ``/dev/null`` (see :mod:`taskloom.process.spawn`), so reading their standard
input ends at once. One can still wait for an answer: a process that made a terminal of its own
(``script``, ``expect``, a pty) and reads it, or one whose standard input is a pipe that no
process of its own command writes. Such a process prints nothing while it waits, so the stall
watchdog cannot tell it by a question at the end of the output; it asks here.

Linux only: the kernel tells, in ``/proc/PID/syscall``, which call a sleeping process is
blocked in and on which descriptor. Elsewhere (or where that file may not be read) nothing is
found.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterable

#: The read calls, by machine: read, pread64 and readv.
_READ_CALLS = {"x86_64": {0, 17, 19}, "aarch64": {63, 65, 67}}

#: Write access in an ``fdinfo`` flags field (O_WRONLY or O_RDWR).
_WRITE_FLAGS = 0o3


def waiting_for_input(pids: Iterable[int]) -> str | None:
    """A line saying which of ``pids`` is blocked reading input nobody in them gives, if any.

    Args:
        pids: The live processes of one command (its whole tree).

    Returns:
        For example ``process 4242 (cat) is blocked reading its terminal (/dev/pts/3)``, or
        None when none is.
    """
    calls = _READ_CALLS.get(platform.machine())
    if calls is None:
        return None
    members = list(pids)
    for pid in members:
        source = _blocked_read_source(pid, calls)
        if source is None:
            continue
        if source.startswith(("/dev/pts/", "/dev/tty")):
            return f"process {pid} ({_name(pid)}) is blocked reading its terminal ({source})"
        if source.startswith("pipe:") and not any(_writes(p, source) for p in members):
            return (
                f"process {pid} ({_name(pid)}) is blocked reading its standard input, a pipe "
                "that no process of this command writes"
            )
    return None


def _blocked_read_source(pid: int, calls: set[int]) -> str | None:
    """What ``pid`` is blocked reading as its standard input (fd 0), if it is."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
        if len(fields) < 2 or not fields[0].isdigit() or int(fields[0]) not in calls:
            return None  # running, or in another call
        if int(fields[1], 16) != 0:
            return None  # reading another descriptor
        return os.readlink(f"/proc/{pid}/fd/0")
    except (OSError, ValueError):
        return None  # gone, or not ours to inspect


def _writes(pid: int, pipe: str) -> bool:
    """Whether ``pid`` holds the write end of ``pipe`` (``pipe:[inode]``)."""
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") != pipe:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    for line in f:
                        if line.startswith("flags:"):
                            if int(line.split()[1], 8) & _WRITE_FLAGS:
                                return True
                            break
    return False


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"
