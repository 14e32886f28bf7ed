"""The teammate task kind (``in_process_teammate``, prefix ``t``) and its state transitions.

A teammate is a long-lived agent of a team, driven above the task layer
(:mod:`taskloom.teams.teammate`), in this process or in a tmux pane of its own. Between its
turns it is idle, not ended: it waits for mail. Its end (a shutdown, a kill) is told to the
lead through the team's mailbox protocol (``shutdown_approved``, idle notifications), so its
kind produces no ``<task-notification>`` for those; a teammate that failed (its process died,
its loop broke) is reported by one, since nothing else would tell the lead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from taskloom._dataclass import dataclass
from taskloom.tasks.kinds import Progress, Shown, TaskKind, answer_shown, register_kind
from taskloom.tasks.types import TaskState, TaskStatus, TaskType
from taskloom.tasks.usage import Reported, report_in

#: The backend of a teammate whose calls this process makes (any other: its own process).
IN_PROCESS = "in-process"


@dataclass(frozen=True, kw_only=True, slots=True)
class TeammateTaskState(TaskState):
    """An in-process teammate (``in_process_teammate``).

    Attributes:
        agent_id: Its agent id, ``<name>@<team>`` (its mailbox address too).
        agent_name: Its name in the team.
        team_name: The team it belongs to.
        color: The colour its messages are shown in, if any.
        prompt: The task it was spawned with.
        model: The model it runs on, if not the session's.
        plan_mode_required: Whether it must have its plan approved before it acts.
        is_idle: Whether it waits for mail (its last turn is over).
        shutdown_requested: Whether the lead asked it to shut down.
        total_tokens: Tokens used so far (latest input, with cache, plus output so far).
        input_tokens: Input tokens of the latest request (input plus cache).
        output_tokens: Output tokens so far.
        cache_read_input_tokens: Tokens read from the prompt cache so far, summed.
        cache_creation_input_tokens: Tokens written to the prompt cache so far, summed.
        tool_uses: Tool calls made so far.
        result: Its last answer (the text of its last turn).
        error: Why its last turn failed, if it did (it stays alive all the same).
        backend: What it runs in: ``in-process``, or ``tmux`` (a process in a pane).
        pane_id: Its tmux pane (``%3``), for a teammate in a pane.
        pid: Its process, for a teammate in a pane (0 otherwise).
        pid_start: That process's start (seconds since boot), to know it again.
        spent_tokens: Tokens its responses used so far, summed (input, cache reads and writes,
            output): what budgets count of it; its lead reads a pane teammate's from its record.
        cost_usd: What its requests cost so far (by the price table).
        usage_by_model: Its tokens so far per model (``input_tokens``, ``output_tokens``,
            ``cache_read_input_tokens``, ``cache_creation_input_tokens``): for a pane
            teammate, what its lead's usage and cost count of it.
    """

    TYPE: ClassVar[TaskType] = TaskType.IN_PROCESS_TEAMMATE
    type: TaskType = TaskType.IN_PROCESS_TEAMMATE
    agent_id: str = ""
    agent_name: str = ""
    team_name: str = ""
    color: str | None = None
    prompt: str = ""
    model: str | None = None
    plan_mode_required: bool = False
    is_idle: bool = False
    shutdown_requested: bool = False
    total_tokens: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    tool_uses: int = 0
    result: str | None = None
    error: str | None = None
    backend: str = IN_PROCESS
    pane_id: str = ""
    pid: int = 0
    pid_start: float = 0.0
    spent_tokens: int = 0
    cost_usd: float = 0.0
    usage_by_model: dict[str, dict[str, int]] | None = None


class TeammateKind(TaskKind):
    """Teammates: they own their shells and agents; their end is told through the mailbox."""

    task_type = TaskType.IN_PROCESS_TEAMMATE
    state_class = TeammateTaskState
    noun = "Teammate"
    owns_tasks = True
    is_agent = True
    shows_owner = False  # it works for its team

    def busy(self, state: TaskState) -> bool:
        """At work while a turn runs; idle between turns (its lead need not wait then)."""
        return not (isinstance(state, TeammateTaskState) and state.is_idle)

    def notifies(self, state: TaskState) -> bool:
        """Only a failure: the lead hears of a shutdown or a kill through the team protocol."""
        return state.status == TaskStatus.FAILED

    def result(self, state: TaskState) -> str | None:
        """Its last answer, or why its last turn failed."""
        if not isinstance(state, TeammateTaskState):
            return None
        return state.error if state.status == TaskStatus.FAILED else state.result

    def usage(self, state: TaskState) -> dict[str, int] | None:
        """Tokens and tool calls so far."""
        if not isinstance(state, TeammateTaskState):
            return None
        return {"total_tokens": state.total_tokens, "tool_uses": state.tool_uses}

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """Its last answer (or error) once there is one."""
        if not isinstance(state, TeammateTaskState):
            return Shown(())
        return answer_shown(state.result, state.error)

    def final_output(self, state: TaskState, limit: int) -> str:
        """Its last answer, else its error."""
        if not isinstance(state, TeammateTaskState):
            return ""
        return state.result or state.error or ""

    def status_note(self, state: TaskState) -> str:
        """`` idle`` while it waits for mail."""
        if isinstance(state, TeammateTaskState) and state.is_idle and not state.terminal:
            return " idle"
        return ""

    def addresses(self, state: TaskState) -> tuple[str, ...]:
        """Its agent id (``alice@team``) and its name: its lead may use either."""
        if not isinstance(state, TeammateTaskState):
            return ()
        return (state.agent_id, state.agent_name)

    def progress(self, state: TaskState) -> Progress:
        """Its tool calls and tokens; whether it works or waits for mail."""
        if not isinstance(state, TeammateTaskState):
            return Progress()
        return Progress(state.tool_uses, state.total_tokens, "idle" if state.is_idle else "")

    def usage_from_elsewhere(self, state: TaskState) -> Reported | None:
        """A pane teammate's process's reports, under its agent id; None for one in-process."""
        if not isinstance(state, TeammateTaskState) or state.backend == IN_PROCESS:
            return None
        by_model = report_in(state)
        return Reported(state.agent_id, by_model, state.tool_uses) if by_model else None

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Who it is, whether it is idle, and its usage."""
        if not isinstance(state, TeammateTaskState):
            return {}
        return {
            "teammate": {
                "agent_id": state.agent_id,
                "is_idle": state.is_idle,
                "shutdown_requested": state.shutdown_requested,
                "total_tokens": state.total_tokens,
                "tool_uses": state.tool_uses,
            }
        }


