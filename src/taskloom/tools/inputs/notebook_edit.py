"""Input models of :mod:`taskloom.tools.notebook_edit` (imported on first use)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class NotebookEditInput(ToolInput):
    """Input of :class:`NotebookEdit`."""

    notebook_path: str = Field(
        description="The absolute path to the Jupyter notebook file to edit (must be absolute, "
        "not relative)"
    )
    cell_id: str | None = Field(
        default=None,
        description="The ID of the cell to edit. When inserting a new cell, the new cell will be "
        "inserted after the cell with this ID, or at the beginning if not specified.",
    )
    new_source: str = Field(description="The new source for the cell")
    cell_type: Literal["code", "markdown"] | None = Field(
        default=None,
        description="The type of the cell (code or markdown). If not specified, it defaults to "
        "the current cell type. If using edit_mode=insert, this is required.",
    )
    edit_mode: Literal["replace", "insert", "delete"] | None = Field(
        default=None,
        description="The type of edit to make (replace, insert, delete). Defaults to replace.",
    )
