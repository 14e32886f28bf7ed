"""Input models of :mod:`taskloom.tools.worktree_tools` (imported on first use)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class EnterWorktreeInput(ToolInput):
    """Input of :class:`EnterWorktreeTool`."""

    name: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$",
        description="A name for the worktree (letters, digits, '-', '_', '.'); random if omitted.",
    )


class ExitWorktreeInput(ToolInput):
    """Input of :class:`ExitWorktreeTool`."""

    action: Literal["keep", "remove"] = Field(
        description="keep: leave the worktree and its branch on disk; remove: delete both."
    )
    discard_changes: bool = Field(
        default=False,
        description="With remove: confirm that uncommitted changes and commits may be lost.",
    )
