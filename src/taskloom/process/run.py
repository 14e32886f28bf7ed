"""Running a short-lived program (git, rg, a tmux client, a hook): recorded, bounded, reaped.

Every program run here:

- is recorded for the orphan sweep before it starts: a fresh tag is committed to the store
  (:func:`~taskloom.process.registry.recorded_tag`) and stamped into its environment as
  ``TASKLOOM_TASK_ID``, so a SIGKILL of taskloom while it runs leaves a record that the next
  session's sweep (or the guard) acts on;
- runs in a session, hence a process group, of its own, its stdin ``/dev/null`` or the bytes
  given;
- has a deadline: at it, and when the caller is cancelled, its tree — its group, its
  descendants, whatever carries its tag — is killed (TERM, a grace period, KILL) and the kill
  verified (:func:`~taskloom.process.kill.kill_tree`);
- after a normal exit, whatever still carries its tag (a daemon a git hook started, ``setsid``
  and pipes closed) is killed the same way: a short-lived program leaves nothing running;
- has its stdout and stderr captured up to a cap each. Past the cap bytes are still read and
  dropped, so the program never blocks on a full pipe; with ``stop_at_cap`` (a search, whose
  first bytes are enough) it is stopped there instead. The result says what was cut.

Its exit is told apart from its pipes closing (``asyncio.subprocess.Process.wait`` waits for
both): a child that holds stdout open does not make the program look alive.

A kill that cannot be verified keeps the record, so the next sweep tries again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from taskloom._aio import finish_despite_cancel
from taskloom._dataclass import dataclass
from taskloom.errors import ProcessError, clipped
from taskloom.process.kill import kill_tree
from taskloom.process.registry import TagRecord, recorded_tag
from taskloom.process.spawn import TASK_ENV

log = logging.getLogger(__name__)

#: Bytes of stdout, and separately of stderr, kept unless the caller says otherwise.
DEFAULT_CAPTURE_BYTES = 16 << 20
#: Seconds between SIGTERM and SIGKILL when a program's tree is killed.
KILL_GRACE_S = 1.0
# After the program exits (or is killed), how long its pipes may stay open: long enough for
# buffered output to arrive, short enough that a child holding them does not stall the caller.
_DRAIN_S = 0.5


class FirstLine:
    """Told a program's first line of stdout as it comes; may move the program's deadline.

    A hook says on its first line whether it goes on in the background (``{"async": true}``):
    its caller then stops waiting for it, and gives it the time it asked for.

    Create it inside the running event loop.
    """

    def __init__(self) -> None:
        """Nothing seen yet."""
        #: The first line (without its newline), or all of stdout kept when it ended without
        #: one.
        self.line: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._deadline: asyncio.Timeout | None = None
        self._moved_to: float | None = None

    def bind(self, deadline: asyncio.Timeout) -> None:
        """The program's deadline, which :meth:`extend` moves (also if it was asked before)."""
        self._deadline = deadline
        if self._moved_to is not None:
            deadline.reschedule(self._moved_to)

    def extend(self, seconds: float) -> None:
        """Let the program run ``seconds`` from now, instead of its first deadline."""
        # The first line can come while the program is still being started, before its
        # deadline is set: the move is then kept for it.
        self._moved_to = asyncio.get_running_loop().time() + seconds
        if self._deadline is not None and not self._deadline.expired():
            self._deadline.reschedule(self._moved_to)

    def seen(self, kept: bytearray, ended: bool) -> None:
        """Stdout so far is ``kept`` (``ended``: no more comes); resolve :attr:`line` once."""
        if self.line.done():
            return
        end = kept.find(b"\n")
        if end >= 0:
            self.line.set_result(bytes(kept[:end]))
        elif ended:
            self.line.set_result(bytes(kept))


@dataclass(frozen=True, slots=True)
class ProgramResult:
    """How a program ended and what it wrote.

    Attributes:
        argv: The command line.
        exit_code: Its exit status (negative: killed by that signal); None if it could not be
            reaped within the bound.
        stdout: Its standard output, at most the cap.
        stderr: Its standard error, at most the cap.
        stdout_dropped: Bytes of stdout read past the cap and dropped.
        stderr_dropped: Bytes of stderr read past the cap and dropped.
        stopped_at_cap: Its stdout passed the cap and it was stopped there (``stop_at_cap``).
        duration: Seconds from its start to the end of its tree.
        survivors: Pids of its tree still alive after the kill (empty when verified).
    """

    argv: tuple[str, ...]
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    stopped_at_cap: bool = False
    duration: float = 0.0
    survivors: tuple[int, ...] = ()

    @property
    def cut(self) -> bool:
        """Whether any output was left out (dropped past a cap, or the program stopped)."""
        return bool(self.stdout_dropped or self.stderr_dropped or self.stopped_at_cap)

    def out_text(self) -> str:
        """The stdout decoded, with a note on a line of its own at its end when it was cut."""
        note = _note(self.stdout, self.stdout_dropped, self.stopped_at_cap)
        return self.stdout.decode(errors="replace") + (f"\n[{note}]" if note else "")

    def err_text(self) -> str:
        """The stderr decoded, with a note on a line of its own at its end when it was cut."""
        note = _note(self.stderr, self.stderr_dropped, False)
        return self.stderr.decode(errors="replace") + (f"\n[{note}]" if note else "")

    def cut_note(self) -> str:
        """One line saying what output was left out ('' when nothing was)."""
        out = _note(self.stdout, self.stdout_dropped, self.stopped_at_cap)
        err = _note(self.stderr, self.stderr_dropped, False)
        return "; ".join([*([f"stdout {out}"] if out else []), *([f"stderr {err}"] if err else [])])


