"""The Monitor tool: a long-lived command whose every new output line is told to you."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.process.shell_env import shell_env
from taskloom.tasks.monitor import BATCH_S
from taskloom.tools.base import Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from taskloom.tools.inputs.monitor import MonitorInput

DESCRIPTION = f"""Watch a long-lived command (a log, a build, a server) and be told of each new
line of its output.

- It runs in the background; the new lines of each {int(BATCH_S * 1000)} ms come to you as one
  notification, delivered at your next turn boundary, until the command ends or you stop it
  with TaskStop (its task id is in the result). Its full output is in the file the result names.
- For "tell me when the build fails": `tail -F build.log | grep --line-buffered -i error`.
  Filter in the command: every line it prints reaches you.
- Give a short `description` of what it watches."""


#: :class:`MonitorInput`'s closed schema written out (see ``Tool.static_schema``).
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`MonitorTool`.",
    "properties": {
        "command": {"description": "The command to run and watch.", "type": "string"},
        "description": {"type": "string", "description": "What it watches."},
    },
    "required": ["command"],
    "type": "object",
}


class MonitorTool(Tool["MonitorInput"]):
    """Monitors (shell tasks of kind ``monitor``) through the task runtime."""

    name = "Monitor"
    description = DESCRIPTION
    input_model = "taskloom.tools.inputs.monitor:MonitorInput"
    static_schema = (input_model, INPUT_SCHEMA)
    kind = "execute"

    def permission_target(self, params: MonitorInput, ctx: ToolContext) -> str | None:
        """Rules match the command line, as Bash's do."""
        return params.command

    async def call(self, params: MonitorInput, ctx: ToolContext) -> ToolResult:
        """Start it in the background."""
        from taskloom.tasks.shell import run_shell  # loaded with the first command

        outcome = await run_shell(
            ctx.runtime,
            params.command,
            owner=ctx.owner,
            description=params.description or params.command,
            tool_use_id=ctx.tool_use_id,
            run_in_background=True,
            cwd=ctx.cwd,
            agent_id=ctx.agent_id,
            kind="monitor",
            env=shell_env(home=ctx.runtime.home),  # `rg` as in Bash
            sandboxed=ctx.sandboxed,
        )
        text = (
            f"Monitor started with ID: {outcome.task_id}. Each new line of its output will "
            f"come to you as a notification; stop it with TaskStop. Output is being written "
            f"to: {outcome.output_file}"
        )
        data = {
            "task_id": outcome.task_id,
            "status": outcome.status.value,
            "output_file": outcome.output_file,
        }
        return ToolResult(text, data=data)
