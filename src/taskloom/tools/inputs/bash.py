"""Input models of :mod:`taskloom.tools.bash` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class BashInput(ToolInput):
    """Input of :class:`BashTool`."""

    command: str = Field(description="The command to run.")
    timeout: int | None = Field(
        default=None,
        ge=1,
        description="Timeout in milliseconds (default 120000; above 600000 counts as 600000).",
    )
    description: str | None = Field(default=None, description="What the command does.")
    run_in_background: bool | None = Field(
        default=None, description="Run in the background and return at once."
    )
