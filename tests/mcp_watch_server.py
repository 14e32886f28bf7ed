"""An MCP server with a resource that changes and a log, for the MCP monitor tests.

Written with the official SDK's low-level server (mcp 2.x), which serves
``resources/subscribe``, ``resources/unsubscribe`` and ``logging/setLevel``. Resource
``watch://counter`` holds a number. Tools: ``bump(times)`` adds one to it ``times`` times,
telling each change to the client if it subscribed; ``log(message, count)`` sends log
messages (``info``), or with ``levels`` (comma-separated) one message per level, leaving out
those less severe than the level the client set; ``work(steps)`` reports progress to a call
that asked for it; ``crash()`` exits at once. With ``--record PATH`` it writes a line to PATH
for its start (``pid N``), each subscribe and unsubscribe, and each level set (``level L``).
With ``--level L`` its log starts at ``L`` (default ``debug``), as a server's own default.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

URI = "watch://counter"
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
counter = 0
level = sys.argv[sys.argv.index("--level") + 1] if "--level" in sys.argv else "debug"
subscribed: set[str] = set()
record = sys.argv[sys.argv.index("--record") + 1] if "--record" in sys.argv else None


def _record(line: str) -> None:
    if record is not None:
        with open(record, "a") as f:
            f.write(line + "\n")


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(uri=URI, name="counter")])


async def read_resource(
    ctx: Any, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    text = f"counter = {counter}"
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=URI, text=text)])


async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
    subscribed.add(str(params.uri))
    _record(f"subscribe {params.uri}")
    return types.EmptyResult()


async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    subscribed.discard(str(params.uri))
    _record(f"unsubscribe {params.uri}")
    return types.EmptyResult()


async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    global level
    level = str(params.level)
    _record(f"level {level}")
    return types.EmptyResult()


def _tool(name: str, **props: str) -> types.Tool:
    schema = {"type": "object", "properties": {k: {"type": v} for k, v in props.items()}}
    return types.Tool(name=name, description=name, input_schema=schema)


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    tools = [
        _tool("bump", times="integer"),
        _tool("log", message="string", count="integer", levels="string"),
        _tool("work", steps="integer"),
        _tool("crash"),
    ]
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    global counter
    args = params.arguments or {}
    if params.name == "bump":
        for _ in range(int(args.get("times", 1))):
            counter += 1
            if URI in subscribed:
                await ctx.session.send_resource_updated(URI)
    elif params.name == "log" and args.get("levels"):
        for name in str(args["levels"]).split(","):
            if LEVELS.index(name) >= LEVELS.index(level):
                await ctx.session.send_log_message(name, f"{args.get('message', '')} {name}", "app")
    elif params.name == "log":
        for i in range(int(args.get("count", 1))):
            await ctx.session.send_log_message("info", f"{args.get('message', '')} {i + 1}", "app")
    elif params.name == "work":
        token = (ctx.meta or {}).get("progress_token")
        steps = int(args.get("steps", 1))
        for step in range(1, steps + 1):
            if token is not None:
                await ctx.session.send_progress_notification(token, step, steps, f"step {step}")
    elif params.name == "crash":
        os._exit(3)
    text = types.TextContent(type="text", text=f"{params.name} done; counter = {counter}")
    return types.CallToolResult(content=[text])


# mcp 2.x notes that the newest protocol drops logging; the 2025 handshake used here serves it.
warnings.filterwarnings("ignore", message=r".* is deprecated as of ")
server = Server(
    "watch",
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=unsubscribe,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_set_logging_level=set_level,
)


async def main() -> None:
    _record(f"pid {os.getpid()}")
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
