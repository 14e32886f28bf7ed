"""The shell task kind (``local_bash``): how a command's end is told and its output shown.

The processes themselves are run and supervised by :mod:`taskloom.tasks.shell`; this is what
the runtime, the notifications and the task tools ask of a shell task.
"""

from __future__ import annotations

from collections.abc import Mapping

from taskloom.errors import OutputError
from taskloom.tasks.kinds import Progress, Shown, ShownField, TaskKind, register_kind
from taskloom.tasks.output import read_delta, read_tail
from taskloom.tasks.types import Priority, ShellTaskState, TaskState, TaskStatus, TaskType


class ShellKind(TaskKind):
    """Shell commands: notified with their exit code, read by TaskOutput as they run."""

    task_type = TaskType.LOCAL_BASH
    noun = "Background command"
    is_process = True

    def killed(self, state: TaskState) -> TaskState:
        """Stopped, and marked as interrupted rather than exited."""
        if state.terminal:
            return state
        return state.replace(status=TaskStatus.KILLED, interrupted=True)

    def told_by_stop(self, state: TaskState) -> TaskState:
        """Notified already: the stop's result is the notice (a killed shell has no more)."""
        return state if state.terminal else state.replace(notified=True)

    def started_by(self, state: TaskState, agent_id: str) -> bool:
        """Its owner, or the agent that ran it on another owner's behalf."""
        return state.owner == agent_id or (
            isinstance(state, ShellTaskState) and state.agent_id == agent_id
        )

    def settle_changes(self, status: TaskStatus) -> Mapping[str, object]:
        """Interrupted if it was killed (not if it ended unseen); it has no process now."""
        return {"interrupted": status == TaskStatus.KILLED, "pid": None}

    def ends_by_itself(self, state: TaskState) -> bool:
        """No: a command may run forever."""
        return False

    def label(self, state: TaskState) -> str:
        """Its description, else its command line."""
        noun = "Monitor" if isinstance(state, ShellTaskState) and state.kind == "monitor" else None
        return f'{noun or self.noun} "{self.title(state)}"'

    def short_noun(self) -> str:
        """``shell``."""
        return "shell"

    def title(self, state: TaskState) -> str:
        """Its description, else its command line."""
        command = state.command if isinstance(state, ShellTaskState) else ""
        return state.description or command

    def summary(self, state: TaskState) -> str:
        """Its end, with its exit code when it is known."""
        if not isinstance(state, ShellTaskState):
            return super().summary(state)
        label = self.label(state)
        if state.status == TaskStatus.KILLED:
            return super().summary(state)
        if state.status == TaskStatus.COMPLETED:
            if state.exit_code is None:  # a detached command whose exit nobody collected
                return f"{label} completed (exit code unknown)"
            return f"{label} completed (exit code {state.exit_code})"
        if state.exit_code is None:
            return f"{label} failed"
        return f"{label} failed with exit code {state.exit_code}"

    def priority(self, state: TaskState) -> Priority:
        """Monitors ask for prompt attention; ordinary commands wait for a turn boundary."""
        if isinstance(state, ShellTaskState) and state.kind == "monitor":
            return "next"
        return "later"

    def output_fields(self, state: TaskState, limit: int) -> Shown:
        """Its exit code, and the output written since the last read (which it consumes)."""
        if not isinstance(state, ShellTaskState):
            return Shown(())
        fields = []
        if state.exit_code is not None:
            exit_line = f"<exit_code>{state.exit_code}</exit_code>"
            fields.append(ShownField("exit_code", state.exit_code, exit_line))
        chunk, offset = read_delta(state.output_file, state.output_offset, limit)
        text = chunk.decode("utf-8", "replace")
        more, _ = read_delta(state.output_file, offset, 1)
        if more:
            text += f"\n[more output follows; call TaskOutput again or read {state.output_file}]"
        xml = f"<output>\n{text.rstrip()}\n</output>" if text.strip() else "<output/>"
        fields.append(ShownField("output", text, xml))
        return Shown(tuple(fields), {"output_offset": offset})

    def final_output(self, state: TaskState, limit: int) -> str:
        """The tail of its output file."""
        if not state.output_file:
            return ""
        return read_tail(state.output_file, limit).decode("utf-8", "replace")

    def status_note(self, state: TaskState) -> str:
        """Its exit code, once it has one."""
        if isinstance(state, ShellTaskState) and state.exit_code is not None:
            return f" exit={state.exit_code}"
        return ""

    def event_fields(self, state: TaskState) -> dict[str, object]:
        """Its exit code (None while it runs)."""
        if not isinstance(state, ShellTaskState):
            return {}
        return {"exit_code": state.exit_code}

    def progress(self, state: TaskState) -> Progress:
        """The last line it printed (read from the end of its output file)."""
        if not state.output_file:
            return Progress()
        try:
            tail = read_tail(state.output_file, _TAIL_BYTES).decode("utf-8", "replace")
        except OutputError:  # unreadable for now: the row shows no activity
            return Progress()
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        return Progress(activity=lines[-1] if lines else "")


#: How much of a running command's output the panel reads for its last line.
_TAIL_BYTES = 512


register_kind(ShellKind())

__all__ = ["ShellKind"]
