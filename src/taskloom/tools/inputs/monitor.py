"""Input models of :mod:`taskloom.tools.monitor` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput


class MonitorInput(ToolInput):
    """Input of :class:`MonitorTool`."""

    command: str = Field(description="The command to run and watch.")
    description: str | None = Field(default=None, description="What it watches.")
