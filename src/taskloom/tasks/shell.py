"""LocalShellTask: shell commands in the foreground, the background, or moved between them.

Four ways into the background: ``run_in_background`` from the start; a foreground
command passing its timeout (with auto-background on; by default it is killed);
:meth:`TaskRuntime.background` while a caller waits on it; and the same from a UI. Moving to
the background never touches the output: the child writes to the output file from the start.

While in the background a command is watched: its output file must stay under the cap, and
when it stops growing for 45 s and its tail looks like a question (``(y/n)``, ``Press Enter``...)
its owner is told, once, that it seems to wait for input.

stdout and stderr go to the same output file, in the order they are written, through two open
descriptions of it (both appending): the offset of stderr's tells whether the command wrote to
stderr at all. With ``track_cwd`` the shell writes the directory it ends in (``pwd -P``) to a
file beside the output when it exits, so a caller can run its next command there.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shlex
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from taskloom._dataclass import dataclass
from taskloom.errors import OutputError, ProcessError
from taskloom.process.identity import boot_id, process_start_time
from taskloom.process.input_wait import waiting_for_input
from taskloom.process.kill import find_tree, kill_tree
from taskloom.process.registry import ProcessRecorder, recorded_tag
from taskloom.process.spawn import Child, spawn_shell
from taskloom.store import ProcessRow
from taskloom.tasks.handoff import Handoff
from taskloom.tasks.notifications import render_notification
from taskloom.tasks.output import DiskTaskOutput, read_tail
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import ExitPolicy, ShellTaskState, TaskStatus, TaskType
from taskloom.tasks.watchdog import (
    STALL_CHECK_INTERVAL_S,
    STALL_TAIL_BYTES,
    STALL_THRESHOLD_S,
    Watch,
    looks_like_prompt,
)

if TYPE_CHECKING:
    from taskloom.process.landlock import Sandbox

log = logging.getLogger(__name__)

#: Default foreground timeout (the Bash tool's default, 2 minutes).
DEFAULT_TIMEOUT_S = 120.0
#: Longest foreground timeout a caller may ask for (the Bash tool's cap, 10 minutes).
MAX_TIMEOUT_S = 600.0
#: How long a command's end waits for its followers' last read (a monitor's last lines).
FOLLOW_GRACE_S = 2.0
#: What a sandboxed command's directory file holds until its shell writes it (no path can).
UNWRITTEN = "\0"
#: Most of the shell's last directory read back: a path is at most 4096 bytes (PATH_MAX).
_CWD_BYTES = 4097


@dataclass(frozen=True, slots=True)
class ShellOutcome:
    """What a caller of :func:`run_shell` gets back.

    Attributes:
        task_id: The task's id (to read its output, wait on it or stop it).
        status: The status when the call returned (``running`` if backgrounded).
        exit_code: The exit status if it ended (128 + N: killed by signal N).
        output_file: Path of the full output.
        backgrounded: Still running in the background; its end will be notified.
        timed_out: The foreground timeout passed (then it was backgrounded or killed).
        stderr_written: Something was written to stderr before the command exited.
        cwd: With ``track_cwd``, the directory the shell ended in (``""``: it no longer
            exists); None when unknown (backgrounded, killed, replaced by ``exec``).
    """

    task_id: str
    status: TaskStatus
    exit_code: int | None
    output_file: str
    backgrounded: bool
    timed_out: bool = False
    stderr_written: bool = False
    cwd: str | None = None

    @property
    def interrupted(self) -> bool:
        """Whether the command was stopped instead of exiting by itself."""
        return self.status == TaskStatus.KILLED


@dataclass(frozen=True, slots=True)
class WatchSettings:
    """Stall-watch thresholds (seconds) for background commands."""

    stall_after: float = STALL_THRESHOLD_S
    check_every: float = STALL_CHECK_INTERVAL_S


class ShellHandle:
    """The live side of a shell task: its process, output file and watch."""

    def __init__(
        self,
        runtime: TaskRuntime,
        task_id: str,
        child: Child,
        output: DiskTaskOutput,
        watch: WatchSettings,
        *,
        error_fd: int = -1,
        cwd_file: Path | None = None,
    ) -> None:
        """Supervise ``child`` (already spawned) for task ``task_id``.

        ``error_fd`` (the child's stderr description) and ``cwd_file`` (where it writes its
        last directory) are ours to close and remove once it exits.
        """
        self.runtime = runtime
        self.task_id = task_id
        self.child = child
        self.output = output
        self.watch_settings = watch
        self._error_fd = error_fd
        self._cwd_file = cwd_file
        #: Set at its exit: whether it wrote to stderr, and the directory it ended in.
        self.stderr_written = False
        self.final_cwd: str | None = None
        self.handoff = Handoff()
        self._killing = False
        self._kill_done = asyncio.Event()
        self._over_cap = False
        self._detached = False
        self._stall_notified = False
        #: What reads its output as it comes (a monitor's line follower).
        self.followers: list[asyncio.Task[None]] = []
        #: Done when its command has exited (and its output is complete), before its end is
        #: recorded: the followers' last read comes first.
        self.exited: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # The cap is checked from the start (foreground too); stall detection is switched on
        # when the command goes to the background.
        self._watch = Watch(
            task_id=task_id,
            probe=output.size,
            stall_after=None,
            check_every=watch.check_every,
            on_stall=self._on_stall,
            on_tick=self._check_cap,
        )
        self._stop_watch: Callable[[], None] | None = runtime.watchdog.watch(self._watch)
        self.finished: asyncio.Task[ShellTaskState | None] = asyncio.get_running_loop().create_task(
            self._supervise()
        )

    async def _supervise(self) -> ShellTaskState | None:
        try:
            raw = await self.child.wait()
        finally:
            self._collect_exit_facts()
        # Report a death by signal N the way shells do: 128 + N.
        code = 128 - raw if raw < 0 else raw
        killed = self._killing
        try:
            self._unwatch()
            if killed:
                # Let the tree kill finish: the rest of the tree may still be writing.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._kill_done.wait(), 10.0)
            if self._over_cap:
                self.output.enforce_cap()
            self.exited.set_result(None)
            if self.followers:  # a monitor's last lines are told before its end is
                await asyncio.wait(self.followers, timeout=FOLLOW_GRACE_S)
        finally:
            if not self.exited.done():
                self.exited.set_result(None)
            # Whatever failed above, the task must end and its notification go out.
            state = self.runtime.update(self.task_id, _finisher(code, killed))
            # The process record stays until the session closes: descendants that outlived
            # the shell (``cmd &``) are found then, by their tag, in one scan for all tasks.
            self.output.close()
            self.runtime.release_handle(self.task_id)
        return state

    def _collect_exit_facts(self) -> None:
        """Read (once) what the exited shell left: its stderr offset, its last directory."""
        if self._error_fd >= 0:
            with contextlib.suppress(OSError):
                # Appending writes move the offset to the end: still 0 means none was made.
                self.stderr_written = os.lseek(self._error_fd, 0, os.SEEK_CUR) > 0
            os.close(self._error_fd)
            self._error_fd = -1
        path, self._cwd_file = self._cwd_file, None
        if path is not None:
            with contextlib.suppress(OSError):
                with path.open("rb") as recorded:  # bounded: the command could fill it
                    text = recorded.read(_CWD_BYTES).decode("utf-8", "surrogateescape")
                # Still the mark it was made with: the shell never wrote it (killed).
                self.final_cwd = None if text == UNWRITTEN else text.removesuffix("\n")
            with contextlib.suppress(OSError):
                path.unlink()

    async def kill(self) -> None:
        """Stop the command and every process it started; wait until it is recorded."""
        if self.finished.done():
            await self._kill_lingering()
            return
        self._killing = True
        try:
            report = await kill_tree(
                self.child.pgid,
                leader=self.child.pid,
                leader_start=self.child.pid_start or None,
                tag=self.task_id,
                grace=self.runtime.kill_grace,
            )
        finally:
            self._kill_done.set()
        if not report.verified:
            log.warning("task %s: processes survived the kill: %s", self.task_id, report.survivors)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.finished), 5.0)

    async def _kill_lingering(self) -> None:
        await kill_tree(None, tag=self.task_id, grace=self.runtime.kill_grace)

    async def detach(self) -> None:
        """Let the command outlive the session; the orphan sweep will leave it alone.

        We stop supervising it (its end can no longer be reported by this session); a later
        session records it as ended once its process is gone.
        """
        self._detached = True
        self._unwatch()
        self.finished.cancel()
        self._collect_exit_facts()  # the supervisor may not have started to do it
        self.output.close()
        self.runtime.store.set_process_detached(self.task_id)
        self.runtime.release_handle(self.task_id)

    def on_background(self) -> None:
        """Called by the runtime when the task moves to the background."""
        self.handoff.release()
        if self._watch.stall_after is None:
            self._watch.stall_after = self.watch_settings.stall_after
            self._watch.last_check = float("-inf")

    def _unwatch(self) -> None:
        stop, self._stop_watch = self._stop_watch, None
        if stop is not None:
            stop()

    def _reading_input(self) -> str | None:
        """Which process of the command is blocked reading input nobody gives, if any."""
        procs, _ = find_tree(
            self.child.pgid,
            leader=self.child.pid,
            leader_start=self.child.pid_start or None,
            tag=self.task_id,
        )
        return waiting_for_input(p.pid for p in procs)

    async def _check_cap(self) -> None:
        # The child shares the descriptor: stop it first, then cut the file back to the cap
        # (done in _supervise once the whole tree is dead).
        if not self._killing and self.output.size() > self.output.cap:
            self._over_cap = True
            await self.runtime.kill(self.task_id)

    async def _on_stall(self) -> None:
        """Silent for a while: tell the owner if the command waits for an answer.

        It does when its output ends with a question, or when one of its processes is blocked
        reading a terminal or a pipe none of them writes (it printed nothing, perhaps).
        """
        if self._stall_notified:
            return
        tail = read_tail(self.output.path, STALL_TAIL_BYTES).decode("utf-8", "replace")
        last = "\n".join(line for line in tail.splitlines() if line.strip())[-400:]
        silent = f"{self.watch_settings.stall_after:g}"
        if looks_like_prompt(tail):
            what = f"Its output has not changed for {silent}s and ends with:\n{last}"
        else:
            reading = await asyncio.to_thread(self._reading_input)
            if reading is None:
                return
            shown = f" and ends with:\n{last}" if last else ""
            what = (
                f"It has printed nothing for {silent}s{shown}\n{reading[0].upper()}{reading[1:]}."
            )
        self._stall_notified = True
        state = self.runtime.get(self.task_id)
        if state is None or state.terminal:
            return
        text = render_notification(
            task_id=self.task_id,
            tool_use_id=state.tool_use_id,
            output_file=state.output_file,
            status=state.status.value,
            summary=(
                f'Background command "{state.description}" appears to be waiting for '
                "interactive input"
            ),
            result=(
                f"{what}\nNo one can answer it. Stop it with TaskStop and run it "
                "non-interactively (a --yes flag, or input piped in)."
            ),
        )
        self.runtime.notify(self.task_id, text, kind="stall", priority="next")


async def run_shell(
    runtime: TaskRuntime,
    command: str,
    *,
    owner: str | None = None,
    description: str = "",
    tool_use_id: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    run_in_background: bool = False,
    auto_background: bool = False,
    exit_policy: ExitPolicy = "cancel",
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    agent_id: str | None = None,
    watch: WatchSettings | None = None,
    kind: Literal["bash", "monitor"] = "bash",
    track_cwd: bool = False,
    pass_fds: Collection[int] = (),
    sandboxed: bool = False,
) -> ShellOutcome:
    """Run ``command`` as a shell task and return when it ends or goes to the background.

    Args:
        runtime: The runtime that tracks the task.
        command: The command line (run by bash, or ``/bin/sh``).
        owner: Who started it (default: the session); only it is notified.
        description: Short label used in notifications (default: the command).
        tool_use_id: The ``tool_use`` block that asked for it.
        timeout: Foreground limit in seconds (at most :data:`MAX_TIMEOUT_S`).
        run_in_background: Start in the background and return at once.
        auto_background: At the timeout, move to the background (True) or kill (False).
        exit_policy: What happens when the owner closes while it runs.
        cwd: Working directory.
        env: Environment (default: ours).
        agent_id: The agent that started it (for :meth:`TaskRuntime.kill_shells_for_agent`).
        watch: Stall thresholds for the background watch.
        kind: ``monitor``: each new line of its output is told to its owner as it comes
            (:mod:`taskloom.tasks.monitor`; run it in the background).
        track_cwd: Learn the directory the shell ends in (:attr:`ShellOutcome.cwd`).
        pass_fds: Descriptors the command inherits (see :func:`~taskloom.process.spawn_shell`).
        sandboxed: A read-only agent's command: ``TMPDIR`` is its owner's scratch directory
            (:mod:`taskloom.tasks.scratch`), and where the kernel has Landlock the command and
            all it starts may write nothing else (:mod:`taskloom.process.landlock`) but
            ``/dev/null``, the terminal devices and its directory file.

    Raises:
        TaskloomError: The output file or the process could not be created (the task is then
            recorded as failed).
    """
    task_id = runtime.new_id(TaskType.LOCAL_BASH)
    owner = owner or runtime.session_id
    path = runtime.output_path(task_id)
    runtime.register(
        ShellTaskState(
            id=task_id,
            description=description or command,
            owner=owner,
            tool_use_id=tool_use_id,
            output_file=str(path),
            exit_policy=exit_policy,
            is_backgrounded=run_in_background,
            command=command,
            agent_id=agent_id,
            kind=kind,
        )
    )
    cwd_file = path.with_suffix(".cwd") if track_cwd else None
    output, error_fd = _open_output(runtime, task_id)
    prelude = ""
    if cwd_file is not None:
        # On the same line as the command, so the line numbers its errors name stay its own.
        record = f"pwd -P >| {shlex.quote(str(cwd_file))} 2>/dev/null"
        prelude = f"trap {shlex.quote(record)} EXIT; "
    sandbox = None
    if sandboxed:
        env, sandbox = _sandbox(runtime, task_id, owner, env, cwd_file, output, error_fd)
    child = _spawn_recorded(
        runtime, task_id, command, output, error_fd, cwd, env, prelude, pass_fds, sandbox
    )
    handle = ShellHandle(
        runtime,
        task_id,
        child,
        output,
        watch or WatchSettings(),
        error_fd=error_fd,
        cwd_file=cwd_file,
    )
    runtime.attach_handle(task_id, handle)
    runtime.update(task_id, lambda s: s.replace(status=TaskStatus.RUNNING, pid=child.pid))
    if kind == "monitor":
        from taskloom.tasks.monitor import follow_lines

        handle.followers.append(
            asyncio.get_running_loop().create_task(
                follow_lines(runtime, task_id, str(path), handle.exited)
            )
        )
    if run_in_background:
        handle.on_background()
        return _outcome(runtime, task_id, backgrounded=True)
    return await _wait_foreground(runtime, handle, min(timeout, MAX_TIMEOUT_S), auto_background)


def _open_output(runtime: TaskRuntime, task_id: str) -> tuple[DiskTaskOutput, int]:
    """The task's output file, and a second appending descriptor of it for stderr."""
    try:
        output = runtime.create_output(task_id)
    except BaseException:
        _fail(runtime, task_id)
        raise
    try:
        return output, _open_appending(output.path)
    except BaseException:
        output.close()
        _fail(runtime, task_id)
        raise


