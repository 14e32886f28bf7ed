"""The session's configured MCP servers, as one block: recorded, started, stopped, forgotten.

Their tags are recorded in the store before any server starts, so if this process dies the
next session's orphan sweep stops them too. The SDK (and :mod:`taskloom.mcp.manager`) loads
only when there is a server to start.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskloom.mcp.manager import McpManager
    from taskloom.mcp.program import McpMessageCaller
    from taskloom.store import Store


@contextlib.asynccontextmanager
async def session_servers(
    config: dict[str, Any],
    *,
    cwd: Path,
    program: McpMessageCaller | None,
    store: Store,
    session_id: str,
) -> AsyncIterator[McpManager | None]:
    """Run the servers of ``config`` for the block (None when there are none).

    Args:
        config: The servers by name.
        cwd: Where stdio servers start.
        program: Reaches the servers of type ``sdk`` (the program driving the session).
        store: Where their tags are recorded.
        session_id: The session they belong to.
    """
    if not config:
        yield None
        return
    from taskloom.mcp.manager import McpManager
    from taskloom.process.registry import ProcessRecorder

    manager = McpManager(config, cwd=cwd, program=program)
    recorder = ProcessRecorder(store, session_id)
    rows = recorder.record_tags(manager.tags)  # committed before any server starts
    try:
        await manager.start()
        yield manager
    finally:
        await manager.aclose()
        recorder.forget(rows)


def server_status(name: str, status: str) -> dict[str, str]:
    """``{name, status}`` with a one-word status, and a failure's reason in ``error``.

    The words are the SDK's status type: ``connected``, ``failed``, ``pending``.
    """
    state, _, why = status.partition(": ")
    return {"name": name, "status": state, **({"error": why} if why else {})}
