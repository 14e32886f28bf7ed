"""Input models of :mod:`taskloom.mcp.tool` (imported on first use)."""

from __future__ import annotations

from typing import Any

from taskloom.tools.inputs import ToolInput


class McpArguments(ToolInput):
    """The arguments of an MCP tool call, passed on unchecked (the server validates them)."""

    arguments: dict[str, Any] = {}
