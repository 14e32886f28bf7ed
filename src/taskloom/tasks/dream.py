"""The dream task kind (``dream``, prefix ``d``): agent memory consolidated in the background.

A dream is one low-priority agent (driven above the task layer, by
:mod:`taskloom.agents.dream`) that tidies the session's agent memory while the session is
idle. It is the session's housekeeping, not work a model asked for: its owner's run never
waits for it (``busy`` is no), and its end is not a ``<task-notification>`` (the model did not
start it and has nothing to do with it); what it changed is in its output file, its result
(TaskOutput, the task events, the REPL's panel) and its state's counts.
"""

from __future__ import annotations

from typing import ClassVar

from taskloom._dataclass import dataclass
from taskloom.tasks.kinds import Progress, Shown, ShownField, TaskKind, register_kind
from taskloom.tasks.types import TaskState, TaskStatus, TaskType

#: A dream stays visible this long after it ends, for a UI panel showing it.
PANEL_GRACE_S = 30.0


@dataclass(frozen=True, kw_only=True, slots=True)
class DreamTaskState(TaskState):
    """A dream consolidating agent memory (``dream``).

    Attributes:
        trigger: What started it: ``idle`` (the session was idle long enough) or ``manual``.
        directories: The memory directories it works on.
        changes: How many files it changed (written or removed) so far.
        turns: Model requests it made so far.
        total_tokens: Tokens it used so far.
        tool_uses: Tool calls it made so far.
        result: Its change list and its own summary, once it ended.
        error: Why it failed, if it did.
    """

    TYPE: ClassVar[TaskType] = TaskType.DREAM
    type: TaskType = TaskType.DREAM
    trigger: str = "manual"
    directories: tuple[str, ...] = ()
    changes: int = 0
    turns: int = 0
    total_tokens: int = 0
    tool_uses: int = 0
    result: str | None = None
    error: str | None = None


def _dream(state: TaskState) -> DreamTaskState | None:
    return state if isinstance(state, DreamTaskState) else None


def progress_line(state: DreamTaskState) -> str:
    """``2 files changed, 3 turns``: how far it is."""
    files = "file" if state.changes == 1 else "files"
    return f"{state.changes} {files} changed, {state.turns} turns"


class DreamKind(TaskKind):
    """Dreams: background housekeeping of agent memory, shown but never notified."""

    task_type = TaskType.DREAM
    state_class = DreamTaskState
    noun = "Dream"
    eviction_grace = PANEL_GRACE_S
    is_agent = True  # a model's loop: stopped with every agent when the session's budget ends

    def busy(self, state: TaskState) -> bool:
        """Never: low priority, its owner's run does not wait for it."""
        return False

    def notifies(self, state: TaskState) -> bool:
        """Never: the model did not start it; its output and result say what it did."""
        return False

    def result(self, state: TaskState) -> str | None:
        """Its change list and summary, else why it failed."""
        dream = _dream(state)
        if dream is None:
            return None
        return dream.result if dream.result is not None else dream.error

    def usage(self, state: TaskState) -> dict[str, int] | None:
        """Tokens, tool calls and wall time it used."""
        dream = _dream(state)
        if dream is None:
            return None
        duration_ms = int(max(0.0, (state.end_time or state.start_time) - state.start_time) * 1000)
        return {
            "total_tokens": dream.total_tokens,
            "tool_uses": dream.tool_uses,
            "duration_ms": duration_ms,
        }

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """Its progress, then its result (or error) once there is one."""
        dream = _dream(state)
        if dream is None:
            return Shown(())
        line = progress_line(dream)
        fields = [ShownField("progress", line, f"<progress>{line}</progress>")]
        answer = dream.result if dream.result is not None else dream.error
        if answer is not None:
            answer = answer[:limit]
            fields.append(ShownField("result", answer, f"<result>\n{answer}\n</result>"))
        return Shown(tuple(fields))

    def final_output(self, state: TaskState, limit: int) -> str:
        """Its result, else its error, else its progress."""
        dream = _dream(state)
        if dream is None:
            return ""
        return (dream.result or dream.error or progress_line(dream))[:limit]

    def status_note(self, state: TaskState) -> str:
        """`` 2 changed``: the files it changed."""
        dream = _dream(state)
        return f" {dream.changes} changed" if dream is not None else ""

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """What started it, where it works and how far it is."""
        dream = _dream(state)
        if dream is None:
            return {}
        return {
            "dream": {
                "trigger": dream.trigger,
                "directories": list(dream.directories),
                "changes": dream.changes,
                "turns": dream.turns,
            }
        }

    def progress(self, state: TaskState) -> Progress:
        """Its calls and tokens so far, and the files it changed."""
        dream = _dream(state)
        if dream is None:
            return Progress()
        return Progress(dream.tool_uses, dream.total_tokens, progress_line(dream))

    def summary(self, state: TaskState) -> str:
        """Its end in a line, with the files it changed."""
        line = super().summary(state)
        dream = _dream(state)
        if dream is None or state.status == TaskStatus.FAILED:
            return line
        return f"{line} ({progress_line(dream)})"


register_kind(DreamKind())

__all__ = ["PANEL_GRACE_S", "DreamKind", "DreamTaskState", "progress_line"]
