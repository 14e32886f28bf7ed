"""Fork subagents: a child that is a copy of its parent, sent off with one directive.

A fork keeps the parent's exact system prompt, tools and message history — a byte-identical
prefix, so the provider's prompt cache is reused — and continues it with the parent's pending
tool calls answered and a directive appended. The directive's marker in the history is how a
fork knows it is one: a fork may not fork again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from taskloom.messages import Message, TextBlock, ToolResultBlock

MARKER = "<fork_directive>"
NESTED_FORK_ERROR = "Fork is not available inside a forked worker."

DIRECTIVE = """<fork_directive>
Read this before anything else: you are a forked worker, not the main agent.

You share the main agent's memory up to this point, but you have one job, given below.
- Work directly with your tools (Bash, Read, Edit, Write, ...). Do not start other agents or
  forks, even if your instructions elsewhere suggest forking: you are the fork.
- Do not converse, ask questions, propose next steps or comment on your own work.
- Do not write text between tool calls; stay strictly inside the scope you were given.
- If you change files, commit them before reporting.
- End with one report of at most 500 words (unless the directive asks otherwise), starting
  with "Scope:", in this shape:
    Scope: <the scope you were given, in your words>
    Result: <what you found or did>
    Key files: <the paths that matter>
    Files changed: <paths, with the commit hash>
    Issues: <problems, if any>
</fork_directive>

Directive:
"""


def fork_enabled(settings: dict[str, Any]) -> bool:
    """Fork mode: setting ``forkSubagent`` or env ``TASKLOOM_FORK_SUBAGENT=1``."""
    env = os.environ.get("TASKLOOM_FORK_SUBAGENT", "")
    return env.lower() in ("1", "true", "yes") or settings.get("forkSubagent") is True


def is_fork(messages: Sequence[Message]) -> bool:
    """Whether this conversation belongs to a fork (its directive is in the history)."""
    return any(
        isinstance(block, TextBlock) and MARKER in block.text
        for message in messages
        if message.role == "user"
        for block in message.content
    )


def fork_messages(parent: Sequence[Message], prompt: str) -> list[Message]:
    """The fork's conversation: the parent's, its open tool calls answered, then the directive.

    The parent's last message is the assistant turn that asked for the fork; each of its tool
    calls gets a placeholder result (the API requires one), then comes the directive.
    """
    history = list(parent)
    last = history[-1] if history else None
    calls = last.tool_uses() if last is not None and last.role == "assistant" else []
    results = [
        ToolResultBlock(tool_use_id=c.id, content="Forked: this call runs in a forked worker.")
        for c in calls
    ]
    directive = Message(role="user", content=[*results, TextBlock(text=DIRECTIVE + prompt)])
    return [*history, directive]
