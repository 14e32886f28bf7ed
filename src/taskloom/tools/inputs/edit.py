"""Input models of :mod:`taskloom.tools.edit` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class EditInput(ToolInput):
    """Input of :class:`Edit`."""

    file_path: str = Field(description="The absolute path of the file to modify.")
    old_string: str = Field(description="The exact text to replace.")
    new_string: str = Field(description="The text to put in its place (must differ).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence of old_string (default false)."
    )
