"""``claude-agent-sdk`` hook callbacks get Claude Code's hook input, whatever form the prompt has.

The SDKs send a prompt as content blocks (the TypeScript one always does); the prompt hooks
must run for it as for a string, and every callback reads the fields Claude Code gives.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
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


async def blocks(*texts: str) -> AsyncIterator[dict[str, Any]]:
    """One user message whose content is text blocks, as the TypeScript SDK sends a prompt."""
    content = [{"type": "text", "text": text} for text in texts]
    yield {
        "type": "user",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": None,
        "session_id": "default",
    }


def tool_results(server: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [
        b
        for r in server.requests[1:]
        for b in r.body["messages"][-1]["content"]
        if b.get("type") == "tool_result"
    ]


async def test_hooks_of_a_prompt_of_blocks_add_context_block_and_read_stdout(
    tmp_path: Path,
) -> None:
    seen: dict[str, list[dict[str, Any]]] = {}

    def recording(answer: dict[str, Any]) -> Any:
        async def hook(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
            seen.setdefault(hook_input["hook_event_name"], []).append(hook_input)
            return answer

        return hook

    async def guard(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        if "forbidden" not in hook_input["tool_input"]["command"]:
            return {}
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "not that one",
            }
        }

    outputs: list[str] = []

    async def post(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        outputs.append(hook_input["tool_response"]["stdout"])
        return {}

    context = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit"}}
    context["hookSpecificOutput"]["additionalContext"] = "the code word is PLOVER"
    hooks = {
        "SessionStart": [sdk.HookMatcher(hooks=[recording({})])],
        "UserPromptSubmit": [sdk.HookMatcher(hooks=[recording(context)])],
        "PreToolUse": [sdk.HookMatcher(matcher="Bash", hooks=[guard])],
        "PostToolUse": [sdk.HookMatcher(matcher="Bash", hooks=[post])],
    }
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[ToolCall("Bash", {"command": "echo allowed-ran"})])
        server.add_turn(tool_calls=[ToolCall("Bash", {"command": "echo forbidden-ran"})])
        server.add_turn(text="done")
        opts = options(server, tmp_path, hooks=hooks, permission_mode="bypassPermissions")
        prompt = blocks("first block", "second block")
        messages = [m async for m in sdk.query(prompt=prompt, options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "done"
    (started,) = seen["SessionStart"]
    assert started["source"] == "startup" and started["session_id"] == messages[-1].session_id
    (submitted,) = seen["UserPromptSubmit"]
    assert submitted["prompt"] == "first block\nsecond block"
    assert submitted["permission_mode"] == "bypassPermissions"
    # The context reaches the model in the prompt's message, after the program's blocks.
    first = server.requests[0].body["messages"][0]["content"]
    texts = [b["text"] for b in first if b.get("type") == "text"]
    assert texts[:2] == ["first block", "second block"]
    assert "the code word is PLOVER" in texts[-1]
    allowed, forbidden = tool_results(server)
    assert "allowed-ran" in str(allowed["content"]) and not allowed.get("is_error")
    assert forbidden["is_error"] and "not that one" in str(forbidden["content"])
    assert outputs == ["allowed-ran"]  # the refused call never ran, so no PostToolUse


async def test_a_prompt_hook_refusing_a_prompt_of_blocks_ends_the_turn_unanswered(
    tmp_path: Path,
) -> None:
    async def refuse(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        return {"decision": "block", "reason": "no secrets in prompts"}

    hooks = {"UserPromptSubmit": [sdk.HookMatcher(hooks=[refuse])]}
    with FakeAnthropicServer() as server:
        server.add_turn(text="never asked")
        opts = options(server, tmp_path, hooks=hooks)
        # The SDK raises the error result it reads.
        with pytest.raises(Exception, match="no secrets in prompts"):
            [m async for m in sdk.query(prompt=blocks("my password"), options=opts)]
        assert server.pending == 1  # the model was never asked


async def test_notification_hooks_hear_of_a_permission_question_while_it_waits(
    tmp_path: Path,
) -> None:
    told = asyncio.Event()
    notices: list[dict[str, Any]] = []

    async def notification(hook_input: Any, tool_use_id: str | None, context: Any) -> Any:
        notices.append(hook_input)
        told.set()
        return {}

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        # Answered only once the hook was told: it runs while the question waits.
        await asyncio.wait_for(told.wait(), 10 * TIME_FACTOR)
        return sdk.PermissionResultAllow()

    hooks = {"Notification": [sdk.HookMatcher(matcher="permission_prompt", hooks=[notification])]}
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[ToolCall("Bash", {"command": "echo asked-first"})])
        server.add_turn(text="done")
        opts = options(server, tmp_path, hooks=hooks, can_use_tool=can_use_tool)
        messages = [m async for m in sdk.query(prompt=blocks("run it"), options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "done"
    (notice,) = notices
    assert notice["notification_type"] == "permission_prompt"
    assert notice["message"] == "taskloom needs your permission to use Bash"
    assert notice["session_id"] == messages[-1].session_id
    (ran,) = tool_results(server)
    assert "asked-first" in str(ran["content"])
