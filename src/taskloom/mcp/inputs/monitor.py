"""Input models of :mod:`taskloom.mcp.monitor` (imported on first use)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from taskloom.tools.inputs import ToolInput

Level = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class MonitorMcpInput(ToolInput):
    """Input of :class:`MonitorMcpTool`."""

    server: str = Field(description="The MCP server's name.")
    resource: str | None = Field(
        default=None, description="The URI of the resource to watch; omit for the server's log."
    )
    level: Level | None = Field(
        default=None, description="Without a resource: the least severe log level to be told."
    )
    description: str | None = Field(default=None, description="What it watches.")
