"""MCP servers in real runs: listed and called, agent-scoped, required."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import clean_env, harness, main_context, run_processes, scripted_argv
from taskloom.agents.service import SpawnRequest
from taskloom.errors import ToolError
from taskloom.models.base import ModelRequest
from taskloom.process.kill import find_tree
from taskloom.tasks.runtime import TaskRuntime
from taskloom.testing import FunctionModel, ToolCall, Turn

SERVER = str(Path(__file__).with_name("mcp_echo_server.py"))


def server_config() -> dict[str, Any]:
    return {"command": sys.executable, "args": [SERVER]}


@pytest.mark.e2e
def test_a_stdio_server_is_listed_and_its_tool_called(tmp_path: Path) -> None:
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"echo": server_config()}}))
    (tmp_path / "s.yaml").write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {"name": "mcp__echo__echo", "input": {"text": "hello over mcp"}}
                        ]
                    },
                    {"text": "done"},
                ]
            }
        )
    )
    env = clean_env()
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--allowedTools", "mcp__echo"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    init = events[0]
    assert {"name": "echo", "status": "connected"} in init["mcp_servers"]
    assert "mcp__echo__echo" in init["tools"]
    result = next(e for e in events if e["type"] == "user")["message"]["content"][0]
    assert result["is_error"] is False and "hello over mcp" in result["content"]


async def test_an_agents_own_server_stops_with_it_and_required_servers_are_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    agents = tmp_path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "echoer.md").write_text(
        "---\nname: echoer\ndescription: uses its own echo server\n"
        f"mcpServers:\n  - echo: {{command: {sys.executable}, args: [{SERVER}]}}\n---\nEcho.\n"
    )
    (agents / "needy.md").write_text(
        "---\nname: needy\ndescription: needs a server\nrequiredMcpServers: [github*]\n---\nx\n"
    )
    seen_tools: list[str] = []

    def respond(request: ModelRequest) -> Turn | str:
        if len(request.messages) == 1:
            seen_tools.extend(t.name for t in request.tools)
            return Turn(tool_calls=(ToolCall("mcp__echo__echo", {"text": "own server"}),))
        return "echoed"

    async with harness(tmp_path, FunctionModel(respond)) as h:
        service, ctx = h.agents, main_context(h)
        result = await service.spawn(
            SpawnRequest(description="e", prompt="p", subagent_type="echoer"), ctx
        )
        assert result.status == "completed" and result.content.startswith("echoed")
        assert "mcp__echo__echo" in seen_tools
        run = next(iter(service.runs.values()))
        answer = run.engine.messages[2].content[0]
        assert "own server" in answer.text()  # type: ignore[union-attr]
        # The agent's server was stopped with it: no server process is left.
        python_children = [
            p for p in find_tree(None, leader=os.getpid())[0] if SERVER in " ".join(p.cmdline())
        ]
        assert python_children == []
        with pytest.raises(
            ToolError, match=r"Agent 'needy' requires MCP servers matching: github\*"
        ):
            await service.spawn(
                SpawnRequest(description="n", prompt="p", subagent_type="needy"), ctx
            )


@pytest.mark.e2e
async def test_servers_of_a_crashed_session_are_swept(tmp_path: Path) -> None:
    import signal

    import psutil

    from helpers import wait_until

    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"echo": server_config()}}))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"turns": [{"text": "slow", "delay": 60}]}))
    proc = subprocess.Popen(
        scripted_argv(tmp_path / "s.yaml"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert proc.stdout is not None
    init = json.loads(proc.stdout.readline())
    assert {"name": "echo", "status": "connected"} in init["mcp_servers"]

    def servers() -> list[psutil.Process]:
        return run_processes(lambda p: SERVER in " ".join(p.info["cmdline"] or []))

    assert servers()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()
    assert servers(), "the server outlives the crashed session until a sweep"
    async with TaskRuntime():
        await wait_until(lambda: not servers(), timeout=10, what="the sweep to stop the server")