def _sandbox(
    runtime: TaskRuntime,
    task_id: str,
    owner: str,
    env: Mapping[str, str] | None,
    cwd_file: Path | None,
    output: DiskTaskOutput,
    error_fd: int,
) -> tuple[dict[str, str], Sandbox | None]:
    """A read-only command's environment (its scratch ``TMPDIR``) and sandbox.

    The sandbox is None where the kernel has no Landlock (logged once): the text judge alone
    then stands between the command and the files.
    """
    try:
        scratch = runtime.scratch.of(owner)
        if cwd_file is not None:
            # The shell's trap writes it: a Landlock rule may name an existing file only.
            cwd_file.write_text(UNWRITTEN, encoding="utf-8")
    except OSError as exc:
        output.close()
        os.close(error_fd)
        _fail(runtime, task_id)
        raise ProcessError(f"cannot prepare the sandbox of a read-only command: {exc}") from exc
    child_env = dict(os.environ if env is None else env)
    child_env["TMPDIR"] = str(scratch)
    from taskloom.process import landlock  # ctypes: loaded by sessions that sandbox only

    if not landlock.available():
        return child_env, None
    files = (cwd_file,) if cwd_file is not None else ()
    return child_env, landlock.Sandbox(directories=(scratch,), files=files)


def _spawn_recorded(
    runtime: TaskRuntime,
    task_id: str,
    command: str,
    output: DiskTaskOutput,
    error_fd: int,
    cwd: Path | str | None,
    env: Mapping[str, str] | None,
    prelude: str,
    pass_fds: Collection[int] = (),
    sandbox: Sandbox | None = None,
) -> Child:
    """Start the command's shell, recorded so that no crash of ours can orphan it."""
    # Recorded by its tag before it can run, then by its pid: a SIGKILL of ours at any point
    # leaves a record that the next session's sweep finds it by.
    with recorded_tag("shell", ProcessRecorder(runtime.store, runtime.session_id), tag=task_id):
        try:
            child = spawn_shell(
                command,
                output_fd=output.fd,
                task_id=task_id,
                session_id=runtime.session_id,
                cwd=cwd,
                env=env,
                error_fd=error_fd,
                prelude=prelude,
                pass_fds=pass_fds,
                sandbox=sandbox,
            )
        except BaseException:
            output.close()
            os.close(error_fd)
            _fail(runtime, task_id)
            raise
        runtime.store.add_process(
            ProcessRow(
                pid=child.pid,
                pid_start=child.pid_start,
                pgid=child.pgid,
                session_id=runtime.session_id,
                task_id=task_id,
                owner_pid=os.getpid(),
                owner_start=process_start_time(os.getpid()) or 0.0,
                boot_id=boot_id(),
            )
        )
    return child


