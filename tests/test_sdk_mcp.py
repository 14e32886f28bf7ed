"""MCP servers given on the command line: the program's own (``"type": "sdk"``), and files.

The SDK-hosted servers are driven by the real ``claude-agent-sdk`` (its ``create_sdk_mcp_server``
and ``@tool``) against taskloom and a fake Anthropic server, as in tests/test_sdk.py; the
``--mcp-config`` and ``--strict-mcp-config`` flags by the CLI with a scripted model and a real
stdio server from PyPI (``mcp-server-time``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fake_servers import FakeAnthropicServer, ToolCall
from helpers import LazyModule, clean_env, scripted_argv
from taskloom.cli.control import ControlError
from taskloom.mcp.config import McpServerConfig
from taskloom.mcp.manager import McpManager
from test_sdk import options

sdk = LazyModule("claude_agent_sdk")

TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
needs_time_server = pytest.mark.skipif(
    importlib.util.find_spec("mcp_server_time") is None,
    reason="mcp-server-time (the dev extra) is not installed",
)


def calculator(calls: list[dict[str, Any]]) -> Any:
    """An in-process server with ``add``, and ``fail`` that raises; ``calls`` records ``add``."""

    @sdk.tool("add", "Add two numbers", {"a": float, "b": float})
    async def add(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        return {"content": [{"type": "text", "text": f"sum={args['a'] + args['b']:g}"}]}

    @sdk.tool("fail", "Always fails", {})
    async def fail(args: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the calculator is broken")

    return sdk.create_sdk_mcp_server("calcname", version="2.0.0", tools=[add, fail])


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    return content if isinstance(content, str) else " ".join(b["text"] for b in content)


@pytest.mark.e2e
async def test_a_tool_of_the_programs_own_server_is_listed_and_called(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[ToolCall("mcp__calc__add", {"a": 1, "b": 2})])
        server.add_turn(text="three it is")
        opts = options(
            server,
            tmp_path,
            mcp_servers={"calc": calculator(calls)},  # the key, not the name, is the server's
            allowed_tools=["mcp__calc__add"],
        )
        messages = [m async for m in sdk.query(prompt="add 1 and 2", options=opts)]
    init = messages[0]
    assert isinstance(init, sdk.SystemMessage) and init.subtype == "init"
    assert {"mcp__calc__add", "mcp__calc__fail"} <= set(init.data["tools"])
    assert {"name": "calc", "status": "connected"} in init.data["mcp_servers"]
    offered = {t["name"]: t for t in server.requests[0].body["tools"]}
    assert offered["mcp__calc__add"]["description"] == "Add two numbers"
    assert set(offered["mcp__calc__add"]["input_schema"]["properties"]) == {"a", "b"}
    assert calls == [{"a": 1, "b": 2}]  # the program's Python function ran
    (answer,) = tool_results(server.requests[1].body)
    assert not answer.get("is_error") and text_of(answer) == "sum=3"
    result = messages[-1]
    assert isinstance(result, sdk.ResultMessage) and result.result == "three it is"


@pytest.mark.e2e
async def test_a_failing_tool_of_the_programs_server_is_an_error_the_model_reads(
    tmp_path: Path,
) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[ToolCall("mcp__calc__fail", {})])
        server.add_turn(text="it failed")
        opts = options(
            server,
            tmp_path,
            mcp_servers={"calc": calculator([])},
            permission_mode="bypassPermissions",
        )
        async with sdk.ClaudeSDKClient(options=opts) as client:
            await client.query("try it")
            messages = [m async for m in client.receive_response()]
            status = await client.get_mcp_status()
    (answer,) = tool_results(server.requests[1].body)
    assert answer["is_error"] and "the calculator is broken" in text_of(answer)
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "it failed"
    servers = status["mcpServers"]
    assert [(s["name"], s["status"]) for s in servers] == [("calc", "connected")]


# --- the transport on its own: a program answering by hand -------------------------------------


class HandServer:
    """A program hosting one server, answering JSON-RPC by hand; ``lost`` is never delivered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []

    async def send(self, server: str, message: dict[str, Any]) -> dict[str, Any]:
        self.seen.append((server, message.get("method")))
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:  # a notification: acknowledged as the SDK does
            return {"jsonrpc": "2.0", "result": {}}
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hand", "version": "1"},
            }
        elif method == "tools/list":
            schema = {"type": "object"}
            result = {"tools": [{"name": n, "inputSchema": schema} for n in ("echo", "lost")]}
        else:
            assert method == "tools/call"
            if message["params"]["name"] == "lost":
                raise ControlError("the program closed its input; nobody can answer")
            text = json.dumps(message["params"]["arguments"])
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        return {"jsonrpc": "2.0", "id": request_id, "result": result}


