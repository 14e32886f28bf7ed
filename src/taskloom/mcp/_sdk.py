"""What the manager needs from the ``mcp`` SDK, across its major versions.

mcp 2.x names result fields in snake_case and takes HTTP headers on an ``httpx2`` client; mcp 1.x
uses camelCase fields and a ``headers`` argument. The code follows 2.x and falls back to the 1.x
names where they differ (tested with 2.3 and 1.30). Only the manager imports this module, and
the SDK itself is imported inside the functions, once a server is actually started
(:func:`load_sdk`, ~0.7 s, on a worker thread). Only the SDK's public API is used: stdio
servers run over a transport of our own (:mod:`taskloom.mcp.stdio`).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, cast

import anyio

from taskloom.mcp.config import McpServerConfig
from taskloom.mcp.stdio import open_stdio_transport, spawn_stdio
from taskloom.mcp.tool import McpToolInfo
from taskloom.tools.base import ToolResult

if TYPE_CHECKING:
    from mcp import ClientSession

_MAX_PAGES = 100  # of tools/list; a server that pages forever must not hang start-up
_CONNECTION_CLOSED = -32000  # the SDK's JSON-RPC code for a transport that went away


_LOADING = threading.Lock()


def load_sdk() -> None:
    """Import what the manager uses of the SDK (run on a worker thread: it is ~0.7 s).

    One thread at a time: servers starting together each call this, and threads importing
    one package with circular imports at once can deadlock the import system.
    """
    with _LOADING:
        import mcp
        import mcp.client.stdio
        import mcp.types

        del mcp


async def open_transport(
    cfg: McpServerConfig,
    stack: contextlib.AsyncExitStack,
    *,
    extra_env: Mapping[str, str],
    cwd: Path | None,
    errlog: TextIO | None,
    process: Any = None,
    on_end: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Any, Any]:
    """Enter the transport of ``cfg`` on ``stack`` and return its read and write streams.

    ``extra_env`` and ``cwd`` apply to stdio servers, whose stderr goes to ``errlog``;
    ``process`` is the server's, spawned already by :func:`spawn_stdio`; ``on_end`` is
    awaited when a stdio server's output ends by itself (see :func:`open_stdio_transport`).
    """
    streams: tuple[Any, ...]
    if cfg.type == "stdio":
        if process is None:
            process = await spawn_stdio(cfg, extra_env=extra_env, cwd=cwd, errlog=errlog)
        return await open_stdio_transport(process, message_parser(), stack, on_end)
    if cfg.type == "sse":
        from mcp.client.sse import sse_client

        streams = await stack.enter_async_context(sse_client(cfg.url, dict(cfg.headers)))
    else:
        import mcp.client.streamable_http as http

        current = getattr(http, "streamable_http_client", None)
        if current is None:  # mcp 1.8 to 1.2x: headers directly; it yields a third item
            legacy = cast(Any, http).streamablehttp_client
            streams = await stack.enter_async_context(legacy(cfg.url, headers=dict(cfg.headers)))
        else:
            # Headers go on an HTTP client, which is then ours to close. It must come from the
            # library the SDK itself uses: httpx2 in mcp 2.x, httpx in late 1.x.
            lib = getattr(http, "httpx2", None) or cast(Any, http).httpx
            client = lib.AsyncClient(
                headers=dict(cfg.headers), timeout=lib.Timeout(30.0, read=300.0)
            )
            await stack.enter_async_context(client)
            streams = await stack.enter_async_context(current(cfg.url, http_client=client))
    return streams[0], streams[1]


async def list_tools(session: ClientSession) -> list[McpToolInfo]:
    """Every tool the server lists, following pagination (bounded)."""
    from mcp.types import PaginatedRequestParams

    # mcp 1.x before ``params`` existed took a bare cursor.
    by_params = "params" in inspect.signature(session.list_tools).parameters
    infos: list[McpToolInfo] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        if cursor is None:
            result = await session.list_tools()
        elif by_params:
            result = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        else:
            result = await cast(Any, session).list_tools(cursor=cursor)
        for tool in result.tools:
            schema = field_of(tool, "input_schema", "inputSchema")
            if not isinstance(schema, dict):
                schema = {"type": "object", "properties": {}}
            hints = field_of(tool, "annotations")
            read_only = field_of(hints, "read_only_hint", "readOnlyHint") is True
            infos.append(McpToolInfo(tool.name, tool.description or "", schema, read_only))
        cursor = field_of(result, "next_cursor", "nextCursor")
        if not cursor:
            break
    return infos


def to_result(tool: str, result: Any) -> ToolResult:
    """Turn a ``CallToolResult`` into what the model sees: its text parts, joined."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if isinstance(text, str) else f"[resource {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        else:  # images and audio have no text form here; say that they were there
            mime = field_of(block, "mime_type", "mimeType") or "unknown type"
            parts.append(f"[{kind} content: {mime}]")
    structured = field_of(result, "structured_content", "structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    is_error = bool(field_of(result, "is_error", "isError"))
    text = "\n".join(parts) or f"{tool} returned no content"
    data = {"structured_content": structured} if structured is not None else None
    return ToolResult(text, is_error=is_error, data=data)


def message_parser() -> Any:
    """A function from a JSON-RPC object to the SDK's message type (mcp 2.x, or 1.x)."""
    try:
        from mcp.types import jsonrpc_message_adapter
    except ImportError:  # mcp 1.x: a root model
        import mcp.types

        return cast(Any, mcp.types).JSONRPCMessage.model_validate
    return jsonrpc_message_adapter.validate_python


def field_of(obj: Any, *names: str) -> Any:
    """The first of ``names`` that ``obj`` has (None if none): 2.x is snake_case, 1.x camel."""
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


def is_disconnect(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone, rather than one request failing."""
    if isinstance(exc, BaseExceptionGroup):
        return any(is_disconnect(e) for e in exc.exceptions)
    error = getattr(exc, "error", None)  # MCPError (2.x) / McpError (1.x) carry ErrorData
    if error is not None and hasattr(error, "code"):
        return bool(error.code == _CONNECTION_CLOSED)
    return isinstance(
        exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | OSError
    )


def describe(exc: BaseException) -> str:
    """One line about ``exc`` (the first leaf of an exception group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__
