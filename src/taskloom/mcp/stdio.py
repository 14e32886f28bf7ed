"""The stdio transport: an MCP session over the pipes of a server process spawned here.

A stdio server is spawned (:func:`spawn_stdio`) before the ``mcp`` SDK is loaded (~0.7 s, on a
worker thread), so that it boots while we import. The SDK's own ``stdio_client`` spawns a
process of its own and has no public way to take one, so the transport is ours: the read and
write streams of JSON-RPC messages a ``ClientSession`` runs over (the SDK's ``Transport``
protocol), one message a line each way.

Its end follows MCP's shutdown: the server's stdin is closed and it is given
:data:`EXIT_GRACE_S` to exit; then its process tree is killed, verified.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import anyio

from taskloom.mcp.config import McpServerConfig
from taskloom.process.kill import kill_tree

#: How long a server has to exit once its stdin is closed, and then once it is sent SIGTERM.
EXIT_GRACE_S = 2.0
_POLL_S = 0.01


async def spawn_stdio(
    cfg: McpServerConfig, *, extra_env: Mapping[str, str], cwd: Path | None, errlog: TextIO | None
) -> Any:
    """Start the process of the stdio server ``cfg``, in a session of its own.

    Its environment is the whole of ours (the SDK alone passes only a few variables such as
    PATH and HOME, Claude Code passes all), then the server's own, then ``extra_env`` (its tag
    for the orphan sweep).
    """
    return await anyio.open_process(
        [cfg.command, *cfg.args],
        env={**os.environ, **cfg.env, **extra_env},
        stderr=errlog if errlog is not None else sys.stderr,
        cwd=cwd,
        start_new_session=True,
    )


async def open_stdio_transport(
    process: Any,
    parse: Any,
    stack: contextlib.AsyncExitStack,
    on_end: Callable[[], Awaitable[None]] | None = None,
) -> tuple[Any, Any]:
    """Enter a transport over ``process``'s pipes on ``stack``; its read and write streams.

    ``parse`` turns a JSON-RPC object into the SDK's message type. A line that is not a
    message reaches the session as the error it raised, as in the SDK's own transport.
    ``on_end`` is awaited when the server's output ends by itself (it exited, or closed its
    stdout), not when the transport is shut down: a session waiting for nothing in particular
    learns at once that its server is gone.
    """
    from mcp.shared.message import SessionMessage

    to_session, read = anyio.create_memory_object_stream[Any](0)
    write, from_session = anyio.create_memory_object_stream[Any](0)
    for stream in (to_session, read, write, from_session):
        stack.push_async_callback(stream.aclose)
    group = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(group.cancel_scope.cancel)
    stack.push_async_callback(_stop, process)  # unwound first: the server ends, then the pumps

    async def receive() -> None:
        buffer = b""
        # Closed at the server's end of output: the session sees the connection end.
        async with to_session:
            async for chunk in process.stdout:
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    try:
                        item: Any = SessionMessage(parse(json.loads(line)))
                    except ValueError as exc:  # not UTF-8, not JSON, not a message
                        item = exc
                    await to_session.send(item)

    async def pump_in() -> None:
        # Shutdown closes the pipe under the read, or the session its end of the stream.
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await receive()
        if on_end is not None:  # cancelled at shutdown: this is reached only at the output's end
            await on_end()

    async def send() -> None:
        try:
            async for outgoing in from_session:
                text = outgoing.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(text.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: end the session's stream rather than leave a
            # request waiting for an answer that cannot come.
            await to_session.aclose()

    group.start_soon(pump_in)
    group.start_soon(send)
    return read, write


async def _stop(process: Any) -> None:
    """MCP's shutdown: close the server's stdin, let it exit; else kill its process tree."""
    with anyio.CancelScope(shield=True):  # a cancelled caller must not leave it running
        await _close(process.stdin)
        if not await _exited(process, EXIT_GRACE_S):
            await kill_tree(process.pid, leader=process.pid, grace=EXIT_GRACE_S)
            await _exited(process, EXIT_GRACE_S)
        await _close(process.stdout)


async def _close(stream: Any) -> None:
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()


async def _exited(process: Any, timeout: float) -> bool:
    """Whether the process has exited within ``timeout`` s.

    Its return code is polled: ``wait()`` would also wait for the end of its pipes, which a
    child that inherited them may hold open after the server itself has exited.
    """
    with anyio.move_on_after(timeout):
        while process.returncode is None:
            await anyio.sleep(_POLL_S)
    return process.returncode is not None
