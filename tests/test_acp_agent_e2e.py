"""``taskloom acp`` as a process: the real stdio wire, bad input, and the command line.

The agent is started as an editor starts it (``python -m taskloom acp --model scripted:FILE``)
and spoken to over stdin/stdout: with raw JSON-RPC lines for what a client library would never
send (a line that is not JSON), and with the official client library for a session and a
prompt on the same process afterwards.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, Turn
from helpers import TIME_FACTOR, clean_env, needs, run_cli, run_processes, wait_until, write_turns

pytestmark = [pytest.mark.e2e, needs("acp")]

TIMEOUT = 60 * TIME_FACTOR


class Wire:
    """Raw JSON-RPC lines to and from a ``taskloom acp`` process."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def request(self, request_id: int, method: str, params: dict[str, Any]) -> None:
        await self.send(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        )

    async def answer(self, request_id: Any) -> dict[str, Any]:
        """The response to ``request_id`` (notifications before it are skipped)."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
            assert line, "the agent closed its output"
            message = json.loads(line)
            if "method" not in message and message.get("id") == request_id:
                return message


async def _agent(tmp_path: Path, turns: list[Any], *flags: str) -> asyncio.subprocess.Process:
    model = write_turns(tmp_path / "turns.yaml", turns)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "taskloom", "acp", "--model", model, *flags,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        cwd=tmp_path, env=clean_env(),
    )  # fmt: skip


async def test_bad_lines_unknown_methods_and_sessions_get_errors_and_it_keeps_serving(
    tmp_path: Path,
) -> None:
    proc = await _agent(tmp_path, ["Still here."])
    wire = Wire(proc)
    try:
        await wire.send("{this is not json")
        parse = await wire.answer(None)
        assert parse["error"]["code"] == -32700
        await wire.request(1, "initialize", {"protocolVersion": 1})
        assert (await wire.answer(1))["result"]["agentCapabilities"]["loadSession"] is True
        await wire.request(2, "session/teleport", {})
        assert (await wire.answer(2))["error"]["code"] == -32601
        prompt = {"sessionId": "no-such-session", "prompt": [{"type": "text", "text": "hi"}]}
        await wire.request(3, "session/prompt", prompt)
        unknown = await wire.answer(3)
        assert unknown["error"]["code"] == -32602
        assert "unknown session" in json.dumps(unknown["error"])
        # Still serving: a session and a prompt on the same process.
        await wire.request(4, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session_id = (await wire.answer(4))["result"]["sessionId"]
        prompt["sessionId"] = session_id
        await wire.request(5, "session/prompt", prompt)
        assert (await wire.answer(5))["result"]["stopReason"] == "end_turn"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0


async def test_the_client_library_drives_the_process(tmp_path: Path) -> None:
    import acp

    updates: list[Any] = []

    class Client:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            updates.append(update)

        async def request_permission(self, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("nothing here asks")

    with FakeAnthropicServer() as server:  # the provider's real wire format
        server.add(Turn(text="Hello over stdio."))
        env = clean_env(ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="test")
        async with acp.spawn_agent_process(
            Client(), sys.executable, "-m", "taskloom", "acp", "--model", "sonnet",
            cwd=tmp_path, env=env,
        ) as (conn, _proc):  # fmt: skip
            await asyncio.wait_for(conn.initialize(protocol_version=acp.PROTOCOL_VERSION), TIMEOUT)
            session = await asyncio.wait_for(
                conn.new_session(cwd=str(tmp_path), mcp_servers=[]), TIMEOUT
            )
            said = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[acp.text_block("hi")]),
                TIMEOUT,
            )
    assert said.stop_reason == "end_turn"
    assert server.requests[0].body["messages"][-1]["content"][0]["text"] == "hi"
    text = "".join(u.content.text for u in updates if u.session_update == "agent_message_chunk")
    assert text == "Hello over stdio."


def test_a_bad_flag_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli("acp", "--no-such-flag", cwd=tmp_path)
    assert done.returncode == 2
    assert "--no-such-flag" in done.stderr


def _sleeps() -> list[Any]:
    # The sleeps themselves, not the shells that run them (a foreground call's wraps it).
    return run_processes(lambda p: (p.info.get("cmdline") or [])[:1] == ["sleep"])


async def test_an_editor_that_goes_away_mid_turn_leaves_nothing_running(tmp_path: Path) -> None:
    """The editor quits (its end of the pipe closes) while a command and a background shell
    run: the agent ends every session, kills both, and exits 0."""
    calls = [
        {"name": "Bash", "input": {"command": "sleep 4318", "run_in_background": True}},
        {"name": "Bash", "input": {"command": "sleep 4317"}},
    ]
    proc = await _agent(
        tmp_path, [{"tool_calls": calls}, "never"], "--dangerously-skip-permissions"
    )
    wire = Wire(proc)
    try:
        await wire.request(1, "initialize", {"protocolVersion": 1})
        await wire.answer(1)
        await wire.request(2, "session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session_id = (await wire.answer(2))["result"]["sessionId"]
        prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "run"}]}
        await wire.request(3, "session/prompt", prompt)
        await wait_until(lambda: len(_sleeps()) == 2, TIMEOUT, "both commands to start")
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        code = await asyncio.wait_for(proc.wait(), TIMEOUT)
    assert code == 0
    await wait_until(lambda: not _sleeps(), TIMEOUT, "both commands to be gone")
