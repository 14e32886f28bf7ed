"""The local agent task kind (``local_agent``) and the changes its state goes through.

The loop that drives a subagent lives above the task layer (``taskloom.agents``); this module
holds what the task layer itself must know of an agent task: how it is notified (its result and
its usage), what survives a resume, how long it stays visible after its end, what the task
tools show of it, and the state transitions its run records.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import ClassVar, Protocol, cast

from taskloom.tasks.kinds import (
    AgentFacts,
    Progress,
    Shown,
    TaskKind,
    answer_shown,
    register_kind,
)
from taskloom.tasks.types import AgentTaskState, TaskState, TaskStatus, TaskType

#: Agent tasks stay visible this long after they end, for a UI panel showing them.
PANEL_GRACE_S = 30.0
#: How many recent activities an agent's progress keeps.
MAX_ACTIVITIES = 5


class _Answering(Protocol):
    """What an agent-like task's state holds: its answer, its usage and its activities."""

    @property
    def result(self) -> str | None: ...
    @property
    def error(self) -> str | None: ...
    @property
    def evict_after(self) -> float | None: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def tool_uses(self) -> int: ...
    @property
    def activities(self) -> tuple[str, ...]: ...
    @property
    def agent_type(self) -> str: ...


class AgentKind(TaskKind):
    """Subagents: notified with their answer and usage, kept a while for a UI after their end.

    Another agent-like kind (a remote agent) derives from it with ``answer_class`` set to its
    own state class, which holds the fields of ``_Answering``.
    """

    task_type = TaskType.LOCAL_AGENT
    noun = "Agent"
    eviction_grace = PANEL_GRACE_S
    owns_tasks = True
    is_agent = True
    answer_class: ClassVar[type[TaskState]] = AgentTaskState

    def _answering(self, state: TaskState) -> _Answering | None:
        return cast(_Answering, state) if isinstance(state, self.answer_class) else None

    def resume_changes(self, existing: TaskState, resumed: TaskState) -> dict[str, object]:
        """The eviction clock starts again at the end."""
        keep: dict[str, object] = {}
        if existing.terminal and self._answering(resumed) is not None:
            keep["evict_after"] = None
        return keep

    def end_changes(self, state: TaskState, now: float) -> Mapping[str, object]:
        """Stamp the earliest eviction time, unless one was set already."""
        agent = self._answering(state)
        if agent is not None and agent.evict_after is None:
            return {"evict_after": now + self.eviction_grace}
        return {}

    def evictable(self, state: TaskState, now: float) -> bool:
        """Not before its stamped eviction time."""
        agent = self._answering(state)
        if agent is None:
            return super().evictable(state, now)
        return (agent.evict_after or 0) <= now

    def summary(self, state: TaskState) -> str:
        """Its end in a line; a stopped agent's says where its kept work is."""
        line = super().summary(state)  # with why it was stopped: a budget, its figures
        if (
            state.status == TaskStatus.KILLED
            and isinstance(state, AgentTaskState)
            and state.worktree_path
        ):
            branch = f" (branch {state.worktree_branch})" if state.worktree_branch else ""
            line += f"; its changes are kept in the worktree {state.worktree_path}{branch}"
        return line

    def agent_facts(self, state: TaskState) -> AgentFacts | None:
        """Its agent type (its figures are the ledger's)."""
        agent = self._answering(state)
        return AgentFacts(agent.agent_type) if agent is not None else None

    def result(self, state: TaskState) -> str | None:
        """Its final answer, or why it failed; a stopped agent has none."""
        agent = self._answering(state)
        if agent is None or state.status == TaskStatus.KILLED:
            return None
        return agent.result if state.status == TaskStatus.COMPLETED else agent.error

    def usage(self, state: TaskState) -> dict[str, int] | None:
        """Tokens, tool calls and wall time; none for a stopped agent (it did not finish)."""
        agent = self._answering(state)
        if agent is None or state.status == TaskStatus.KILLED:
            return None
        duration_ms = int(max(0.0, (state.end_time or state.start_time) - state.start_time) * 1000)
        return {
            "total_tokens": agent.total_tokens,
            "tool_uses": agent.tool_uses,
            "duration_ms": duration_ms,
        }

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """Its answer (or error) once there is one."""
        agent = self._answering(state)
        if agent is None:
            return Shown(())
        return answer_shown(agent.result, agent.error)

    def final_output(self, state: TaskState, limit: int) -> str:
        """Its answer, else its error."""
        agent = self._answering(state)
        if agent is None:
            return ""
        return agent.result or agent.error or ""

    def progress(self, state: TaskState) -> Progress:
        """Its tool calls, tokens and latest activity."""
        agent = self._answering(state)
        if agent is None:
            return Progress()
        last = agent.activities[-1] if agent.activities else ""
        if not isinstance(state, AgentTaskState):  # a remote one's subtree is its worker's
            return Progress(agent.tool_uses, agent.total_tokens, last)
        return Progress(
            agent.tool_uses,
            agent.total_tokens,
            last,
            state.subtree_tool_uses,
            state.subtree_tokens,
            state.subtree_cost_usd,
        )

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Its progress: tool calls, tokens and recent activities."""
        agent = self._answering(state)
        if agent is None:
            return {}
        end = state.end_time or time.time()  # still running: so far
        progress: dict[str, object] = {
            "tool_use_count": agent.tool_uses,
            "input_tokens": agent.input_tokens,
            "output_tokens": agent.output_tokens,
            "total_tokens": agent.total_tokens,
            "duration_ms": int(max(0.0, end - state.start_time) * 1000),
            "recent_activities": list(agent.activities),
            # It and every agent it started, cumulative (local agents: what budgets count).
            "subtree_tokens": agent.total_tokens,
            "subtree_tool_use_count": agent.tool_uses,
        }
        if isinstance(state, AgentTaskState):
            # A local agent's subtree, own cache tokens and costs (a remote one's are its
            # worker's).
            progress.update(
                subtree_tokens=state.subtree_tokens,
                subtree_tool_use_count=state.subtree_tool_uses,
                cache_read_input_tokens=state.cache_read_input_tokens,
                cache_creation_input_tokens=state.cache_creation_input_tokens,
                cost_usd=state.cost_usd,
                subtree_cost_usd=state.subtree_cost_usd,
            )
        return {"progress": progress}


# -- the transitions an agent's run records ---------------------------------------------------


def ended(
    state: AgentTaskState,
    totals: Mapping[str, int | float],
    *,
    result: str | None = None,
    error: str | None = None,
) -> AgentTaskState:
    """Completed with ``result``, or failed with ``error``; a task already ended is kept."""
    if state.terminal:
        return state
    status = TaskStatus.COMPLETED if error is None else TaskStatus.FAILED
    return state.replace(status=status, result=result, error=error, **totals)


def killed(state: AgentTaskState) -> AgentTaskState:
    """Stopped (a task already ended is kept)."""
    return state if state.terminal else state.replace(status=TaskStatus.KILLED)


def progressed(
    state: AgentTaskState, activities: list[str], totals: Mapping[str, int | float]
) -> AgentTaskState:
    """One more turn: its latest activities (the last few kept) and usage so far."""
    recent = (*state.activities, *activities)[-MAX_ACTIVITIES:]
    return state.replace(activities=tuple(recent), **totals)


def failed_to_start(state: AgentTaskState, error: str) -> AgentTaskState:
    """Nothing ran: failed, and not notified (the caller is told by the error itself)."""
    if state.terminal:
        return state
    return state.replace(status=TaskStatus.FAILED, error=error, notified=True)


def resumed(state: AgentTaskState) -> AgentTaskState:
    """Running again in the background under the same id, its last outcome cleared."""
    return state.replace(
        status=TaskStatus.RUNNING,
        is_backgrounded=True,
        result=None,
        error=None,
        stopped_reason=None,
        partial=False,
        worktree_path=None,
        worktree_branch=None,
    )


register_kind(AgentKind())

__all__ = [
    "MAX_ACTIVITIES",
    "PANEL_GRACE_S",
    "AgentKind",
    "ended",
    "failed_to_start",
    "killed",
    "progressed",
    "resumed",
]
