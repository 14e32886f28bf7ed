"""Input models of :mod:`taskloom.teams.task_tools` (imported on first use)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from taskloom.tools.inputs import ToolInput

STATUS_DESCRIPTION = (
    "in_progress when you start (claims it if nobody owns it), completed when done, deleted "
    "to remove it."
)
Status = Literal["pending", "in_progress", "completed", "deleted"]


class TaskCreateInput(ToolInput):
    """Input of :class:`TaskCreateTool`."""

    subject: str = Field(description="A brief title, in the imperative (Run the tests).")
    description: str = Field(description="What needs to be done, and how to know it is done.")
    activeForm: str | None = Field(
        default=None, description="Shown while the task runs, present continuous (Running tests)."
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Arbitrary data to attach to the task."
    )


class TaskGetInput(ToolInput):
    """Input of :class:`TaskGetTool`."""

    taskId: str = Field(description='The task\'s number, such as "1".')


class TaskListInput(ToolInput):
    """Input of :class:`TaskListTool`."""


class TaskUpdateInput(ToolInput):
    """Input of :class:`TaskUpdateTool`."""

    taskId: str = Field(description='The task\'s number, such as "1".')
    subject: str | None = Field(default=None, description="A new title.")
    description: str | None = Field(default=None, description="A new description.")
    activeForm: str | None = Field(default=None, description="A new present-continuous form.")
    status: Status | None = Field(
        default=None,
        description=STATUS_DESCRIPTION,
    )
    addBlocks: list[str] | None = Field(
        default=None, description="Tasks that cannot start until this one is completed."
    )
    addBlockedBy: list[str] | None = Field(
        default=None, description="Tasks that must be completed before this one starts."
    )
    owner: str | None = Field(
        default=None, description="The member who should do it ('' to unassign)."
    )
    metadata: dict[str, Any] | None = Field(
        default=None, description="Keys to merge into the task's metadata (null removes one)."
    )
