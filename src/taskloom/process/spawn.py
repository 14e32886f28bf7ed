"""Spawning shell commands whose output goes straight to a file descriptor.

The child runs in a new session (hence a new process group) so one signal reaches the whole
group, and it carries ``TASKLOOM_TASK_ID`` in its environment: descendants inherit it even
after they leave the group (``setsid``) or are re-parented, which is how a kill or the orphan
sweep finds them. stdout and stderr are the output file itself: bytes go from the child to the
page cache without passing through Python.

stdin is ``/dev/null``: nobody can answer a command, so one that reads input gets end-of-file
at once (``cat``, ``python`` with no script, a ``read`` prompt end) instead of waiting forever.
The new session has no controlling terminal either, so ``/dev/tty`` cannot be opened. A command
that asks anyway (on a terminal of its own, or after printing a question) is reported by the
stall watchdog.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from taskloom.errors import ProcessError, quoted
from taskloom.process.identity import process_start_time

if TYPE_CHECKING:
    from taskloom.process.landlock import Sandbox

TASK_ENV = "TASKLOOM_TASK_ID"
SESSION_ENV = "TASKLOOM_SESSION_ID"


def default_shell() -> str:
    """Return the shell used for commands: bash when installed, else ``/bin/sh``."""
    return shutil.which("bash") or "/bin/sh"


class Child:
    """A spawned process group leader and the means to await its exit.

    Attributes:
        pid: The leader's pid (also the process group id).
        pid_start: The leader's start time, recorded with the pid for the orphan sweep.
        task_id: The task whose tag the process tree carries.
    """

    def __init__(self, popen: subprocess.Popen[bytes], task_id: str) -> None:
        """Wrap a started ``Popen``; use :func:`spawn_shell` instead of calling this."""
        self.popen = popen
        self.pid = popen.pid
        self.pgid = popen.pid  # start_new_session makes the leader its group's id
        self.task_id = task_id
        self.pid_start = process_start_time(self.pid) or 0.0
        self._exited: asyncio.Future[int] | None = None

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: killed by that signal)."""
        return self.popen.returncode

    def wait(self) -> asyncio.Future[int]:
        """Return a future resolved with the exit status; the child is reaped then.

        A pidfd registered with the loop wakes us on exit: no thread, no polling. Kernels
        without pidfd fall back to a waiting thread.
        """
        if self._exited is not None:
            return self._exited
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        self._exited = fut
        if self.popen.returncode is not None:
            fut.set_result(self.popen.returncode)
            return fut
        try:
            pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            task = loop.create_task(asyncio.to_thread(self.popen.wait))
            task.add_done_callback(lambda t: _settle(fut, t))
            return fut

        def on_exit() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            code = self.popen.wait()
            if not fut.done():
                fut.set_result(code)

        loop.add_reader(pidfd, on_exit)
        return fut


def _settle(fut: asyncio.Future[int], task: asyncio.Task[int]) -> None:
    if fut.done():
        return
    if task.cancelled():
        fut.cancel()
    elif (exc := task.exception()) is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(task.result())


def spawn_shell(
    command: str,
    *,
    output_fd: int,
    task_id: str,
    session_id: str = "",
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    shell: str | None = None,
    error_fd: int | None = None,
    prelude: str = "",
    pass_fds: Collection[int] = (),
    sandbox: Sandbox | None = None,
) -> Child:
    """Start ``command`` under a shell in a new session with output bound to ``output_fd``.

    Args:
        command: The command line.
        output_fd: An open, writable descriptor receiving both stdout and stderr.
        task_id: Stamped into the environment as ``TASKLOOM_TASK_ID``.
        session_id: Stamped into the environment as ``TASKLOOM_SESSION_ID``.
        cwd: Working directory (default: ours).
        env: Environment (default: ours); the tags are added to it.
        shell: Shell executable (default: :func:`default_shell`).
        error_fd: The descriptor receiving stderr (default: ``output_fd``). Another open
            description of the same file (``O_APPEND``) keeps the output in order, and its
            offset tells whether anything was written to stderr.
        prelude: Shell code run before ``command``, on its first line (not named in errors).
        pass_fds: Descriptors the child inherits, at the same numbers (a workflow script's
            pipes to its session); every other one is closed in it.
        sandbox: Run it (and all it starts) under this Landlock sandbox: it may write
            nothing but what the sandbox names (:mod:`taskloom.process.landlock`; the caller
            checks :func:`~taskloom.process.landlock.available` first).

    Raises:
        ProcessError: The shell could not be started, or the sandbox not set up.
    """
    child_env = dict(os.environ if env is None else env)
    child_env[TASK_ENV] = task_id
    if session_id:
        child_env[SESSION_ENV] = session_id

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [shell or default_shell(), "-c", prelude + command],
            stdin=subprocess.DEVNULL,
            stdout=output_fd,
            stderr=output_fd if error_fd is None else error_fd,
            cwd=cwd,
            env=child_env,
            start_new_session=True,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )

    try:
        popen = start() if sandbox is None else _start_sandboxed(command, sandbox, start)
    except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL byte in the command
        raise ProcessError(f"cannot start shell for {quoted(command)}: {exc}") from exc
    return Child(popen, task_id)


def _start_sandboxed(
    command: str, sandbox: Sandbox, start: Callable[[], subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    # Imported only here: ctypes is not loaded by sessions that sandbox nothing.
    from taskloom.process.landlock import SandboxError, spawn_sandboxed

    try:
        return spawn_sandboxed(sandbox, start)
    except SandboxError as exc:
        raise ProcessError(f"cannot sandbox {quoted(command)}: {exc}") from exc
