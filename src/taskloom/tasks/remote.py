"""The remote agent task kind (``remote_agent``, prefix ``r``) and its state transitions.

A remote agent is a subagent that runs on a Ray cluster (:mod:`taskloom.remote`), on a copy of
the project; to its owner it looks like a local background agent: the same notification (its
answer and usage), its progress streamed into its output file and task events, TaskOutput and
TaskStop. What it changed comes back as a branch of the owner's repository, named in its
result. Nothing here knows Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from taskloom.tasks.agent import MAX_ACTIVITIES, PANEL_GRACE_S
from taskloom.tasks.kinds import Progress, Shown, TaskKind, answer_shown, register_kind
from taskloom.tasks.types import TaskState, TaskStatus, TaskType


@dataclass(frozen=True, kw_only=True, slots=True)
class RemoteAgentTaskState(TaskState):
    """A subagent on a Ray cluster (``remote_agent``).

    Attributes:
        agent_type: Its agent type.
        prompt: The task it was given.
        name: The name it was spawned with, if any.
        is_backgrounded: Whether it runs in the background (its caller went on).
        result: Its final answer (with the branch its changes are on, if any).
        error: Why it failed.
        total_tokens: Tokens used so far.
        input_tokens: Input tokens so far.
        output_tokens: Output tokens so far.
        tool_uses: Tool calls made so far.
        activities: Its latest activities (the last few).
        cluster: The Ray cluster it runs on (an address, or ``local``).
        branch: The branch holding what it changed (``taskloom/remote-<id8>``), if anything.
        diffstat: What that branch changes, as ``git diff --stat`` says.
        evict_after: Earliest time it may be evicted after its end.
    """

    TYPE: ClassVar[TaskType] = TaskType.REMOTE_AGENT
    type: TaskType = TaskType.REMOTE_AGENT
    agent_type: str = ""
    prompt: str = ""
    name: str | None = None
    is_backgrounded: bool = True
    result: str | None = None
    error: str | None = None
    total_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_uses: int = 0
    activities: tuple[str, ...] = ()
    cluster: str = ""
    branch: str | None = None
    diffstat: str = ""
    evict_after: float | None = None


class RemoteAgentKind(TaskKind):
    """Remote agents: told as a local agent is, kept a while for a UI after their end."""

    task_type = TaskType.REMOTE_AGENT
    state_class = RemoteAgentTaskState
    noun = "Remote agent"
    eviction_grace = PANEL_GRACE_S

    def end_changes(self, state: TaskState, now: float) -> Mapping[str, object]:
        """Stamp the earliest eviction time, unless one was set already."""
        if isinstance(state, RemoteAgentTaskState) and state.evict_after is None:
            return {"evict_after": now + self.eviction_grace}
        return {}

    def evictable(self, state: TaskState, now: float) -> bool:
        """Not before its stamped eviction time."""
        if not isinstance(state, RemoteAgentTaskState):
            return super().evictable(state, now)
        return (state.evict_after or 0) <= now

    def result(self, state: TaskState) -> str | None:
        """Its final answer, or why it failed; a stopped agent has none."""
        if not isinstance(state, RemoteAgentTaskState) or state.status == TaskStatus.KILLED:
            return None
        return state.result if state.status == TaskStatus.COMPLETED else state.error

    def usage(self, state: TaskState) -> dict[str, int] | None:
        """Tokens, tool calls and wall time; none for a stopped agent."""
        if not isinstance(state, RemoteAgentTaskState) or state.status == TaskStatus.KILLED:
            return None
        duration_ms = int(max(0.0, (state.end_time or state.start_time) - state.start_time) * 1000)
        return {
            "total_tokens": state.total_tokens,
            "tool_uses": state.tool_uses,
            "duration_ms": duration_ms,
        }

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """Its answer (or error) once there is one."""
        if not isinstance(state, RemoteAgentTaskState):
            return Shown(())
        return answer_shown(state.result, state.error)

    def final_output(self, state: TaskState, limit: int) -> str:
        """Its answer, else its error."""
        if not isinstance(state, RemoteAgentTaskState):
            return ""
        return state.result or state.error or ""

    def progress(self, state: TaskState) -> Progress:
        """Its tool calls, tokens and latest activity."""
        if not isinstance(state, RemoteAgentTaskState):
            return Progress()
        last = state.activities[-1] if state.activities else ""
        return Progress(state.tool_uses, state.total_tokens, last)

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Its progress, as a local agent's is shown."""
        if not isinstance(state, RemoteAgentTaskState):
            return {}
        return {
            "progress": {
                "tool_use_count": state.tool_uses,
                "input_tokens": state.input_tokens,
                "output_tokens": state.output_tokens,
                "total_tokens": state.total_tokens,
                "recent_activities": list(state.activities),
            }
        }


# -- the transitions its run records ----------------------------------------------------------


def progressed(
    state: RemoteAgentTaskState, activities: list[str], totals: Mapping[str, int]
) -> RemoteAgentTaskState:
    """Progress streamed back: its latest activities (the last few kept) and usage so far."""
    if state.terminal:
        return state
    recent = (*state.activities, *activities)[-MAX_ACTIVITIES:]
    return state.replace(activities=tuple(recent), **totals)


def ended(
    state: RemoteAgentTaskState,
    *,
    result: str | None = None,
    error: str | None = None,
    killed: bool = False,
) -> RemoteAgentTaskState:
    """Completed with ``result``, failed with ``error``, or killed; an ended task is kept."""
    if state.terminal:
        return state
    if killed:
        return state.replace(status=TaskStatus.KILLED, error=error)
    status = TaskStatus.COMPLETED if error is None else TaskStatus.FAILED
    return state.replace(status=status, result=result, error=error)


def failed_to_start(state: RemoteAgentTaskState, error: str) -> RemoteAgentTaskState:
    """Nothing ran: failed, and not notified (the caller is told by the error itself)."""
    if state.terminal:
        return state
    return state.replace(status=TaskStatus.FAILED, error=error, notified=True)


register_kind(RemoteAgentKind())

__all__ = ["RemoteAgentKind", "RemoteAgentTaskState", "ended", "failed_to_start", "progressed"]
