"""An MCP server with many tools, for the tests of deferred tools (ToolSearch).

``python mcp_many_server.py N`` serves N tools over stdio (default 200), written with the
official SDK: ``<service>_<verb>_<NNN>(value)`` answers ``<name> got <value>``. Each has a
description of a few sentences, as real servers' tools do (their definitions are what tool
search saves).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

try:  # mcp 2.x renamed FastMCP to MCPServer; 1.x only has FastMCP.
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # pragma: no cover - depends on the installed SDK
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]

SERVICES = ("github", "slack", "jira", "drive", "calendar")
VERBS = ("create", "list", "get", "update", "delete", "search", "archive", "share")


def tool_name(index: int) -> str:
    """The name of tool ``index`` (``github_create_000``, ``slack_list_001``, …)."""
    service = SERVICES[index % len(SERVICES)]
    verb = VERBS[(index // len(SERVICES)) % len(VERBS)]
    return f"{service}_{verb}_{index:03d}"


def make_tool(name: str) -> Callable[[str], str]:
    def tool(value: str) -> str:
        return f"{name} got {value}"

    return tool


def main(count: int) -> None:
    server = Server("many")
    for index in range(count):
        name = tool_name(index)
        service, verb, _ = name.split("_")
        description = (
            f"{verb.capitalize()} an item of the {service} workspace (item kind {index}). "
            f"Use it when the user asks to {verb} something in {service}; it acts on the "
            "workspace the server is configured for, with its credentials, and answers with a "
            "short confirmation naming the tool and the value it was given. It never asks "
            "questions and never changes anything it was not asked to."
        )
        server.add_tool(make_tool(name), name=name, description=description)
    server.run()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
