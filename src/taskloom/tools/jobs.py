"""The generic job tools (``job_output``, ``job_list``, ``job_kill``).

The same runtime as TaskOutput/TaskStop under another vocabulary, chosen with the setting
``toolProfile: "jobs"``. While a job lives ``job_output`` reports only its status; once it has
settled it returns the final output, as often as asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskloom.tasks.kinds import kind_of
from taskloom.tasks.types import TaskState
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error
from taskloom.tools.tasks import MAX_OUTPUT_BYTES, find_task

if TYPE_CHECKING:
    from taskloom.tools.inputs.jobs import JobIdInput, JobListInput


def _final_output(state: TaskState) -> str:
    return kind_of(state).final_output(state, MAX_OUTPUT_BYTES)


def _line(state: TaskState) -> str:
    note = kind_of(state).status_note(state)
    return f"{state.id} {state.type.value} {state.status.value}{note} {state.description}"


#: :class:`JobIdInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
JOB_ID_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "A job id.",
    "properties": {
        "job_id": {"description": "The job id returned when the job started.", "type": "string"}
    },
    "required": ["job_id"],
    "type": "object",
}


class JobOutputTool(Tool["JobIdInput"]):
    """``job_output``: a job's status, and its final output once settled."""

    name = "job_output"
    description = (
        "Get a background job's status; once it has finished, its final output. Keep the "
        "job ids you start, do independent work instead of polling, and collect the jobs "
        "you need before answering."
    )
    input_model = "taskloom.tools.inputs.jobs:JobIdInput"
    static_schema = (input_model, JOB_ID_SCHEMA)
    kind = "other"
    concurrency_safe = True

    async def call(self, params: JobIdInput, ctx: ToolContext) -> ToolResult:
        """Report the job."""
        found = find_task(ctx.runtime, params.job_id, ctx.owner)
        if isinstance(found, ToolResult):
            return found
        if not found.terminal:
            return ToolResult(f"{_line(found)}\n(still running; you will be notified)")
        return ToolResult(f"{_line(found)}\n{_final_output(found)}".rstrip())


#: :class:`JobListInput`'s closed schema written out (see ``Tool.static_schema``), so that
#: offering the tool does not build the model; tests check it is the generated one.
JOB_LIST_SCHEMA: dict[str, Any] = {
    "additionalProperties": False,
    "description": "No input.",
    "properties": {},
    "type": "object",
}


class JobListTool(Tool["JobListInput"]):
    """``job_list``: the caller's jobs."""

    name = "job_list"
    description = "List your background jobs with their status."
    input_model = "taskloom.tools.inputs.jobs:JobListInput"
    static_schema = (input_model, JOB_LIST_SCHEMA)
    kind = "other"
    concurrency_safe = True

    async def call(self, params: JobListInput, ctx: ToolContext) -> ToolResult:
        """List jobs owned by the caller."""
        owner = None if ctx.owner == ctx.runtime.session_id else ctx.owner
        jobs = ctx.runtime.list(owner=owner, include_evicted=True)
        if not jobs:
            return ToolResult("No jobs.")
        return ToolResult("\n".join(_line(j) for j in jobs))


class JobKillTool(Tool["JobIdInput"]):
    """``job_kill``: cancel a job."""

    name = "job_kill"
    description = "Cancel a running background job."
    input_model = "taskloom.tools.inputs.jobs:JobIdInput"
    static_schema = (input_model, JOB_ID_SCHEMA)
    kind = "other"

    async def call(self, params: JobIdInput, ctx: ToolContext) -> ToolResult:
        """Kill the job."""
        found = find_task(ctx.runtime, params.job_id, ctx.owner)
        if isinstance(found, ToolResult):
            return found
        if found.terminal:
            return tool_error(f"Job {params.job_id} is not running ({found.status.value})")
        final = await ctx.runtime.kill(params.job_id, caller=ctx.owner, told=True)
        return ToolResult(f"Cancelled: {_line(final)}")
