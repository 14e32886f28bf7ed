"""A tiny MCP server for the tests, written with the official SDK.

Tools: ``echo(text)`` (annotated ``readOnlyHint: true``), ``add(a, b)``, ``fail(message)`` (a
tool-level error), ``getenv(name)``, ``cwd()``, ``sleep(seconds)`` and ``crash()`` (the process
exits at once, as a crashing server would). Serves stdio by default; ``--http PORT`` or
``--sse PORT`` serve on 127.0.0.1 instead.
"""

from __future__ import annotations

import asyncio
import os
import sys

try:  # mcp 2.x renamed FastMCP to MCPServer; 1.x only has FastMCP.
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # pragma: no cover - depends on the installed SDK
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]

try:  # the types moved to their own package in mcp 2.x
    from mcp_types import ToolAnnotations
except ImportError:  # pragma: no cover - depends on the installed SDK
    from mcp.types import ToolAnnotations  # type: ignore[no-redef]

server = Server("echo")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def fail(message: str) -> str:
    """Raise an error inside the tool, which the server reports as a tool error."""
    raise ValueError(message)


@server.tool()
def getenv(name: str) -> str:
    """Return an environment variable of the server process ('<unset>' when unset)."""
    return os.environ.get(name, "<unset>")


@server.tool()
def cwd() -> str:
    """Return the server's working directory."""
    return os.getcwd()


@server.tool()
async def sleep(seconds: float, started: str = "") -> str:
    """Sleep, then say so; first create the file ``started`` if one is named (the test's event
    for "the call is in the server's hands")."""
    if started:
        with open(started, "w"):
            pass
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Exit the process without answering."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--http", "--sse"):
        transport = "streamable-http" if sys.argv[1] == "--http" else "sse"
        port = int(sys.argv[2])
        if hasattr(server.settings, "port"):  # mcp 1.x: host and port are settings
            server.settings.host, server.settings.port = "127.0.0.1", port
            server.run(transport)
        else:
            server.run(transport, host="127.0.0.1", port=port)
    else:
        server.run()
