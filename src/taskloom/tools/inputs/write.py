"""Input models of :mod:`taskloom.tools.write` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class WriteInput(ToolInput):
    """Input of :class:`Write`."""

    file_path: str = Field(description="The absolute path of the file to write.")
    content: str = Field(description="The complete new content of the file.")
