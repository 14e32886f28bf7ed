"""MCP monitors (``monitor_mcp``): an MCP server's events, told to their owner as they come.

A monitor of an MCP server watches one of its resources (``resources/subscribe``: each
``notifications/resources/updated`` is an event) or its log and progress notifications. The
events of each :data:`~taskloom.tasks.monitor.BATCH_S` window become one notification of
priority ``next`` to its owner (``Monitor "…" received 2 new events``, the events as its
result), as a command's Monitor tells its new lines; every event is also written to its output
file. It runs until it is stopped (TaskStop: its subscription ends) or its server is gone,
which ends it ``failed`` saying why.

This module is the task's side: its state, its kind and its live run, fed events as lines by
whatever reaches the server (:mod:`taskloom.mcp.monitor`, which knows the SDK; this layer
does not).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar

from taskloom._dataclass import dataclass
from taskloom.errors import OutputError, TaskloomError
from taskloom.tasks.kinds import Progress, Shown, ShownField, TaskKind, register_kind
from taskloom.tasks.monitor import BATCH_S, MAX_CHARS
from taskloom.tasks.notifications import render_notification
from taskloom.tasks.output import DiskTaskOutput, read_delta, read_tail
from taskloom.tasks.types import Priority, TaskState, TaskStatus, TaskType

if TYPE_CHECKING:
    from taskloom.tasks.runtime import TaskRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True, slots=True)
class McpMonitorState(TaskState):
    """A monitor of an MCP server (``monitor_mcp``).

    Attributes:
        mcp_server: The server's name.
        resource: The URI of the resource it watches; None: the server's log and progress.
        events: How many events it has received.
        error: Why it failed (its server is gone), once failed.
        agent_id: The agent that started it (None: the main thread).
    """

    TYPE: ClassVar[TaskType] = TaskType.MONITOR_MCP
    type: TaskType = TaskType.MONITOR_MCP
    mcp_server: str = ""
    resource: str | None = None
    events: int = 0
    error: str | None = None
    agent_id: str | None = None


class McpMonitorKind(TaskKind):
    """MCP monitors: told as monitors, stopped by TaskStop, failed by their server's end."""

    task_type = TaskType.MONITOR_MCP
    state_class = McpMonitorState
    noun = "Monitor"

    def killed(self, state: TaskState) -> TaskState:
        """Stopped (its subscription ended)."""
        return state if state.terminal else state.replace(status=TaskStatus.KILLED)

    def told_by_stop(self, state: TaskState) -> TaskState:
        """Notified already: the stop's result is the notice, as for a command's Monitor."""
        return state if state.terminal else state.replace(notified=True)

    def started_by(self, state: TaskState, agent_id: str) -> bool:
        """Its owner, or the agent that started it on another owner's behalf."""
        return state.owner == agent_id or (
            isinstance(state, McpMonitorState) and state.agent_id == agent_id
        )

    def ends_by_itself(self, state: TaskState) -> bool:
        """No: a server may send events forever."""
        return False

    def priority(self, state: TaskState) -> Priority:
        """Monitors ask for prompt attention."""
        return "next"

    def short_noun(self) -> str:
        """``monitor``."""
        return "monitor"

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """The events written since the last read (which it consumes)."""
        chunk, offset = read_delta(state.output_file, state.output_offset, limit)
        text = chunk.decode("utf-8", "replace")
        xml = f"<output>\n{text.rstrip()}\n</output>" if text.strip() else "<output/>"
        return Shown((ShownField("output", text, xml),), {"output_offset": offset})

    def final_output(self, state: TaskState, limit: int) -> str:
        """The last of its events."""
        if not state.output_file:
            return ""
        return read_tail(state.output_file, limit).decode("utf-8", "replace")

    def status_note(self, state: TaskState) -> str:
        """How many events it has received."""
        return f" events={state.events}" if isinstance(state, McpMonitorState) else ""

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Its server and resource."""
        if not isinstance(state, McpMonitorState):
            return {}
        return {"mcp_server": state.mcp_server, "resource": state.resource}

    def progress(self, state: TaskState) -> Progress:
        """How many events so far."""
        if not isinstance(state, McpMonitorState):
            return Progress()
        return Progress(activity=f"{state.events} events")


register_kind(McpMonitorKind())


class McpMonitorRun:
    """The live side of one MCP monitor: events in, batched notifications out.

    Args:
        runtime: The session's runtime, where the task is registered (running).
        task_id: The task.
        output: Its output file, which every event is appended to (closed at its end).
        stop: Ends what feeds it (stops watching, unsubscribes); awaited when it is killed.
        after_batch: Text to tell after each batch's events (a resource's new contents);
            a failure of it is told in its place.
    """

    def __init__(
        self,
        runtime: TaskRuntime,
        task_id: str,
        output: DiskTaskOutput,
        stop: Callable[[], Awaitable[None]],
        after_batch: Callable[[], Awaitable[str]] | None = None,
    ) -> None:
        self.runtime, self.task_id = runtime, task_id
        self._output, self._stop, self._after_batch = output, stop, after_batch
        self._pending: list[str] = []
        self._telling: list[str] = []  # taken for the batch being told
        self._wake = asyncio.Event()
        self._ended = False
        self._loop = asyncio.get_running_loop().create_task(self._tell_loop())

    def push(self, line: str) -> None:
        """One event: written now, told with its batch."""
        if self._ended:
            return
        with contextlib.suppress(OutputError, OSError):  # a full disk: it is still told
            self._output.append(line + "\n")
        self._pending.append(line)
        self._wake.set()

    def fail(self, reason: str) -> None:
        """Its server is gone: tell what was not told yet, then end ``failed`` with ``reason``."""
        if self._ended:
            return
        self._ended = True
        self._loop.cancel()
        left = self._telling + self._pending
        self._telling, self._pending = [], []
        if left:
            self._tell(left, "")
        self._output.close()

        def failed(state: McpMonitorState) -> McpMonitorState:
            if state.terminal:
                return state
            return state.replace(status=TaskStatus.FAILED, error=reason)

        self.runtime.update(self.task_id, failed)
        self.runtime.release_handle(self.task_id)

    async def kill(self) -> None:
        """Stop telling and end what feeds it; the runtime records the kill."""
        if not self._ended:
            self._ended = True
            self._loop.cancel()
            self._output.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop
        await self._stop()

    async def detach(self) -> None:
        """A monitor cannot outlive its session's MCP connection: it is stopped."""
        await self.kill()

    async def _tell_loop(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(BATCH_S)  # the window: what arrives meanwhile joins the batch
            self._wake.clear()
            self._telling, self._pending = self._pending, []
            extra = ""
            if self._after_batch is not None:
                try:
                    extra = await self._after_batch()
                except Exception as exc:  # told, not fatal: the next batch tries again
                    extra = f"(could not read it: {exc})"
            if not self.runtime.closing:
                self._tell(self._telling, extra)
            self._telling = []

    def _tell(self, lines: list[str], extra: str) -> None:
        state = self.runtime.get(self.task_id)
        if state is None or not lines:
            return

        def counted(state: McpMonitorState) -> McpMonitorState:
            return state.replace(events=state.events + len(lines))

        self.runtime.update(self.task_id, counted)
        text = "\n".join(lines) + (f"\n{extra}" if extra else "")
        if len(text) > MAX_CHARS:
            rest = len(text) - MAX_CHARS
            text = text[:MAX_CHARS] + f"\n[{rest} more characters in {state.output_file}]"
        count = f"{len(lines)} new event{'s' if len(lines) != 1 else ''}"
        note = render_notification(
            task_id=self.task_id,
            tool_use_id=state.tool_use_id,
            output_file=state.output_file,
            status=state.status.value,
            summary=f'Monitor "{state.description}" received {count}',
            result=text,
        )
        with contextlib.suppress(TaskloomError):  # a full disk: the events stay in its file
            self.runtime.notify(self.task_id, note, kind="monitor", priority="next")


__all__ = ["McpMonitorKind", "McpMonitorRun", "McpMonitorState"]
