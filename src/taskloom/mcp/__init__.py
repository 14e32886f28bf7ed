"""MCP client support: Claude Code compatible configuration and a session manager.

Importing this package is cheap: the configuration is plain JSON, and :class:`McpManager`
(which loads the ``mcp`` SDK, ~0.7 s, only when it starts a server) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskloom._lazy import lazy_exports
from taskloom.mcp.config import (
    McpConfigError,
    McpServerConfig,
    expand_vars,
    load_flag_configs,
    load_mcp_config,
    parse_server,
    parse_servers,
    resolve_servers,
)

if TYPE_CHECKING:
    from taskloom.mcp.manager import McpManager, McpTool
    from taskloom.mcp.program import McpMessageCaller

__all__ = [
    "McpConfigError",
    "McpManager",
    "McpMessageCaller",
    "McpServerConfig",
    "McpTool",
    "expand_vars",
    "load_flag_configs",
    "load_mcp_config",
    "parse_server",
    "parse_servers",
    "resolve_servers",
]


# Lazy so that reading the configuration never pays for the manager's imports.
__getattr__ = lazy_exports(
    __name__, {"McpManager": "manager", "McpTool": "manager", "McpMessageCaller": "program"}
)