async def test_the_program_transport_lists_calls_and_reports_an_undelivered_call() -> None:
    program = HandServer()
    config = {"hand": McpServerConfig("hand", "sdk", source="test")}
    async with McpManager(config, program=program, connect_timeout=10) as manager:
        await manager.start()
        assert manager.status() == {"hand": "connected"}
        assert [t.name for t in manager.tools()] == ["mcp__hand__echo", "mcp__hand__lost"]
        echoed = await manager.call("hand", "echo", {"x": 1})
        assert not echoed.is_error and json.loads(echoed.content) == {"x": 1}
        lost = await manager.call("hand", "lost", {})
        assert (
            lost.is_error
            and "did not answer" in lost.content
            and "closed its input" in lost.content
        )
        assert manager.status() == {"hand": "connected"}  # one call failed, not the server
    methods = [m for _, m in program.seen]
    assert methods[:3] == ["initialize", "notifications/initialized", "tools/list"]
    assert {s for s, _ in program.seen} == {"hand"}  # routed by the entry's key


async def test_an_sdk_server_without_a_program_fails_and_says_why() -> None:
    config = {"own": McpServerConfig("own", "sdk", source="test")}
    async with McpManager(config) as manager:
        await manager.start()
        assert not manager.tools()
        status = manager.status()["own"]
    assert status.startswith("failed:") and "needs a program driving the session" in status


# --- --mcp-config and --strict-mcp-config, through the CLI -------------------------------------


def run(tmp_path: Path, *args: str, tools: bool = False) -> subprocess.CompletedProcess[str]:
    """One scripted turn (a call of the time server's tool when ``tools``), with ``args``."""
    turns: list[dict[str, Any]] = [{"text": "done"}]
    if tools:
        call = {"name": "mcp__time__get_current_time", "input": {"timezone": "UTC"}}
        turns.insert(0, {"tool_calls": [call]})
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": turns}))
    env = {**clean_env(), "TASKLOOM_HOME": str(tmp_path / "home")}
    return subprocess.run(
        scripted_argv(script, "--allowedTools", "mcp__time", *args),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )


def events(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.e2e
@needs_time_server
def test_strict_mcp_config_uses_only_the_flags_servers(tmp_path: Path) -> None:
    project = {"mcpServers": {"other": {"command": "definitely-not-a-command"}}}
    (tmp_path / ".mcp.json").write_text(json.dumps(project))
    config = tmp_path / "only.json"
    config.write_text(json.dumps({"mcpServers": {"time": TIME_SERVER}}))
    out = events(run(tmp_path, "--strict-mcp-config", "--mcp-config", str(config), tools=True))
    init = out[0]
    assert init["mcp_servers"] == [{"name": "time", "status": "connected"}]
    assert "mcp__time__get_current_time" in init["tools"]
    result = next(e for e in out if e["type"] == "user")["message"]["content"][0]
    assert result["is_error"] is False and '"timezone": "UTC"' in result["content"]
    # Without --strict-mcp-config the project's server is configured too (and fails to start).
    both = events(run(tmp_path, "--mcp-config", str(config)))[0]["mcp_servers"]
    assert sorted(s["name"] for s in both) == ["other", "time"]


@pytest.mark.e2e
@needs_time_server
def test_mcp_config_takes_json_strings_and_files_after_one_flag_or_several(
    tmp_path: Path,
) -> None:
    inline = json.dumps({"mcpServers": {"time": TIME_SERVER}})
    second = tmp_path / "second.json"
    second.write_text(json.dumps({"mcpServers": {"later": {"type": "http", "url": "http://x"}}}))
    third = tmp_path / "third.json"
    third.write_text(json.dumps({"mcpServers": {"sdkside": {"type": "sdk", "name": "s"}}}))
    argv = ["--strict-mcp-config", "--mcp-config", inline, str(second), "--mcp-config", str(third)]
    init = events(run(tmp_path, *argv))[0]
    status = {s["name"]: s["status"] for s in init["mcp_servers"]}
    assert status["time"] == "connected"
    assert set(status) == {"time", "later", "sdkside"}
    # No program drives a -p run: the program's own server cannot be reached, and says why
    # (the status is one of the SDK's words; the reason comes apart).
    (sdkside,) = [s for s in init["mcp_servers"] if s["name"] == "sdkside"]
    assert sdkside["status"] == "failed" and "needs a program" in sdkside["error"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("missing.json", "--mcp-config missing.json: no such file"),
        ('{"mcpServers": ', "not valid JSON"),
        ("bad.json", "--mcp-config bad.json: not valid JSON"),
        ('{"servers": {}}', 'expected a JSON object {"mcpServers"'),
        ('{"mcpServers": {"x": {"type": "ftp"}}}', "server 'x': unknown type 'ftp'"),
    ],
)
def test_a_bad_mcp_config_is_a_usage_error_naming_it(
    tmp_path: Path, value: str, message: str
) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    proc = run(tmp_path, "--mcp-config", value)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "--mcp-config" in proc.stderr