class ProgramError(ProcessError):
    """A program could not be started, or did not end before its deadline.

    The message names the program, its arguments and the reason.

    Attributes:
        argv: The command line.
        reason: Why, in a few words (``timed out after 30 s``, ``cannot start: …``).
        timed_out: It ran past its deadline and was killed.
        result: What it did until then (None when it never started).
    """

    def __init__(
        self,
        argv: Sequence[str],
        reason: str,
        *,
        timed_out: bool = False,
        result: ProgramResult | None = None,
    ) -> None:
        super().__init__(
            f"{shown(argv)}: {reason}",
            exit_code=None if result is None else result.exit_code,
            stderr="" if result is None else result.err_text(),
        )
        self.argv = tuple(argv)
        self.reason = reason
        self.timed_out = timed_out
        self.result = result


def shown(argv: Sequence[str]) -> str:
    """A command line as a message shows it: shell-quoted, the program by its name, clipped."""
    if not argv:
        return "''"
    return clipped(shlex.join([os.path.basename(argv[0]), *argv[1:]]))


async def run_program(
    argv: Sequence[str],
    *,
    timeout: float,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    max_stdout: int = DEFAULT_CAPTURE_BYTES,
    max_stderr: int = DEFAULT_CAPTURE_BYTES,
    stop_at_cap: bool = False,
    tagged: bool = True,
    prefix: str | None = None,
    grace: float = KILL_GRACE_S,
    first_line: FirstLine | None = None,
) -> ProgramResult:
    """Run ``argv`` to its end (see the module docstring); what it did.

    A non-zero exit is not an error here: the result holds the code, for the caller to judge.

    Args:
        argv: The program and its arguments (no shell in between).
        timeout: Seconds it may run before its tree is killed.
        cwd: Its working directory (default: ours).
        env: Its whole environment (default: ours); its tag is added.
        stdin: Bytes for its stdin (default: ``/dev/null``).
        max_stdout: Bytes of stdout kept.
        max_stderr: Bytes of stderr kept.
        stop_at_cap: Stop the program once its stdout passes ``max_stdout``.
        tagged: False for a program that starts something meant to outlive it (a tmux client
            that starts the server): it carries no tag, so it is not recorded, and nothing
            it leaves is killed after its exit; the deadline and cancellation still kill its
            group.
        prefix: What its tag says about it (default: the program's name).
        grace: Seconds between SIGTERM and SIGKILL when its tree is killed.
        first_line: Told its first line of stdout, as soon as it comes; it can move the
            deadline.

    Raises:
        ProgramError: It could not be started, or ran past ``timeout`` (then killed, and
            :attr:`ProgramError.result` holds its output until then).
    """
    if not argv:
        raise ProgramError(argv, "no program given")
    child_env = dict(os.environ if env is None else env)
    limits = _Limits(max_stdout, max_stderr, stop_at_cap, grace, first_line)
    if not tagged:
        # Not even an inherited tag: what it starts must not be swept with its parent.
        child_env.pop(TASK_ENV, None)
        result, timed_out = await _run(argv, timeout, cwd, child_env, stdin, limits, None)
    else:
        with recorded_tag(prefix or os.path.basename(argv[0])) as record:
            child_env[TASK_ENV] = record.tag
            result, timed_out = await _run(argv, timeout, cwd, child_env, stdin, limits, record)
    if timed_out:
        raise ProgramError(argv, f"timed out after {timeout:g} s", timed_out=True, result=result)
    return result


@dataclass(frozen=True, slots=True)
class _Limits:
    max_stdout: int
    max_stderr: int
    stop_at_cap: bool
    grace: float
    first_line: FirstLine | None = None


