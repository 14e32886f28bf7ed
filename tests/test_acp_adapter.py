"""Zed's ACP adapter drives taskloom as it drives Claude Code.

``@zed-industries/claude-agent-acp`` (tests/npm) runs the TypeScript Agent SDK it bundles with
``CLAUDE_CODE_EXECUTABLE`` pointing at a wrapper that starts taskloom; an ACP client (the
``agent-client-protocol`` package) talks to the adapter over stdio as an editor would:
initialize, session/new, a prompt the fake model server answers, and a prompt whose long Bash
command is cancelled.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, clean_env, needs, node_modules, run_processes, wait_until

pytestmark = [
    pytest.mark.e2e,
    needs("acp"),
    pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed"),
]

ADAPTER = "@zed-industries/claude-agent-acp/dist/index.js"

#: The long command the second prompt's turn runs, and its process is found by.
LONG_COMMAND = "sleep 4321"


class Editor:
    """The client side of ACP: records what the agent reports, allows each tool call once."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.asked: list[Any] = []

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> Any:
        import acp

        self.asked.append(tool_call)
        allow = next(o for o in options if o.kind == "allow_once")
        return acp.RequestPermissionResponse(
            outcome=acp.schema.AllowedOutcome(outcome="selected", option_id=allow.option_id)
        )

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def text(self) -> str:
        """The agent's message text so far."""
        return "".join(
            u.content.text
            for u in self.updates
            if u.session_update == "agent_message_chunk" and u.content.type == "text"
        )


def _wrapper(tmp_path: Path) -> Path:
    """The program the adapter starts instead of Claude Code: taskloom, with its arguments."""
    path = tmp_path / "claude-taskloom"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m taskloom "$@"\n')
    path.chmod(0o755)
    return path


def _long_commands() -> list[Any]:
    return run_processes(lambda p: LONG_COMMAND in " ".join(p.info.get("cmdline") or []))


async def test_zed_adapter_runs_a_prompt_and_cancels_a_long_command(tmp_path: Path) -> None:
    import acp

    adapter = node_modules() / ADAPTER
    work = tmp_path / "work"
    home = tmp_path / "home"
    work.mkdir()
    home.mkdir()
    timeout = 60 * TIME_FACTOR
    editor = Editor()
    with FakeAnthropicServer() as server:
        server.add_turn(text="Hello from the fake model.")
        server.add_turn(tool_calls=[("Bash", {"command": LONG_COMMAND})])
        env = clean_env(
            ANTHROPIC_BASE_URL=server.url,
            ANTHROPIC_API_KEY="test",
            CLAUDE_CODE_EXECUTABLE=str(_wrapper(tmp_path)),
            HOME=str(home),
            CLAUDE_CONFIG_DIR=str(home / ".claude"),
        )
        async with acp.spawn_agent_process(editor, "node", str(adapter), env=env, cwd=work) as (
            conn,
            _process,
        ):
            init = await asyncio.wait_for(
                conn.initialize(protocol_version=acp.PROTOCOL_VERSION), timeout
            )
            assert init.agent_info is not None and init.agent_info.version == "0.23.1"
            session = await asyncio.wait_for(
                conn.new_session(cwd=str(work), mcp_servers=[]), timeout
            )
            assert session.modes is not None and session.modes.current_mode_id == "default"

            said = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")]),
                timeout,
            )
            assert said.stop_reason == "end_turn"
            assert editor.text() == "Hello from the fake model."
            assert "hi" in str(server.requests[0].body["messages"][-1]["content"])

            running = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=[acp.text_block("run it")])
            )
            await wait_until(lambda: bool(_long_commands()), 60, "the long command to run")
            await conn.cancel(session_id=session.session_id)
            stopped = await asyncio.wait_for(running, timeout)
            assert stopped.stop_reason == "cancelled"
            assert [c.raw_input for c in editor.asked] == [{"command": LONG_COMMAND}]
            await wait_until(lambda: not _long_commands(), 30, "the long command to end")
        assert len(server.requests) == 2
    # The editor went: the adapter and taskloom with it.
    await wait_until(lambda: not run_processes(), 30, "the adapter and taskloom to exit")
