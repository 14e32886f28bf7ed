"""MCP servers hosted by the program driving the session (``"type": "sdk"``).

``claude-agent-sdk`` runs the servers a program defines with ``create_sdk_mcp_server`` inside
the program's own process, and names them in ``--mcp-config`` as ``{"type": "sdk", "name":
...}``. They are reached through the program: each JSON-RPC message for the server goes out as
an ``mcp_message`` control request (``server_name`` is the entry's key, ``message`` the
JSON-RPC object), and the answer's ``mcp_response`` is the server's JSON-RPC reply (a
notification is acknowledged with an empty result, which is dropped here).

:func:`open_program_transport` turns such a link into the read and write streams an MCP
client session runs over, so listing, naming (``mcp__<key>__<tool>``), calls, results and
errors are those of every other server. Nothing is server-initiated on this link: the SDK
answers the server's own requests itself and drops its notifications.

The ``mcp`` SDK is imported only when a transport is opened.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

import anyio

#: JSON-RPC's "internal error": what a request gets when the program could not be asked.
_INTERNAL_ERROR = -32603


class McpMessageCaller(Protocol):
    """Sends one JSON-RPC message to a server the program hosts, and returns the reply."""

    async def send(self, server: str, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` to ``server`` (the key of its ``--mcp-config`` entry).

        Returns:
            The server's JSON-RPC reply (for a notification, an acknowledgement to drop).

        Raises:
            Exception: The program could not be asked, or did not answer.
        """
        ...


async def open_program_transport(
    server: str, caller: McpMessageCaller, stack: contextlib.AsyncExitStack
) -> tuple[Any, Any]:
    """Enter a transport to ``server`` through ``caller`` on ``stack``; its read, write streams.

    Messages are sent concurrently (a slow tool call does not hold up the others); a request
    whose message cannot be delivered gets a JSON-RPC error reply naming why.
    """
    from mcp.shared.message import SessionMessage

    from taskloom.mcp._sdk import message_parser

    parse = message_parser()
    to_session, read = anyio.create_memory_object_stream[Any](16)
    write, from_session = anyio.create_memory_object_stream[Any](16)
    for stream in (to_session, read, write, from_session):
        stack.push_async_callback(stream.aclose)
    group = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(group.cancel_scope.cancel)  # unwound first: stop the pump, then the group

    async def deliver(message: dict[str, Any]) -> None:
        request_id = message.get("id")
        try:
            reply = await caller.send(server, message)
        except Exception as exc:
            if request_id is None:
                return
            text = f"the program hosting MCP server {server!r} did not answer: {exc}"
            reply = {"jsonrpc": "2.0", "id": request_id, "error": {"code": _INTERNAL_ERROR}}
            reply["error"]["message"] = text
        if request_id is None:
            return  # a notification: the answer is only an acknowledgement
        try:
            item: Any = SessionMessage(parse(reply))
        except ValueError as exc:  # pydantic's ValidationError included
            item = exc
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await to_session.send(item)

    async def pump() -> None:
        async for outgoing in from_session:
            message = outgoing.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
            group.start_soon(deliver, message)

    group.start_soon(pump)
    return read, write