class _Capture(asyncio.SubprocessProtocol):
    """Collects the output (bounded) and tells apart the program's exit and its pipes closing."""

    def __init__(self, limits: _Limits) -> None:
        loop = asyncio.get_running_loop()
        self.kept = {1: bytearray(), 2: bytearray()}
        self.dropped = {1: 0, 2: 0}
        self.caps = {1: limits.max_stdout, 2: limits.max_stderr}
        self.stop_at_cap = limits.stop_at_cap
        self.first_line = limits.first_line
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()
        #: stdout passed its cap, with ``stop_at_cap``.
        self.full: asyncio.Future[None] = loop.create_future()
        self._open = {1, 2}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        buf = self.kept[fd]
        room = max(self.caps[fd] - len(buf), 0)
        buf += data[:room]
        if fd == 1 and self.first_line is not None:
            self.first_line.seen(buf, ended=len(data) > room)
        if len(data) > room:
            self.dropped[fd] += len(data) - room
            if fd == 1 and self.stop_at_cap and not self.full.done():
                self.full.set_result(None)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if fd == 1 and self.first_line is not None:
            self.first_line.seen(self.kept[1], ended=True)
        if not self._open and not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def _run(
    argv: Sequence[str],
    timeout: float,
    cwd: Path | str | None,
    env: dict[str, str],
    stdin: bytes | None,
    limits: _Limits,
    record: TagRecord | None,
) -> tuple[ProgramResult, bool]:
    """Start the program, wait for its end or deadline, settle its tree; (result, timed out)."""
    started = time.monotonic()
    transport, proto = await _start(argv, cwd, env, stdin, limits, record)
    timed_out = stopped = False
    survivors: list[int] = []
    try:
        if stdin is not None:
            pipe = transport.get_pipe_transport(0)
            assert isinstance(pipe, asyncio.WriteTransport)  # stdin=PIPE
            # The transport buffers what the pipe cannot take yet; a program that never reads
            # its stdin just leaves it there, and a closed pipe is dropped quietly.
            pipe.write(stdin)
            pipe.write_eof()
        try:
            async with asyncio.timeout(timeout) as deadline:
                if limits.first_line is not None:
                    limits.first_line.bind(deadline)
                await asyncio.wait([proto.exited, proto.full], return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            timed_out = True
        stopped = proto.full.done() and not proto.exited.done()
    finally:
        # Also on cancellation: the caller going away must not leave the program running.
        tag = None if record is None else record.tag
        survivors = await finish_despite_cancel(_settle(transport, proto, tag, limits.grace))
        if survivors and record is not None:
            record.keep()
    result = ProgramResult(
        tuple(argv),
        transport.get_returncode(),
        bytes(proto.kept[1]),
        bytes(proto.kept[2]),
        proto.dropped[1],
        proto.dropped[2],
        stopped,
        time.monotonic() - started,
        tuple(survivors),
    )
    return result, timed_out


async def _start(
    argv: Sequence[str],
    cwd: Path | str | None,
    env: dict[str, str],
    stdin: bytes | None,
    limits: _Limits,
    record: TagRecord | None,
) -> tuple[asyncio.SubprocessTransport, _Capture]:
    """Start the program; a cancellation meanwhile lets the start finish, then kills it.

    asyncio's own answer to a cancellation while it connects the pipes is to kill the leader
    alone and wait, unbounded, for the pipes to close: a child the leader had already started
    holds them, and the caller would hang as long as that child lives.
    """
    loop = asyncio.get_running_loop()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _Capture(limits),
            *argv,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    )
    try:
        return await finish_despite_cancel(spawn)
    except asyncio.CancelledError:
        if spawn.done() and not spawn.cancelled() and spawn.exception() is None:
            transport, proto = spawn.result()
            tag = None if record is None else record.tag
            survivors = await finish_despite_cancel(_settle(transport, proto, tag, limits.grace))
            if survivors and record is not None:
                record.keep()
        raise
    except (OSError, ValueError) as exc:  # ValueError: e.g. a NUL byte in an argument
        raise ProgramError(argv, f"cannot start: {exc}") from exc


async def _settle(
    transport: asyncio.SubprocessTransport, proto: _Capture, tag: str | None, grace: float
) -> list[int]:
    """Leave nothing of the program running and its pipes drained; the pids that survived."""
    pid = transport.get_pid()
    survivors: list[int] = []

    async def kill(pgid: int | None) -> None:
        report = await kill_tree(
            pgid, leader=pid if pgid is not None else None, tag=tag, grace=grace
        )
        if not report.verified:
            survivors.extend(report.survivors)
            log.error("program %s (%s): processes survived the kill: %s", pid, tag,
                      report.survivors)  # fmt: skip

    try:
        if not proto.exited.done():  # past its deadline, stopped or cancelled: still ours
            await kill(pid)
            await asyncio.wait([proto.exited], timeout=_DRAIN_S)  # its exit status
        else:
            if tag is None or not _group_alive(pid):  # let buffered output arrive
                await asyncio.wait([proto.drained], timeout=_DRAIN_S)
            if tag is not None:
                # Whatever it started still carries its tag, in its group or not (setsid),
                # holding its pipes or not: it ends with the program.
                await kill(None)
        if not proto.drained.done():
            await asyncio.wait([proto.drained], timeout=_DRAIN_S)
    finally:
        transport.close()
    return survivors


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _size(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.3g} {unit}"
    return f"{n} bytes"


def _note(kept: bytes, dropped: int, stopped: bool) -> str:
    """What was cut of one stream ('' when nothing was)."""
    if stopped:
        return f"output cut at {_size(len(kept))}: the program was stopped there"
    if dropped:
        return f"output cut at {_size(len(kept))}: {_size(dropped)} more were dropped"
    return ""


__all__ = [
    "DEFAULT_CAPTURE_BYTES",
    "KILL_GRACE_S",
    "FirstLine",
    "ProgramError",
    "ProgramResult",
    "run_program",
    "shown",
]
