"""The MonitorMcp tool: an MCP server's events, told to the model as they come.

The counterpart of Monitor (a command's new lines) for an MCP server of the session: it
watches one resource (``resources/subscribe``; each ``notifications/resources/updated`` is an
event, told with the resource's contents once per batch) or the server's log messages and
progress notifications. It runs as a ``monitor_mcp`` task (:mod:`taskloom.tasks.mcp_monitor`):
batched ``next`` notifications to the agent that started it, TaskStop ends it
(``resources/unsubscribe`` while the server is alive), and the server's end ends it
``failed`` saying why. A tool of its own rather than a form of Monitor: Monitor's input and
permission rules are a command line's, and this one is offered only when there are MCP servers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskloom.mcp.watch import McpEvent
from taskloom.tasks.mcp_monitor import McpMonitorRun, McpMonitorState
from taskloom.tasks.monitor import BATCH_S
from taskloom.tasks.types import TaskStatus, TaskType
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.mcp.inputs.monitor import MonitorMcpInput
    from taskloom.mcp.manager import McpManager
    from taskloom.tasks.runtime import TaskRuntime

#: The most characters of a resource's contents told with a batch.
CONTENTS_CHARS = 2000

DESCRIPTION = f"""Watch an MCP server of this session and be told of its events.

- With `resource` (a URI the server lists): subscribes to it; each change comes to you with the
  resource's contents. Without it: the server's log messages and progress notifications
  (`level`: only that level and above; without it, all the server sends at its own level).
- It runs in the background; the events of each {int(BATCH_S * 1000)} ms come to you as one
  notification at your next turn boundary, until you stop it with TaskStop (its task id is in
  the result) or the server goes away (then it fails, saying why). Every event is also written
  to the file the result names.
