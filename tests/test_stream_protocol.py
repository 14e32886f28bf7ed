"""The stream-json protocol line by line: ``initialize`` and what it brings, ``--await-initialize``,
and the answers of the control requests, as docs/contracts.md writes them down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import TIME_FACTOR, clean_env

pytestmark = pytest.mark.e2e


def session(
    tmp_path: Path, server: FakeAnthropicServer, lines: list[dict[str, Any]], *args: str
) -> list[dict[str, Any]]:
    """Run taskloom on ``lines`` (its whole stdin); every line it printed."""
    argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
    argv += ["--output-format", "stream-json", "--model", "claude-sonnet-4-5", *args]
    env = clean_env(
        TASKLOOM_HOME=str(tmp_path / "home"), ANTHROPIC_BASE_URL=server.url, ANTHROPIC_API_KEY="x"
    )
    proc = subprocess.run(
        argv,
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60 * TIME_FACTOR,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def user(text: str) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": text}}


def request(request_id: str, subtype: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": "control_request",
        "request_id": request_id,
        "request": {"subtype": subtype, **fields},
    }


def answer(events: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    (found,) = [
        e["response"]
        for e in events
        if e["type"] == "control_response" and e["response"]["request_id"] == request_id
    ]
    return dict(found)


PROMPT = {"systemPrompt": ["You are terse.", ""], "appendSystemPrompt": "Say it once."}


@pytest.mark.parametrize("await_initialize", [True, False])
def test_await_initialize_builds_the_session_from_a_later_initialize(
    tmp_path: Path, await_initialize: bool
) -> None:
    lines = [user("hi"), request("init", "initialize", **PROMPT)]
    flags = ["--await-initialize"] if await_initialize else []
    with FakeAnthropicServer() as server:
        server.add_turn(text="ok")
        events = session(tmp_path, server, lines, *flags)
    assert answer(events, "init")["subtype"] == "success"
    # The SDK trusts hooks_applied to enforce its hooks: a late request's are not the session's.
    assert answer(events, "init")["response"]["hooks_applied"] is await_initialize
    system = server.requests[0].body["system"]
    text = system if isinstance(system, str) else "\n\n".join(b["text"] for b in system)
    if await_initialize:  # the prompt waited for the request, and the session has it
        assert text == "You are terse.\n\nSay it once."
    else:  # built from the first line: the request came too late to shape it
        assert "You are terse." not in text
    assert [e["type"] for e in events].count("result") == 1


def test_initialize_answers_what_the_sdks_read(tmp_path: Path) -> None:
    agents = {"counter": {"description": "Counts", "prompt": "You count.", "model": "haiku"}}
    lines = [request("init", "initialize", agents=agents, title="ignored", skills=["x"])]
    with FakeAnthropicServer() as server:
        events = session(tmp_path, server, lines)
    body = answer(events, "init")["response"]
    assert body["claude_code_version"] == "2.1.328"
    assert [c["name"] for c in body["commands"]] == ["compact"]
    assert body["hooks_applied"] is True
    assert {"name": "counter", "description": "Counts", "model": "haiku"} in body["agents"]
    models = {m["value"]: m for m in body["models"]}
    assert models["default"]["resolvedModel"] == "claude-sonnet-4-5"
    assert "$5/$25 per Mtok" in models["opus"]["description"]
    assert body["account"] == {"apiKeySource": "ANTHROPIC_API_KEY", "tokenSource": "none"}
    assert "mcp_servers_applied" not in body  # no mcpServers came


def test_initialize_fields_of_the_wrong_type_are_an_error_naming_them(tmp_path: Path) -> None:
    bad = {"systemPrompt": 5, "mcpServers": ["not", "an", "object"], "sdkMcpServers": "calc"}
    with FakeAnthropicServer() as server:
        events = session(tmp_path, server, [request("init", "initialize", **bad)])
    response = answer(events, "init")
    assert response["subtype"] == "error"
    assert response["error"] == (
        "initialize: systemPrompt must be a string or a list of strings; sdkMcpServers must "
        "be a list of server names; mcpServers must be an object of server configurations"
    )


def test_set_permission_mode_answers_the_mode_now_in_effect(tmp_path: Path) -> None:
    lines = [request("init", "initialize"), request("m", "set_permission_mode", mode="plan")]
    with FakeAnthropicServer() as server:
        events = session(tmp_path, server, lines)
    assert answer(events, "m")["response"] == {"mode": "plan"}
    (status,) = [e for e in events if e.get("subtype") == "status"]
    assert status["permissionMode"] == "plan" and status["session_id"]
