"""What an agent's conversation says, as ACP ``session/update`` payloads of its child session.

An agent's run tells the session's engine observer of each whole message (its prompt, its
answers, the results of its tool calls). Here each becomes the updates a client shows in the
child session: text and thinking as message chunks, each tool call as a ``tool_call`` that
its result ends. Payloads are the protocol's wire form (camelCase), ready to send.
"""

from __future__ import annotations

from typing import Any

from taskloom.agents.activity import describe_activity
from taskloom.events import AssistantTurn, UserTurn
from taskloom.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

#: Most characters of a tool result a child's tool call shows (the agent has it all).
RESULT_CHARS = 4000

#: The ACP tool kind of each core tool (the icon a client shows); others are ``other``.
TOOL_KINDS = {
    "Read": "read",
    "Write": "edit",
    "Edit": "edit",
    "NotebookEdit": "edit",
    "Glob": "search",
    "Grep": "search",
    "Bash": "execute",
    "Monitor": "execute",
    "WebFetch": "fetch",
    "WebSearch": "fetch",
    "Agent": "think",
    "Task": "think",
}


def text_content(text: str) -> dict[str, Any]:
    """A tool call's content entry holding ``text``."""
    return {"type": "content", "content": {"type": "text", "text": text}}


def capped(text: str, limit: int = RESULT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[{len(text) - limit} more characters]"


def _chunk(kind: str, text: str) -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def assistant_updates(turn: AssistantTurn) -> list[dict[str, Any]]:
    """An agent's answer: its text, its thinking and a ``tool_call`` for each call it makes."""
    updates: list[dict[str, Any]] = []
    for block in turn.message.content:
        if isinstance(block, TextBlock) and block.text:
            updates.append(_chunk("agent_message_chunk", block.text))
        elif isinstance(block, ThinkingBlock) and block.thinking:
            updates.append(_chunk("agent_thought_chunk", block.thinking))
        elif isinstance(block, ToolUseBlock):
            updates.append(
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": block.id,
                    "title": describe_activity(block.name, block.input),
                    "kind": TOOL_KINDS.get(block.name, "other"),
                    "status": "in_progress",
                    "rawInput": block.input,
                }
            )
    return updates


def user_updates(turn: UserTurn) -> list[dict[str, Any]]:
    """What entered an agent's conversation: its prompt or mail, or its tool calls' results."""
    updates: list[dict[str, Any]] = []
    for block in turn.message.content:
        if isinstance(block, ToolResultBlock):
            updates.append(
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": block.tool_use_id,
                    "status": "failed" if block.is_error else "completed",
                    "content": [text_content(capped(block.text()))],
                }
            )
        elif isinstance(block, TextBlock) and block.text:
            updates.append(_chunk("user_message_chunk", block.text))
    return updates


def message_updates(event: AssistantTurn | UserTurn) -> list[dict[str, Any]]:
    """The child session's updates for one message of its agent."""
    if isinstance(event, AssistantTurn):
        return assistant_updates(event)
    return user_updates(event)


__all__ = ["RESULT_CHARS", "TOOL_KINDS", "capped", "message_updates", "text_content"]
