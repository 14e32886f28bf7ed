"""``taskloom acp`` in process: the official ACP client library against the agent.

The agent (:class:`taskloom.acp.server.TaskloomAgent`) and a client (the library's
``ClientSideConnection`` with :class:`Editor`) are connected over the library's in-memory
transports; the model is a ScriptedModel. What is checked is what an editor sees: the
initialize answer, the session's modes and commands, streamed updates with tool calls (their
kinds, locations, diffs and results), permission requests, cancel, and a load's replay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, needs, wait_until
from taskloom.harness import Options
from taskloom.testing import ScriptedModel, ToolCall, Turn

pytestmark = [needs("acp")]

TIMEOUT = 30 * TIME_FACTOR


class Editor:
    """The client side: records updates; answers permission requests from a list of choices."""

    def __init__(self, choices: list[str] | None = None) -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []
        self.choices = list(choices or [])

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        import acp

        self.asked.append((tool_call, [o.option_id for o in options]))
        choice = self.choices.pop(0) if self.choices else "reject_once"
        return acp.RequestPermissionResponse(
            outcome=acp.schema.AllowedOutcome(outcome="selected", option_id=choice)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def of(self, kind: str) -> list[Any]:
        """The updates of one kind (``agent_message_chunk``, ``tool_call``...)."""
        return [u for u in self.updates if u.session_update == kind]

    def text(self) -> str:
        """The agent's message text so far."""
        return "".join(u.content.text for u in self.of("agent_message_chunk"))


@contextlib.asynccontextmanager
async def connected(options: Options, editor: Editor) -> AsyncIterator[tuple[Any, Any]]:
    """A client connection to a TaskloomAgent built from ``options``, and the agent."""
    from acp._transport import memory_transport_pair
    from acp.agent.connection import AgentSideConnection
    from acp.client.connection import ClientSideConnection

    from taskloom.acp.server import TaskloomAgent

    agent = TaskloomAgent(options)
    left, right = memory_transport_pair()
    agent_side = AgentSideConnection(agent, left)  # type: ignore[arg-type]
    client = ClientSideConnection(editor, right)  # type: ignore[arg-type]
    try:
        yield client, agent
    finally:
        await agent.aclose()
        await client.close()
        await agent_side.close()


async def _new(client: Any, cwd: Path) -> Any:
    import acp

    await asyncio.wait_for(client.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT)
    return await asyncio.wait_for(client.new_session(cwd=str(cwd), mcp_servers=[]), TIMEOUT)


async def test_initialize_says_what_taskloom_offers(tmp_path: Path) -> None:
    import acp

    async with connected(Options(model=ScriptedModel([])), Editor()) as (client, _agent):
        init = await asyncio.wait_for(
            client.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT
        )
    caps = init.agent_capabilities
    assert init.protocol_version == acp.PROTOCOL_VERSION
    assert caps.load_session is True
    assert caps.prompt_capabilities.embedded_context is True
    assert caps.mcp_capabilities.http is True
    assert init.agent_info.name == "taskloom"
    assert init.auth_methods == []


async def test_a_prompt_streams_its_text_and_ends_its_turn(tmp_path: Path) -> None:
    import acp

    editor = Editor()
    model = ScriptedModel([Turn(text="Hello from taskloom.")])
    async with connected(Options(model=model, cwd=tmp_path), editor) as (client, _agent):
        session = await _new(client, tmp_path)
        assert session.modes.current_mode_id == "default"
        assert {m.id for m in session.modes.available_modes} >= {"default", "plan", "acceptEdits"}
        said = await asyncio.wait_for(
            client.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")]),
            TIMEOUT,
        )
        assert said.stop_reason == "end_turn"
        assert editor.text() == "Hello from taskloom."
        await wait_until(lambda: bool(editor.of("available_commands_update")), TIMEOUT)
        names = [c.name for c in editor.of("available_commands_update")[0].available_commands]
        assert "compact" in names
