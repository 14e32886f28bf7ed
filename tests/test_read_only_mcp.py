"""A read-only agent and MCP tools: only those a server declares read-only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from helpers import harness
from taskloom.messages import ToolResultBlock
from taskloom.models.base import ModelRequest
from taskloom.permissions import PermissionPolicy, PermissionRequest
from taskloom.testing import FunctionModel, ToolCall, Turn


async def test_a_read_only_agent_gets_only_mcp_tools_declared_read_only(tmp_path: Path) -> None:
    server = [sys.executable, str(Path(__file__).with_name("mcp_echo_server.py"))]
    mcp = json.dumps({"mcpServers": {"echo": {"command": server[0], "args": server[1:]}}})
    offered: set[str] = set()
    results: list[ToolResultBlock] = []
    calls = [
        ToolCall("mcp__echo__echo", {"text": "hi"}),  # declared read-only: it runs
        ToolCall("mcp__echo__add", {"a": 1, "b": 2}),  # not offered
    ]

    def respond(request: ModelRequest) -> Turn | str:
        if request.metadata.get("agent_type") == "verification":
            offered.update(t.name for t in request.tools)
            last = request.messages[-1].content
            results.extend(b for b in last if isinstance(b, ToolResultBlock))
            step = len(results)
            return Turn(tool_calls=(calls[step],)) if step < len(calls) else "VERDICT: PASS"
        if any(isinstance(b, ToolResultBlock) for b in request.messages[-1].content):
            return "verified"
        spawn = {"description": "Verify", "prompt": "Try", "subagent_type": "verification"}
        return Turn(tool_calls=(ToolCall("Agent", spawn),))

    async with harness(tmp_path, FunctionModel(respond), mcp_config=[mcp]) as h:
        [e async for e in h.run("Verify it.")]
        await h.end()
    assert "mcp__echo__echo" in offered
    assert not offered & {"mcp__echo__add", "mcp__echo__crash", "mcp__echo__sleep"}
    assert len(results) == 2
    assert not results[0].is_error and "hi" in str(results[0].content)
    assert results[1].is_error and "No such tool" in str(results[1].content)


def test_the_read_only_policy_refuses_an_mcp_tool_not_declared_read_only(tmp_path: Path) -> None:
    policy = PermissionPolicy("bypassPermissions", (), tmp_path).read_only()

    def decide(name: str, declared: bool) -> str:
        request = PermissionRequest(name, "execute", None, tmp_path, declared_read_only=declared)
        return policy.decide(request).behavior

    assert decide("mcp__fs__write_file", False) == "deny"
    assert decide("mcp__fs__read_file", True) == "allow"
    ordinary = PermissionPolicy("bypassPermissions", (), tmp_path)
    request = PermissionRequest("mcp__fs__write_file", "execute", None, tmp_path)
    assert ordinary.decide(request).behavior == "allow"  # only a read-only agent is refused
