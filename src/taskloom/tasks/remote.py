"""The remote agent task kind (``remote_agent``, prefix ``r``) and its state transitions.

A remote agent is a subagent that runs on a Ray cluster (:mod:`taskloom.remote`), on a copy of
the project; to its owner it looks like a local background agent: the same notification (its
answer and usage), its progress streamed into its output file and task events, TaskOutput and
TaskStop. What it changed comes back as a branch of the owner's repository, named in its
result. Nothing here knows Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from taskloom._dataclass import dataclass
from taskloom.tasks.agent import MAX_ACTIVITIES, AgentKind
from taskloom.tasks.kinds import register_kind
from taskloom.tasks.types import TaskState, TaskStatus, TaskType
from taskloom.tasks.usage import Reported, report_fields, report_in


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
        actor: The name of its detached actor (exit policy ``detach``), by which a later
            process of the session follows it again.
        seen: How many of its actor's events its output and state hold.
        repo: The repository its snapshot was taken of.
        snapshot_commit: The commit it started from (its changes come back on top of it).
        snapshot_ref: The ref keeping that commit until its changes are back.
        usage_by_model: Its tokens so far per model (``input_tokens``, ``output_tokens``,
            ``cache_read_input_tokens``, ``cache_creation_input_tokens``), as its worker
            reports them: what the session's cost and usage count of it.
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
    actor: str | None = None
    seen: int = 0
    repo: str | None = None
    snapshot_commit: str | None = None
    snapshot_ref: str | None = None
    usage_by_model: dict[str, dict[str, int]] | None = None


class RemoteAgentKind(AgentKind):
    """Remote agents: told as a local agent is, kept a while for a UI after their end."""

    task_type = TaskType.REMOTE_AGENT
    state_class = RemoteAgentTaskState
    answer_class = RemoteAgentTaskState
    noun = "Remote agent"
    owns_tasks = False  # its tasks are its worker's, on the cluster
    outlives_session = True  # detached: its actor goes on, and a resumed session follows it

    def usage_from_elsewhere(self, state: TaskState) -> Reported | None:
        """Its worker's reports, under its task id (its calls are made on the cluster)."""
        by_model = report_in(state)
        if not by_model or not isinstance(state, RemoteAgentTaskState):
            return None
        return Reported(state.id, by_model, state.tool_uses)


# -- the transitions its run records ----------------------------------------------------------


def progressed(
    state: RemoteAgentTaskState,
    activities: list[str],
    totals: Mapping[str, int],
    by_model: dict[str, dict[str, int]] | None = None,
) -> RemoteAgentTaskState:
    """Progress streamed back: its latest activities (the last few kept) and usage so far."""
    if state.terminal:
        return state
    recent = (*state.activities, *activities)[-MAX_ACTIVITIES:]
    more: dict[str, Any] = report_fields(by_model) if by_model is not None else {}
    return state.replace(activities=tuple(recent), **totals, **more)


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
