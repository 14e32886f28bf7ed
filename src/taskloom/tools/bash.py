"""The Bash tool: run a command in the foreground, the background, or both in turn."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from taskloom.tasks.output import read_delta, read_tail
from taskloom.tasks.shell import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S, run_shell
from taskloom.tasks.types import TaskStatus
from taskloom.tools.base import Tool, ToolContext, ToolInput, ToolResult

#: Most output (characters) put in a tool result; the full output stays in the file.
MAX_RESULT_CHARS = 30_000

DESCRIPTION = """Run a shell command (bash) in the working directory and return its output.

- Foreground by default, up to `timeout` ms (default 120000, max 600000). A command that
  runs past its timeout is moved to the background rather than killed: you get its task id
  and are notified when it ends.
- Set `run_in_background: true` for long commands (builds, test suites, servers) so you can
  keep working; you will be notified when it finishes. Read its output with TaskOutput and
  stop it with TaskStop. Do not poll with sleep.
- stdout and stderr are merged. Long output is cut in the result; the full output is in the
  file the result names.
- Commands cannot be answered interactively: use non-interactive flags (e.g. --yes).
- Give a short `description` (5-10 words) of what the command does."""


class BashInput(ToolInput):
    """Input of :class:`BashTool`."""

    command: str = Field(description="The command to run.")
    timeout: int | None = Field(
        default=None, ge=1, le=int(MAX_TIMEOUT_S * 1000), description="Timeout in milliseconds."
    )
    description: str | None = Field(default=None, description="What the command does.")
    run_in_background: bool | None = Field(
        default=None, description="Run in the background and return at once."
    )


#: :class:`BashInput`'s closed schema written out, so that offering the tool does not build
#: the model (it is built when a call is first validated); tests check it is the one
#: generated, byte for byte.
INPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`BashTool`.",
    "properties": {
        "command": {"description": "The command to run.", "type": "string"},
        "timeout": {
            "maximum": 600000,
            "minimum": 1,
            "type": "integer",
            "description": "Timeout in milliseconds.",
        },
        "description": {"type": "string", "description": "What the command does."},
        "run_in_background": {
            "type": "boolean",
            "description": "Run in the background and return at once.",
        },
    },
    "required": ["command"],
    "type": "object",
}


class BashTool(Tool[BashInput]):
    """Shell commands through the task runtime."""

    name = "Bash"
    description = DESCRIPTION
    Input = BashInput
    static_schema = (BashInput, INPUT_SCHEMA)
    kind = "execute"

    def permission_target(self, params: BashInput, ctx: ToolContext) -> str | None:
        """Rules match the command line."""
        return params.command

    async def call(self, params: BashInput, ctx: ToolContext) -> ToolResult:
        """Run the command through :func:`taskloom.tasks.shell.run_shell`."""
        timeout_s = params.timeout / 1000 if params.timeout else DEFAULT_TIMEOUT_S
        auto = bool(ctx.settings.get("autoBackgroundShells", True))
        outcome = await run_shell(
            ctx.runtime,
            params.command,
            owner=ctx.owner,
            description=params.description or params.command,
            tool_use_id=ctx.tool_use_id,
            timeout=timeout_s,
            run_in_background=bool(params.run_in_background),
            auto_background=auto,
            cwd=ctx.cwd,
            agent_id=ctx.agent_id,
        )
        data = {
            "task_id": outcome.task_id,
            "status": outcome.status.value,
            "exit_code": outcome.exit_code,
            "output_file": outcome.output_file,
            "backgrounded": outcome.backgrounded,
        }
        where = f"Output is being written to: {outcome.output_file}"
        if outcome.backgrounded:
            if outcome.timed_out:
                text = (
                    f"Command ran past its {timeout_s:g}s timeout and was moved to the "
                    f"background with ID: {outcome.task_id}. {where}. You will be notified "
                    "when it finishes; read its output with TaskOutput or stop it with TaskStop."
                )
            else:
                text = (
                    f"Command running in background with ID: {outcome.task_id}. {where}. "
                    "You will be notified when it finishes."
                )
            return ToolResult(text, data=data)
        output = _read_output(outcome.output_file)
        if outcome.timed_out:
            text = f"{output}\nCommand timed out after {timeout_s:g}s and was killed."
            return ToolResult(text.lstrip("\n"), is_error=True, data=data)
        if outcome.status == TaskStatus.COMPLETED:
            return ToolResult(output or "(no output)", data=data)
        suffix = f"Exit code {outcome.exit_code}"
        return ToolResult(f"{output}\n{suffix}".lstrip("\n"), is_error=True, data=data)


def _read_output(path: str) -> str:
    """The command's output for the model: all of it, or its head and tail with a pointer."""
    budget = MAX_RESULT_CHARS
    head, _ = read_delta(path, 0, budget + 1)
    if len(head) <= budget:
        return head.decode("utf-8", "replace").rstrip("\n")
    half = budget // 2
    start = head[:half].decode("utf-8", "ignore")
    end = read_tail(path, half).decode("utf-8", "ignore").rstrip("\n")
    return f"{start}\n\n[... output truncated; full output in {path} ...]\n\n{end}"