async def _wait_foreground(
    runtime: TaskRuntime, handle: ShellHandle, timeout: float, auto_background: bool
) -> ShellOutcome:
    end = await handle.handoff.wait(
        runtime, handle.task_id, handle.finished, timeout, auto_background=auto_background
    )
    outcome = _outcome(
        runtime, handle.task_id, backgrounded=end.backgrounded, timed_out=end.timed_out
    )
    if outcome.backgrounded or end.timed_out:
        return outcome
    return dataclasses.replace(outcome, stderr_written=handle.stderr_written, cwd=handle.final_cwd)


def _open_appending(path: Path) -> int:
    """A second open description of the output file, for stderr (see the module docstring).

    Raises:
        OutputError: It cannot be opened.
    """
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise OutputError(f"cannot open task output {path} for stderr: {exc.strerror}") from exc


def _fail(runtime: TaskRuntime, task_id: str) -> None:
    # Whatever failed, the task must not stay pending (a headless run would wait on it for
    # ever). The caller gets the error now; a notification would only repeat it.
    runtime.update(task_id, lambda s: s.replace(status=TaskStatus.FAILED, notified=True))


def _finisher(code: int, killed: bool) -> Callable[[ShellTaskState], ShellTaskState]:
    def finish(state: ShellTaskState) -> ShellTaskState:
        if state.terminal:
            return state
        if killed:
            status = TaskStatus.KILLED
        else:
            status = TaskStatus.COMPLETED if code == 0 else TaskStatus.FAILED
        return state.replace(status=status, exit_code=code, interrupted=killed, pid=None)

    return finish


def _outcome(
    runtime: TaskRuntime, task_id: str, *, backgrounded: bool, timed_out: bool = False
) -> ShellOutcome:
    state = runtime.get(task_id)
    assert isinstance(state, ShellTaskState)
    return ShellOutcome(
        task_id=task_id,
        status=state.status,
        exit_code=state.exit_code,
        output_file=state.output_file,
        backgrounded=backgrounded and not state.terminal,
        timed_out=timed_out,
    )
