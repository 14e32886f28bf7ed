"""The workflow task kind (``local_workflow``, prefix ``w``) and its state transitions.

A workflow runs many subagents as one task (driven above the task layer, by
:mod:`taskloom.agents.workflow`): the agents are its children (their owner is the workflow's
task id, so stopping it stops them), its state counts them (``done/total``), and its end is
told to its owner once, with what every agent answered and where each one's output is.
"""

from __future__ import annotations

from typing import ClassVar

from taskloom._dataclass import dataclass
from taskloom.tasks.kinds import Progress, Shown, ShownField, TaskKind, register_kind
from taskloom.tasks.types import TaskState, TaskStatus, TaskType

#: A workflow stays visible this long after it ends, for a UI panel showing it.
PANEL_GRACE_S = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkflowTaskState(TaskState):
    """A workflow of subagents (``local_workflow``).

    Attributes:
        agent_type: The agent type its agents run as.
        total: How many agents it runs (its items, and its reduce step if it has one).
        done: How many of them have ended (completed or failed).
        failed: How many of them failed (or could not start).
        running: How many of them are running now.
        concurrency: The most of them it runs at once.
        total_tokens: Tokens its ended agents used, summed.
        tool_uses: Tool calls its ended agents made, summed.
        result: The aggregated result, once it ended.
        error: Why it failed, if it did.
    """

    TYPE: ClassVar[TaskType] = TaskType.LOCAL_WORKFLOW
    type: TaskType = TaskType.LOCAL_WORKFLOW
    agent_type: str = ""
    total: int = 0
    done: int = 0
    failed: int = 0
    running: int = 0
    concurrency: int = 0
    total_tokens: int = 0
    tool_uses: int = 0
    result: str | None = None
    error: str | None = None


def _workflow(state: TaskState) -> WorkflowTaskState | None:
    return state if isinstance(state, WorkflowTaskState) else None


def progress_line(state: WorkflowTaskState) -> str:
    """``12/50 done, 1 failed, 8 running``: how far it is."""
    line = f"{state.done}/{state.total} done"
    if state.failed:
        line += f", {state.failed} failed"
    if state.running:
        line += f", {state.running} running"
    return line


class WorkflowKind(TaskKind):
    """Workflows: their agents are their tasks; notified once, with every agent's outcome."""

    task_type = TaskType.LOCAL_WORKFLOW
    state_class = WorkflowTaskState
    noun = "Workflow"
    eviction_grace = PANEL_GRACE_S
    owns_tasks = True

    def summary(self, state: TaskState) -> str:
        """Its end in a line, with its counts."""
        line = super().summary(state)
        flow = _workflow(state)
        if flow is None:
            return line
        return f"{line} ({progress_line(flow.replace(running=0))})"

    def result(self, state: TaskState) -> str | None:
        """The aggregated result, else why it failed.

        A workflow stopped by TaskStop has none; one a budget stopped has what its agents
        came to until then.
        """
        flow = _workflow(state)
        if flow is None:
            return None
        if state.status == TaskStatus.KILLED:
            return flow.result
        return flow.result if flow.result is not None else flow.error

    def usage(self, state: TaskState) -> dict[str, int] | None:
        """What its agents used, summed, and its wall time."""
        flow = _workflow(state)
        if flow is None:
            return None
        duration_ms = int(max(0.0, (state.end_time or state.start_time) - state.start_time) * 1000)
        return {
            "total_tokens": flow.total_tokens,
            "tool_uses": flow.tool_uses,
            "duration_ms": duration_ms,
        }

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """Its progress, then its result (or error) once there is one."""
        flow = _workflow(state)
        if flow is None:
            return Shown(())
        line = progress_line(flow)
        fields = [ShownField("progress", line, f"<progress>{line}</progress>")]
        answer = flow.result if flow.result is not None else flow.error
        if answer is not None:
            answer = answer[:limit]
            fields.append(ShownField("result", answer, f"<result>\n{answer}\n</result>"))
        return Shown(tuple(fields))

    def final_output(self, state: TaskState, limit: int) -> str:
        """Its result, else its error, else its progress."""
        flow = _workflow(state)
        if flow is None:
            return ""
        return (flow.result or flow.error or progress_line(flow))[:limit]

    def status_note(self, state: TaskState) -> str:
        """`` 12/50``: its agents that ended, of all."""
        flow = _workflow(state)
        return f" {flow.done}/{flow.total}" if flow is not None else ""

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Its counts."""
        flow = _workflow(state)
        if flow is None:
            return {}
        return {
            "workflow": {
                "total": flow.total,
                "done": flow.done,
                "failed": flow.failed,
                "running": flow.running,
                "concurrency": flow.concurrency,
            }
        }

    def progress(self, state: TaskState) -> Progress:
        """Its agents' calls and tokens so far, and how many of them ended."""
        flow = _workflow(state)
        if flow is None:
            return Progress()
        return Progress(flow.tool_uses, flow.total_tokens, progress_line(flow))


register_kind(WorkflowKind())

__all__ = ["PANEL_GRACE_S", "WorkflowKind", "WorkflowTaskState", "progress_line"]
