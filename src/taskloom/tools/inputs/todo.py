"""Input models of :mod:`taskloom.tools.todo` (imported on first use)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from taskloom.tools.inputs import ToolInput

Status = Literal["pending", "in_progress", "completed"]


class TodoItem(ToolInput):
    """One todo."""

    content: str = Field(min_length=1, description="What needs to be done (imperative form)")
    status: Status = Field(description="pending, in_progress or completed")
    activeForm: str = Field(  # Claude Code's field name
        min_length=1, description="The task in the present continuous, shown while it runs"
    )


class TodoWriteInput(ToolInput):
    """TodoWrite's input."""

    todos: list[TodoItem] = Field(description="The updated todo list")
