"""A client without subagent sessions (the Python ACP library) sees tasks as tool calls.

The agent (:class:`taskloom.acp.server.TaskloomAgent`) and the library's
``ClientSideConnection`` are connected in process; the model is a FunctionModel that starts a
background command and a background agent. The client's updates, parsed by the library, show
the command as a tool call in progress with its output, then its end and exit code, and the
agent as a ``think`` tool call that ends with its answer.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

from helpers import TIME_FACTOR, needs, wait_until
from taskloom.harness import Options
from taskloom.models.base import ModelRequest
from taskloom.testing import FunctionModel, ToolCall, Turn

pytestmark = [needs("acp")]

TIMEOUT = 30 * TIME_FACTOR


class Editor:
    """The client side: records updates; nothing here asks for permission."""

    def __init__(self) -> None:
        self.updates: list[Any] = []

    async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing here asks")

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def calls(self, call_id: str) -> list[Any]:
        return [u for u in self.updates if getattr(u, "tool_call_id", None) == call_id]

    def task_calls(self) -> list[Any]:
        return [
            u
            for u in self.updates
            if u.session_update == "tool_call" and u.tool_call_id.startswith("task-")
        ]


def text_of(update: Any) -> str:
    return "".join(c.content.text for c in update.content or [])


async def test_a_client_without_subagents_sees_tasks_as_tool_calls(tmp_path: Path) -> None:
    import acp
    from acp._transport import memory_transport_pair
    from acp.agent.connection import AgentSideConnection
    from acp.client.connection import ClientSideConnection

    from taskloom.acp.server import TaskloomAgent

    gate = tmp_path / "gate.fifo"
    os.mkfifo(gate)
    command = f"echo first words; read line < {gate}; echo last words"

    def respond(request: ModelRequest) -> Turn | str:
        if "child job" in str(request.messages[0].content):
            return "the child's answer"
        if len(request.messages) > 1:
            return "both started"
        return Turn(
            tool_calls=(
                ToolCall("Bash", {"command": command, "run_in_background": True}),
                ToolCall(
                    "Agent",
                    {"description": "helper", "prompt": "child job", "run_in_background": True},
                ),
            )
        )

    editor = Editor()
    options = Options(model=FunctionModel(respond), cwd=tmp_path, skip_permissions=True)
    agent = TaskloomAgent(options)
    left, right = memory_transport_pair()
    agent_side = AgentSideConnection(agent, left)  # type: ignore[arg-type]
    client = ClientSideConnection(editor, right)  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(client.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT)
        session = await asyncio.wait_for(
            client.new_session(cwd=str(tmp_path), mcp_servers=[]), TIMEOUT
        )
        said = await asyncio.wait_for(
            client.prompt(session_id=session.session_id, prompt=[acp.text_block("go")]), TIMEOUT
        )
        assert said.stop_reason == "end_turn"
        await wait_until(lambda: len(editor.task_calls()) == 2, TIMEOUT, "the tasks' calls")
        shell = next(u for u in editor.task_calls() if u.kind == "execute")
        helper = next(u for u in editor.task_calls() if u.kind == "think")
        assert shell.status == "in_progress" and helper.title == 'Agent "helper"'
        await wait_until(
            lambda: any("first words" in text_of(u) for u in editor.calls(shell.tool_call_id)),
            TIMEOUT,
            "the command's output",
        )
        assert all(u.status is None for u in editor.calls(shell.tool_call_id)[1:])
        threading.Thread(target=gate.write_text, args=("go\n",), daemon=True).start()
        await wait_until(
            lambda: editor.calls(shell.tool_call_id)[-1].status is not None, TIMEOUT, "its end"
        )
        await wait_until(
            lambda: editor.calls(helper.tool_call_id)[-1].status is not None, TIMEOUT, "the agent"
        )
    finally:
        await agent.aclose()
        await client.close()
        await agent_side.close()
    end = editor.calls(shell.tool_call_id)[-1]
    assert end.status == "completed" and end.raw_output == {"status": "completed", "exit_code": 0}
    assert "first words\nlast words" in text_of(end) and "exit code 0" in text_of(end)
    done = editor.calls(helper.tool_call_id)[-1]
    assert done.status == "completed" and "the child's answer" in text_of(done)
    assert not [u for u in editor.updates if u.session_update == "subagent_update"]