- Give a short `description` of what it watches."""


class _Watcher:
    """Feeds one monitor's events to its run; holds them until the run exists.

    Its server's log level is shared by every watcher of it (the lowest asked for), so a log
    message below this monitor's own ``level`` is dropped here.
    """

    def __init__(self, resource: str | None, level: str | None = None) -> None:
        self.resource, self.level = resource, level
        self.unwatch: Callable[[], None] = lambda: None
        self.run: McpMonitorRun | None = None
        self.early: list[str] = []
        self.gone: str | None = None
        self.runtime: TaskRuntime | None = None

    def event(self, event: McpEvent) -> None:
        if self.resource is None:
            wanted = event.kind != "resource" and not (self.level and event.below(self.level))
        else:
            wanted = event.kind == "resource" and event.uri == self.resource
        if not wanted:
            return
        if self.run is None:
            self.early.append(event.text)
        else:
            self.run.push(event.text)

    def ended(self, reason: str) -> None:
        self.unwatch()  # its server is gone: nothing more will come
        if self.run is None:
            self.gone = reason
        else:
            self.run.fail(reason)

    async def closing(self) -> None:
        if self.run is None or self.runtime is None:
            return
        run = self.run
        reason = "its MCP server was shut down with the session"

        def stopped(state: McpMonitorState) -> McpMonitorState:
            return state if state.terminal else state.replace(stopped_reason=reason)

        self.runtime.update(run.task_id, stopped)
        await self.runtime.kill(run.task_id)

    def attach(self, run: McpMonitorRun, runtime: TaskRuntime) -> None:
        self.run, self.runtime = run, runtime
        for text in self.early:
            run.push(text)
        self.early = []
        if self.gone is not None:
            run.fail(self.gone)


#: :class:`MonitorMcpInput`'s closed schema written out (see ``Tool.static_schema``): offered
#: with the first request of a session with MCP servers, it is not generated then.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`MonitorMcpTool`.",
    "properties": {
        "server": {"description": "The MCP server's name.", "type": "string"},
        "resource": {
            "type": "string",
            "description": "The URI of the resource to watch; omit for the server's log.",
        },
        "level": {
            "enum": [
                "debug",
                "info",
                "notice",
                "warning",
                "error",
                "critical",
                "alert",
                "emergency",
            ],
            "type": "string",
            "description": "Without a resource: the least severe log level to be told.",
        },
        "description": {"type": "string", "description": "What it watches."},
    },
    "required": ["server"],
    "type": "object",
}


class MonitorMcpTool(Tool["MonitorMcpInput"]):
    """MCP monitors (``monitor_mcp`` tasks) of the session's MCP servers.

    Args:
        manager: The session's MCP servers.
    """

    name = "MonitorMcp"
    description = DESCRIPTION
    input_model = "taskloom.mcp.inputs.monitor:MonitorMcpInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "read"  # it reads what a server says; nothing changes

    def __init__(self, manager: McpManager) -> None:
        self.manager = manager

    def permission_target(self, params: MonitorMcpInput, ctx: ToolContext) -> str | None:
        """Rules name the server: ``MonitorMcp(files)``."""
        return params.server

    async def call(self, params: MonitorMcpInput, ctx: ToolContext) -> ToolResult:
        """Start watching in the background."""
        servers = self.manager.status()
        if params.server not in servers:
            known = ", ".join(sorted(servers)) or "none"
            return tool_error(f"No MCP server named {params.server!r} (configured: {known})")
        if params.resource is not None and params.level is not None:
            return tool_error("`level` is for a server's log; a resource monitor takes none")
        watcher = _Watcher(params.resource, params.level)
        unwatch = watcher.unwatch = self.manager.watch(params.server, watcher)
        started = await self._start(params, watcher)
        if started.is_error:
            unwatch()
            return started
        return self._register(params, ctx, watcher, unwatch)

    async def _start(self, params: MonitorMcpInput, watcher: _Watcher) -> ToolResult:
        """Subscribe, or ask for the log level; or just make sure the server is connected."""
        if params.resource is not None:
            return await self.manager.subscribe(params.server, params.resource)
        if params.level is not None:
            told = ToolResult(f"log level {params.level}")

            async def send(level: str) -> bool:
                nonlocal told
                told = await self.manager.set_log_level(params.server, level)
                return not told.is_error

            await self.manager.log_levels.ask(params.server, watcher, params.level, send)
            return told
        await self.manager.start([params.server])
        if not self.manager.connected(params.server):
            why = self.manager.status().get(params.server, "")
            return tool_error(f"MCP server {params.server!r} is not connected ({why})")
        return ToolResult("watching")

    def _register(
        self,
        params: MonitorMcpInput,
        ctx: ToolContext,
        watcher: _Watcher,
        unwatch: Callable[[], None],
    ) -> ToolResult:
        runtime, server, uri = ctx.runtime, params.server, params.resource
        task_id = runtime.new_id(TaskType.MONITOR_MCP)
        output = runtime.create_output(task_id)
        what = uri if uri is not None else f"{server} log"
        state = McpMonitorState(
            id=task_id,
            owner=ctx.owner,
            description=params.description or what,
            status=TaskStatus.RUNNING,
            tool_use_id=ctx.tool_use_id or None,
            output_file=str(output.path),
            mcp_server=server,
            resource=uri,
            agent_id=ctx.agent_id,
        )
        runtime.register(state)

        async def stop() -> None:
            unwatch()
            if not self.manager.connected(server):
                return
            with contextlib.suppress(Exception):  # a server that fails it: nothing to undo
                if uri is not None:
                    await self.manager.unsubscribe(server, uri)
                else:  # its level may have been the lowest: the server's may rise
                    await self.manager.log_levels.drop(server, watcher, send_level)

        async def send_level(level: str) -> bool:
            return not (await self.manager.set_log_level(server, level)).is_error

        after = None if uri is None else (lambda: self._contents(server, uri))
        run = McpMonitorRun(runtime, task_id, output, stop, after)
        runtime.attach_handle(task_id, run)
        watcher.attach(run, runtime)
        told = f"each change to {uri}" if uri is not None else "each log message and progress"
        text = (
            f"Monitor started with ID: {task_id}. On MCP server {server!r}, {told} will come "
            f"to you as a notification; stop it with TaskStop. Events are being written to: "
            f"{output.path}"
        )
        data: dict[str, Any] = {
            "task_id": task_id,
            "status": TaskStatus.RUNNING.value,
            "output_file": str(output.path),
        }
        return ToolResult(text, data=data)

    async def _contents(self, server: str, uri: str) -> str:
        """What a batch of changes to ``uri`` is told with: its contents now, cut short."""
        read = await self.manager.read_resource(server, uri)
        if read.is_error:
            return f"(could not read {uri}: {read.content})"
        text = read.content
        if len(text) > CONTENTS_CHARS:
            text = text[:CONTENTS_CHARS] + f"\n[{len(text) - CONTENTS_CHARS} more characters]"
        return f"Contents of {uri} now:\n{text}"


__all__ = ["MonitorMcpTool"]
