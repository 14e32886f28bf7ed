"""Where an agent confined to its worktree may read and edit files.

A subagent with a worktree of its own works there only: its file tools may use the worktree
and the directories given besides (its memory), and its read tools also the session's saved
tool results, which a preview tells it to read. Anything else is refused before any
permission rule is asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error


def outside_confinement(
    tool: Tool[Any],
    params: Any,
    ctx: ToolContext,
    root: Path | None,
    also: Sequence[Path] = (),
    readable: Sequence[Path] = (),
) -> ToolResult | None:
    """The error for a file tool call outside ``root`` and ``also``; None when it may run.

    Args:
        tool: The tool called; only read and edit tools are confined.
        params: Its validated input.
        ctx: The call's context.
        root: The worktree the agent is confined to; None: not confined.
        also: Other directories its file tools may use.
        readable: Directories its read tools may use besides.
    """
    if root is None or tool.kind not in ("read", "edit"):
        return None
    target = tool.permission_target(params, ctx)
    if target is None:
        return None
    resolved = Path(target).resolve()
    allowed = [root, *also, *(readable if tool.kind == "read" else ())]
    if any(resolved.is_relative_to(r.resolve()) for r in allowed):
        return None
    return tool_error(
        f"{tool.name} may only use files inside this agent's worktree {root}; "
        f"{target} is outside it."
    )
