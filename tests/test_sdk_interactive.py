"""AskUserQuestion and ExitPlanMode answered by the real ``claude-agent-sdk``'s ``can_use_tool``.

taskloom runs as the SDK starts Claude Code, against a fake Anthropic server (see test_sdk.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fake_servers import FakeAnthropicServer
from helpers import LazyModule
from test_sdk import options

sdk = LazyModule("claude_agent_sdk")

pytestmark = pytest.mark.e2e

QUESTIONS = [
    {
        "question": "Which database should we use?",
        "header": "Database",
        "options": [
            {"label": "PostgreSQL", "description": "Relational, with advanced features"},
            {"label": "SQLite", "description": "Lightweight, embedded"},
        ],
        "multiSelect": False,
    },
    {
        "question": "Which features do you want?",
        "header": "Features",
        "options": [
            {"label": "Caching", "description": "Response caching"},
            {"label": "Logging", "description": "Detailed logs"},
            {"label": "Metrics", "description": "Performance monitoring"},
        ],
        "multiSelect": True,
    },
]


def tool_results(server: FakeAnthropicServer) -> list[dict[str, Any]]:
    return [
        b
        for r in server.requests[1:]
        for b in r.body["messages"][-1]["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


async def prompt(text: str) -> Any:
    yield {"type": "user", "message": {"role": "user", "content": text}}


async def test_ask_user_question_is_answered_through_can_use_tool(tmp_path: Path) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        asked.append((name, tool_input))
        # As the SDK's documentation says: the questions back, and the answers by question.
        answers = {
            "Which database should we use?": "SQLite",
            "Which features do you want?": "Caching, Metrics",
        }
        return sdk.PermissionResultAllow(
            updated_input={"questions": tool_input["questions"], "answers": answers}
        )

    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("AskUserQuestion", {"questions": QUESTIONS})])
        server.add_turn(text="SQLite it is")
        opts = options(server, tmp_path, can_use_tool=can_use_tool)
        messages = [m async for m in sdk.query(prompt=prompt("set it up"), options=opts)]
    assert asked == [("AskUserQuestion", {"questions": QUESTIONS})]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "SQLite it is"
    (result,) = tool_results(server)
    assert not result.get("is_error")
    assert result["content"] == (
        'User has answered your questions: "Which database should we use?"="SQLite", '
        '"Which features do you want?"="Caching, Metrics". '
        "You can now continue with the user's answers in mind."
    )
    assert "AskUserQuestion" in [t["name"] for t in server.requests[0].body["tools"]]


async def test_ask_user_question_without_a_prompter_is_a_clear_tool_error(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("AskUserQuestion", {"questions": QUESTIONS})])
        server.add_turn(text="assumed SQLite")
        opts = options(server, tmp_path, permission_mode="bypassPermissions")
        messages = [m async for m in sdk.query(prompt="set it up", options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage)
    (result,) = tool_results(server)
    assert result["is_error"] and "cannot be answered in this session" in str(result["content"])


async def test_exit_plan_mode_approved_through_can_use_tool_leaves_plan_mode(
    tmp_path: Path,
) -> None:
    asked: list[str] = []

    async def can_use_tool(name: str, tool_input: dict[str, Any], context: Any) -> Any:
        asked.append(name)
        if name != "ExitPlanMode":
            return sdk.PermissionResultDeny(message=f"{name} was not expected")
        # Approved, edits accepted from now on (Claude Code's setMode update).
        mode = sdk.PermissionUpdate(type="setMode", mode="acceptEdits", destination="session")
        return sdk.PermissionResultAllow(updated_permissions=[mode])

    target = tmp_path / "plan.txt"
    with FakeAnthropicServer() as server:
        server.add_turn(tool_calls=[("Write", {"file_path": str(target), "content": "early"})])
        server.add_turn(tool_calls=[("ExitPlanMode", {"plan": "1. Write plan.txt"})])
        server.add_turn(tool_calls=[("Write", {"file_path": str(target), "content": "done"})])
        server.add_turn(text="written")
        opts = options(server, tmp_path, can_use_tool=can_use_tool, permission_mode="plan")
        messages = [m async for m in sdk.query(prompt=prompt("plan, then write"), options=opts)]
    assert isinstance(messages[-1], sdk.ResultMessage) and messages[-1].result == "written"
    refused, approved, written = tool_results(server)
    assert refused["is_error"] and "not allowed in plan mode" in str(refused["content"])
    assert str(approved["content"]).startswith("User has approved your plan.")
    assert not written.get("is_error")
    # Asked once, for the plan: the Write after it ran under acceptEdits, unasked.
    assert asked == ["ExitPlanMode"] and target.read_text() == "done"
