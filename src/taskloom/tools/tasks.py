"""Tools over the task runtime: TaskOutput and TaskStop (Claude Code's names).

Both act only on tasks the calling agent owns (or, for the main thread, any task of the
session): one agent cannot read or stop another's work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.errors import TaskAccessDenied, TaskNotFound, clipped
from taskloom.tasks.kinds import kind_of
from taskloom.tasks.narrow import as_shell
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import TaskState
from taskloom.tools import responses
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.tools.inputs.tasks import TaskOutputInput, TaskStopInput

MAX_OUTPUT_BYTES = 30_000


def find_task(runtime: TaskRuntime, task_id: str, caller: str) -> TaskState | ToolResult:
    """The task if ``caller`` may see it, else a tool error saying why."""
    try:
        return runtime.authorize(task_id, caller)
    except TaskNotFound:
        # A task may answer to other names: a teammate to its agent id (``alice@team``) and
        # its name.
        named = [s for s in runtime.list() if not s.terminal and task_id in kind_of(s).addresses(s)]
        if len(named) == 1:
            return find_task(runtime, named[0].id, caller)
        if named:
            ids = ", ".join(f"{s.id} ({kind_of(s).addresses(s)[0]})" for s in named)
            return tool_error(f"{task_id} names more than one task: {ids}; use a task id")
        return tool_error(f"No task found with ID: {clipped(task_id)}")
    except TaskAccessDenied:
        return tool_error(f"Task {task_id} belongs to another agent; you may not use it")


def describe(
    runtime: TaskRuntime, state: TaskState, retrieval: str
) -> tuple[str, dict[str, object]]:
    """Render a task for the model with its kind's fields (which may consume new output)."""
    lines = [
        f"<retrieval_status>{retrieval}</retrieval_status>",
        f"<task_id>{state.id}</task_id>",
        f"<task_type>{state.type.value}</task_type>",
        f"<status>{state.status.value}</status>",
    ]
    data: dict[str, object] = {
        "retrieval_status": retrieval,
        "task_id": state.id,
        "task_type": state.type.value,
        "status": state.status.value,
        "description": state.description,
    }
    shown = kind_of(state).output_fields(state, MAX_OUTPUT_BYTES)
    if shown.changes:
        changes = shown.changes
        runtime.update(state.id, lambda s: s.replace(**changes))
    for field in shown.fields:
        lines.append(field.xml)
        data[field.key] = field.value
    if state.output_file:
        lines.append(f"<output_file>{state.output_file}</output_file>")
    return "\n".join(lines), data


#: :class:`TaskOutputInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
TASK_OUTPUT_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TaskOutputTool`.",
    "properties": {
        "task_id": {
            "description": "The id of the task (from Bash, Agent or a notification).",
            "type": "string",
        },
        "block": {
            "default": True,
            "description": "Wait for the task to finish.",
            "type": "boolean",
        },
        "timeout": {
            "default": 30000,
            "description": "Longest wait in ms.",
            "maximum": 600000,
            "minimum": 0,
            "type": "integer",
        },
    },
    "required": ["task_id"],
    "type": "object",
}


class TaskOutputTool(Tool["TaskOutputInput"]):
    """Read a background task's status and new output (or an agent's result)."""

    name = "TaskOutput"
    description = (
        "Get the status and output of a background task. For a shell command it returns the "
        "exit code and the output written since your last read; for an agent, its final "
        "answer. With block=true (default) it waits up to `timeout` ms for the task to end. "
        "You are notified when tasks end, so prefer doing other work to waiting here."
    )
    input_model = "taskloom.tools.inputs.tasks:TaskOutputInput"
    static_schema = (input_model, TASK_OUTPUT_SCHEMA)
    kind = "other"
    concurrency_safe = True

    async def call(self, params: TaskOutputInput, ctx: ToolContext) -> ToolResult:
        """Wait if asked, then describe the task."""
        found = find_task(ctx.runtime, params.task_id, ctx.owner)
        if isinstance(found, ToolResult):
            return found
        state = found
        if not state.terminal and params.block:
            state = await ctx.runtime.wait(state.id, timeout=params.timeout / 1000)
        retrieval = "success" if state.terminal else ("timeout" if params.block else "not_ready")
        text, data = describe(ctx.runtime, state, retrieval)
        output = data.get("output", data.get("result"))
        code = data.get("exit_code")
        response = responses.task_output(
            retrieval,
            task_id=state.id,
            task_type=state.type.value,
            status=state.status.value,
            description=state.description,
            output=output if isinstance(output, str) else "",
            exit_code=code if isinstance(code, int) else None,
        )
        return ToolResult(text, data=data, response=response)


#: :class:`TaskStopInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
TASK_STOP_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TaskStopTool`.",
    "properties": {
        "task_id": {"type": "string", "description": "The id of the task to stop."},
        "shell_id": {"type": "string", "description": "Deprecated: use task_id."},
    },
    "type": "object",
}


class TaskStopTool(Tool["TaskStopInput"]):
    """Stop a running background task."""

    name = "TaskStop"
    description = (
        "Stop a running background task (shell command or agent) by its id. The command and "
        "every process it started are terminated."
    )
    input_model = "taskloom.tools.inputs.tasks:TaskStopInput"
    static_schema = (input_model, TASK_STOP_SCHEMA)
    kind = "other"

    async def call(self, params: TaskStopInput, ctx: ToolContext) -> ToolResult:
        """Kill the task through the runtime."""
        task_id = params.task_id or params.shell_id or ""
        found = find_task(ctx.runtime, task_id, ctx.owner)
        if isinstance(found, ToolResult):
            return found
        if found.terminal:
            return tool_error(f"Task {task_id} is not running (status: {found.status.value})")
        # Returns once the task and everything it started (its agents' agents and shells
        # included) are gone, verified.
        task_id = found.id  # a teammate may be named by its agent id or name
        final = await ctx.runtime.kill(task_id, caller=ctx.owner, told=True)
        shell = as_shell(final)
        what = (shell.command if shell is not None else "") or final.description
        message = f"Successfully stopped task: {task_id} ({what})"
        data = {
            "message": message,
            "task_id": task_id,
            "task_type": final.type.value,
            "command": what,
            "status": final.status.value,
        }
        response = responses.task_stop(task_id, final.type.value, what)
        return ToolResult(message, data=data, response=response)
