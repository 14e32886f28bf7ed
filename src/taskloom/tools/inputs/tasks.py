"""Input models of :mod:`taskloom.tools.tasks` (imported on first use)."""

from __future__ import annotations

from pydantic import Field, model_validator

from taskloom.tools.inputs import ToolInput

DEFAULT_WAIT_MS = 30_000
MAX_WAIT_MS = 600_000


class TaskOutputInput(ToolInput):
    """Input of :class:`TaskOutputTool`."""

    task_id: str = Field(description="The id of the task (from Bash, Agent or a notification).")
    block: bool = Field(default=True, description="Wait for the task to finish.")
    timeout: int = Field(
        default=DEFAULT_WAIT_MS, ge=0, le=MAX_WAIT_MS, description="Longest wait in ms."
    )


class TaskStopInput(ToolInput):
    """Input of :class:`TaskStopTool`."""

    task_id: str | None = Field(default=None, description="The id of the task to stop.")
    shell_id: str | None = Field(default=None, description="Deprecated: use task_id.")

    @model_validator(mode="after")
    def _one_id(self) -> TaskStopInput:
        if not (self.task_id or self.shell_id):
            raise ValueError("task_id is required")
        return self