# -- the transitions a teammate's run records -------------------------------------------------


def working(state: TeammateTaskState) -> TeammateTaskState:
    """A turn started (mail woke it); an ended task is kept."""
    return state if state.terminal else state.replace(is_idle=False)


def idle(
    state: TeammateTaskState,
    totals: Mapping[str, object],
    *,
    result: str | None = None,
    error: str | None = None,
) -> TeammateTaskState:
    """Its turn is over (answered ``result``, or failed with ``error``): it waits for mail.

    A failed turn keeps the answer of the last turn that succeeded.
    """
    if state.terminal:
        return state
    changes: dict[str, object] = {"is_idle": True, "error": error, **totals}
    if result is not None:
        changes["result"] = result
    return state.replace(**changes)


def progressed(state: TeammateTaskState, totals: Mapping[str, object]) -> TeammateTaskState:
    """One more message in its conversation: its usage so far."""
    return state if state.terminal else state.replace(**totals)


def ended(
    state: TeammateTaskState,
    *,
    status: TaskStatus = TaskStatus.COMPLETED,
    error: str | None = None,
) -> TeammateTaskState:
    """Ended (``completed`` by a shutdown, ``killed``); a task already ended is kept."""
    if state.terminal:
        return state
    changes: dict[str, object] = {"status": status, "is_idle": False}
    if error is not None:
        changes["error"] = error
    return state.replace(**changes)


register_kind(TeammateKind())

__all__ = [
    "TeammateKind",
    "TeammateTaskState",
    "ended",
    "idle",
    "progressed",
    "working",
]
