"""The real ``claude-agent-sdk`` drives taskloom (``cli_path``) against a fake Anthropic server.

Each test starts taskloom as the SDK starts Claude Code: its own command line, stdin and stdout
in the ``stream-json`` protocol, the ``initialize`` control request first.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer, ToolCall
from helpers import TIME_FACTOR, LazyModule, clean_env

sdk = LazyModule("claude_agent_sdk")

pytestmark = pytest.mark.e2e

TASKLOOM = str(Path(sys.executable).with_name("taskloom"))


def options(server: FakeAnthropicServer, cwd: Path, **extra: Any) -> Any:
    env = {
        **clean_env(),
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test",
        "TASKLOOM_HOME": str(cwd / "home"),
    }
    return sdk.ClaudeAgentOptions(
        cli_path=TASKLOOM, cwd=str(cwd), env=env, model="claude-sonnet-4-5", **extra
    )


async def test_query_yields_init_the_answer_and_a_successful_result(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="hello from taskloom")
        messages = [m async for m in sdk.query(prompt="hi", options=options(server, tmp_path))]
    init, assistant, result = messages
    assert isinstance(init, sdk.SystemMessage) and init.subtype == "init"
    assert init.data["session_id"] == result.session_id
    assert "Bash" in init.data["tools"]
    assert isinstance(assistant, sdk.AssistantMessage)
    assert [b.text for b in assistant.content] == ["hello from taskloom"]
    assert isinstance(result, sdk.ResultMessage)
    assert (result.subtype, result.is_error, result.result) == (
        "success",
        False,
        "hello from taskloom",
    )
    # The SDK's default (no system prompt of the program's own) sends none, as Claude Code does.
    assert "system" not in server.requests[0].body or not server.requests[0].body["system"]


async def test_a_client_holds_a_two_turn_conversation_in_one_process(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="one")
        server.add_turn(text="two")
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path)) as client:
            await client.query("first")
            first = [m async for m in client.receive_response()]
            await client.query("second")
            second = [m async for m in client.receive_response()]
    results = [m for m in first + second if isinstance(m, sdk.ResultMessage)]
    assert [r.result for r in results] == ["one", "two"]
    assert results[0].session_id == results[1].session_id  # one session, one process
    # The second request carries the first exchange: the conversation went on.
    history = server.requests[1].body["messages"]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert history[0]["content"][0]["text"] == "first" and history[-1]["content"][0]["text"] == (
        "second"
    )


async def test_interrupt_stops_a_long_turn_and_the_session_goes_on(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="Waiting.", tool_calls=[("Bash", {"command": "sleep 30"})])
        server.add_turn(text="after the interrupt")
        opts = options(server, tmp_path, permission_mode="bypassPermissions")
        async with sdk.ClaudeSDKClient(options=opts) as client:
            await client.query("run it")
            async for message in client.receive_messages():
                if isinstance(message, sdk.AssistantMessage):
                    break  # the command now runs
            asked = time.monotonic()
            await client.interrupt()
            stopped = [m async for m in client.receive_response()]
            elapsed = time.monotonic() - asked
            await client.query("go on")
            after = [m async for m in client.receive_response()]
    result = stopped[-1]
    assert isinstance(result, sdk.ResultMessage)
    assert result.is_error and result.subtype == "error_during_execution"
    assert elapsed < 1.0 * TIME_FACTOR, elapsed
    assert isinstance(after[-1], sdk.ResultMessage) and after[-1].result == "after the interrupt"
    # The interrupted call was answered before the next request: the conversation is valid.
    last = server.requests[-1].body["messages"]
    results = [b for m in last for b in m["content"] if b.get("type") == "tool_result"]
    assert len(results) == 1 and results[0]["is_error"]


async def test_unknown_control_requests_get_an_error_response(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path)) as client:
            await client.set_permission_mode("acceptEdits")  # answered with success
            with pytest.raises(Exception, match="Unsupported control request subtype"):
                await client.rewind_files("00000000-0000-0000-0000-000000000000")


async def test_can_use_tool_is_asked_for_bash_and_its_answers_are_kept(tmp_path: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        asked.append((name, tool_input))
        if "allowed" in tool_input.get("command", ""):
            return sdk.PermissionResultAllow()
        return sdk.PermissionResultDeny(message="not this one, says the program")

    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": "echo allowed-ran"})])
        server.add_turn(tool_calls=[("Bash", {"command": "echo refused-ran"})])
        server.add_turn(text="done")
        opts = options(server, tmp_path, can_use_tool=can_use_tool)

        async def prompt() -> Any:
            yield {"type": "user", "message": {"role": "user", "content": "run both"}}

        messages = [m async for m in sdk.query(prompt=prompt(), options=opts)]
    assert [name for name, _ in asked] == ["Bash", "Bash"]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "done"
    results = [
        b
        for r in server.requests[1:]
        for b in r.body["messages"][-1]["content"]
        if b.get("type") == "tool_result"
    ]
    allowed, refused = results
    assert "allowed-ran" in str(allowed["content"]) and not allowed.get("is_error")
    assert refused["is_error"] and "not this one, says the program" in str(refused["content"])
    assert "refused-ran" not in str(refused["content"])
    denials = messages[-1].permission_denials
    assert [(d["tool_name"], d["tool_input"]["command"]) for d in denials] == [
        ("Bash", "echo refused-ran")
    ]


async def test_a_python_pre_tool_use_hook_is_called_and_can_block(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    async def guard(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        seen.append({"input": hook_input, "tool_use_id": tool_use_id})
        if "forbidden" in hook_input["tool_input"]["command"]:
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "the guard says no",
                }
            }
        return {}

    with FakeAnthropicServer() as server:
        server.add_turn(
            tool_calls=[ToolCall("Bash", {"command": "echo fine-ran"}, id="toolu_fine")]
        )
        server.add_turn(tool_calls=[("Bash", {"command": "echo forbidden-ran"})])
        server.add_turn(text="done")
        hooks = {"PreToolUse": [sdk.HookMatcher(matcher="Bash", hooks=[guard])]}
        opts = options(server, tmp_path, hooks=hooks, permission_mode="bypassPermissions")
        messages = [m async for m in sdk.query(prompt="go", options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "done"
    assert [s["input"]["tool_input"]["command"] for s in seen] == [
        "echo fine-ran",
        "echo forbidden-ran",
    ]
    assert seen[0]["tool_use_id"] == "toolu_fine"
    assert seen[0]["input"]["hook_event_name"] == "PreToolUse"
    assert seen[0]["input"]["session_id"] == messages[-1].session_id
    fine, forbidden = (
        b
        for r in server.requests[1:]
        for b in r.body["messages"][-1]["content"]
        if b.get("type") == "tool_result"
    )
    assert "fine-ran" in str(fine["content"]) and not fine.get("is_error")
    assert forbidden["is_error"] and "the guard says no" in str(forbidden["content"])
    assert "forbidden-ran" not in str(forbidden["content"])


async def test_set_model_sends_the_next_requests_to_that_model(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(text="from sonnet")
        server.add_turn(text="from haiku")
        server.add_turn(text="back")
        async with sdk.ClaudeSDKClient(options=options(server, tmp_path)) as client:
            await client.query("one")
            [m async for m in client.receive_response()]
            await client.set_model("claude-haiku-4-5")
            await client.query("two")
            [m async for m in client.receive_response()]
            await client.set_model(None)  # the session's own model again
            await client.query("three")
            [m async for m in client.receive_response()]
            with pytest.raises(Exception, match=r"unknown model provider|Unknown model|prefix"):
                await client.set_model("nosuch:model")
    assert [r.body["model"] for r in server.requests] == [
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "claude-sonnet-4-5",
    ]


async def test_a_failing_hook_blocks_only_when_its_matcher_says_on_failure_block(
    tmp_path: Path,
) -> None:
    async def broken(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        raise RuntimeError("the guard crashed")

    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Bash", {"command": "echo guarded-ran"})])
        server.add_turn(tool_calls=[("Glob", {"pattern": "*.nothing"})])
        server.add_turn(text="done")
        hooks = {
            "PreToolUse": [
                sdk.HookMatcher(matcher="Bash", hooks=[broken], on_failure="block"),
                sdk.HookMatcher(matcher="Glob", hooks=[broken]),  # a failure is no decision
            ]
        }
        opts = options(server, tmp_path, hooks=hooks, permission_mode="bypassPermissions")
        messages = [m async for m in sdk.query(prompt="go", options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "done"
    bash, glob = (
        b
        for r in server.requests[1:]
        for b in r.body["messages"][-1]["content"]
        if b.get("type") == "tool_result"
    )
    assert bash["is_error"] and "the guard crashed" in str(bash["content"])
    assert "guarded-ran" not in str(bash["content"])
    assert not glob.get("is_error")  # ran: the failure of a "continue" hook decides nothing


async def test_agents_of_the_options_are_offered_and_run_with_their_prompt(
    tmp_path: Path,
) -> None:
    critic = sdk.AgentDefinition(
        description="Reviews code harshly", prompt="You are a harsh code critic.", tools=["Read"]
    )
    spawn = {"description": "review it", "prompt": "review app.py", "subagent_type": "critic"}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Agent", spawn)])
        server.add_turn(text="critic says: ship it")  # the subagent's only request
        server.add_turn(text="relayed")
        opts = options(server, tmp_path, agents={"critic": critic})
        messages = [m async for m in sdk.query(prompt="get a review", options=opts)]
    init = messages[0]
    assert isinstance(init, sdk.SystemMessage) and "critic" in init.data["agents"]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "relayed"
    main, sub, after = (r.body for r in server.requests)
    assert "You are a harsh code critic." in str(sub.get("system"))
    assert "You are a harsh code critic." not in str(main.get("system"))
    assert sub["messages"][0]["content"][0]["text"] == "review app.py"
    assert [t["name"] for t in sub.get("tools", [])] == ["Read"]
    (result,) = (b for b in after["messages"][-1]["content"] if b.get("type") == "tool_result")
    assert "critic says: ship it" in str(result["content"]) and not result.get("is_error")


async def test_can_use_tool_gets_the_call_id_and_suggestions_and_may_change_the_input(
    tmp_path: Path,
) -> None:
    seen: list[Any] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        seen.append((name, tool_input, context))
        return sdk.PermissionResultAllow(updated_input={"command": "echo replaced-ran"})

    with FakeAnthropicServer() as server:
        server.add_turn(
            tool_calls=[ToolCall("Bash", {"command": "echo original-ran"}, id="toolu_asked")]
        )
        server.add_turn(text="done")
        opts = options(server, tmp_path, can_use_tool=can_use_tool)

        async def prompt() -> Any:
            yield {"type": "user", "message": {"role": "user", "content": "run it"}}

        messages = [m async for m in sdk.query(prompt=prompt(), options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "done"
    ((name, tool_input, context),) = seen
    assert (name, tool_input) == ("Bash", {"command": "echo original-ran"})
    assert context.tool_use_id == "toolu_asked"
    (suggestion,) = context.suggestions
    assert (suggestion.type, suggestion.behavior) == ("addRules", "allow")
    assert [r.tool_name for r in suggestion.rules or []] == ["Bash"]
    (result,) = (
        b for b in server.requests[1].body["messages"][-1]["content"] if b["type"] == "tool_result"
    )
    assert "replaced-ran" in str(result["content"]) and "original-ran" not in str(result["content"])
    assert not result.get("is_error")
