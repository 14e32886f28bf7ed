"""LocalShellTask: shell commands in the foreground, the background, or moved between them.

Four ways into the background: ``run_in_background`` from the start; a foreground
command passing its timeout (auto-background, the default; with it off the command is killed);
:meth:`TaskRuntime.background` while a caller waits on it; and the same from a UI. Moving to
the background never touches the output: the child writes to the output file from the start.

While in the background a command is watched: its output file must stay under the cap, and
when it stops growing for 45 s and its tail looks like a question (``(y/n)``, ``Press Enter``...)
its owner is told, once, that it seems to wait for input.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

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

log = logging.getLogger(__name__)

#: Default foreground timeout (the Bash tool's default, 2 minutes).
DEFAULT_TIMEOUT_S = 120.0
#: Longest foreground timeout a caller may ask for (the Bash tool's cap, 10 minutes).
MAX_TIMEOUT_S = 600.0
#: How long a command's end waits for its followers' last read (a monitor's last lines).
FOLLOW_GRACE_S = 2.0


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
    """

    task_id: str
    status: TaskStatus
    exit_code: int | None
    output_file: str
    backgrounded: bool
    timed_out: bool = False

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
    ) -> None:
        """Supervise ``child`` (already spawned) for task ``task_id``."""
        self.runtime = runtime
        self.task_id = task_id
        self.child = child
        self.output = output
        self.watch_settings = watch
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
        raw = await self.child.wait()
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
    auto_background: bool = True,
    exit_policy: ExitPolicy = "cancel",
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    agent_id: str | None = None,
    watch: WatchSettings | None = None,
    kind: Literal["bash", "monitor"] = "bash",
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
    try:
        output = runtime.create_output(task_id)
    except BaseException:
        _fail(runtime, task_id)
        raise
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
            )
        except BaseException:
            output.close()
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
    handle = ShellHandle(runtime, task_id, child, output, watch or WatchSettings())
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


async def _wait_foreground(
    runtime: TaskRuntime, handle: ShellHandle, timeout: float, auto_background: bool
) -> ShellOutcome:
    end = await handle.handoff.wait(
        runtime, handle.task_id, handle.finished, timeout, auto_background=auto_background
    )
    return _outcome(runtime, handle.task_id, backgrounded=end.backgrounded, timed_out=end.timed_out)


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
