r"""Permission rules in Claude Code's syntax, and the request/decision records around them.

A rule is ``Tool`` or ``Tool(content)``: ``Bash(npm test:*)``, ``Read(./secrets/**)``,
``WebFetch(domain:example.com)``, ``mcp__server__tool``, ``Agent(Explore)``. Parentheses inside
the content must balance or be escaped (``Bash(python -c "print\(1\)")``).
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

from taskloom._dataclass import dataclass
from taskloom.errors import UsageError

Behavior = Literal["allow", "deny", "ask"]

#: What a tool does, for permission modes: ``read`` is allowed by default, ``edit`` is
#: allowed in acceptEdits mode, ``execute`` always needs a rule or a bypass. ``fetch`` reads
#: the network (WebFetch, WebSearch): it needs a rule or approval like ``execute``, but
#: changes nothing here, so plan mode (which may read) asks instead of refusing.
ToolKind = Literal["read", "edit", "execute", "fetch", "other"]

#: Who may approve a call of the tool, beyond its kind: ``rules`` (its kind and the rules
#: decide), ``ask`` (the tool asks itself: an allow rule or bypassPermissions may still
#: allow it — EnterPlanMode), ``person`` (only someone asked can answer: no mode or allow
#: rule skips the question, a deny rule still denies — ExitPlanMode, AskUserQuestion).
Approval = Literal["rules", "ask", "person"]

#: Claude Code called the Agent tool ``Task`` before 2.1; settings files still say so.
_TOOL_ALIASES = {"Task": "Agent"}
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.*-]+")


@dataclass(frozen=True, slots=True)
class Rule:
    """One allow / deny / ask rule.

    Attributes:
        tool: The tool name the rule is about (``Bash``, ``Edit``, ``mcp__srv__*``).
        content: What is inside the parentheses, unescaped; None for the whole tool.
        behavior: ``allow``, ``deny`` or ``ask``.
        source: Where the rule came from, for messages (a settings key, a CLI flag).
    """

    tool: str
    content: str | None
    behavior: Behavior
    source: str

    def __str__(self) -> str:
        """The rule as it would be written in a settings file."""
        if self.content is None:
            return self.tool
        escaped = self.content.replace("(", "\\(").replace(")", "\\)")
        return f"{self.tool}({escaped})"


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """A tool call waiting for a decision.

    Attributes:
        tool_name: The tool's name as the model called it.
        kind: The tool's kind (``read``, ``edit``, ``execute``, ``other``).
        target: What rules match against: the Bash command, the absolute file path, the URL
            for WebFetch, the subagent type for Agent; None when there is nothing.
        cwd: The working directory of the calling agent.
        input: The validated tool input, for details a rule may need.
        approval: Who may approve the call beyond its kind (see :data:`Approval`).
        declared_read_only: The tool's maker declares it changes nothing (an MCP server's
            ``readOnlyHint``); a read-only agent may call an MCP tool only then.
    """

    tool_name: str
    kind: ToolKind
    target: str | None
    cwd: Path
    input: dict[str, Any] = field(default_factory=dict)
    approval: Approval = "rules"
    declared_read_only: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of a permission check.

    Attributes:
        behavior: ``allow``, ``deny`` or ``ask``.
        reason: Why, in words fit for the model or the user.
        rule: The rule that decided, None when the mode did.
        tool_name: The tool the decision is about.
        suggestion: A rule that would allow the call (``Bash(git push:*)``), for messages.
    """

    behavior: Behavior
    reason: str
    rule: Rule | None = None
    tool_name: str = ""
    suggestion: str | None = None


def parse_rule(text: str, behavior: Behavior, source: str) -> Rule:
    """Parse one rule string.

    ``Tool()`` and ``Tool(*)`` mean the whole tool, like ``Tool``. ``Task(...)`` is read as
    ``Agent(...)`` (the tool's name in older Claude Code).

    Args:
        text: The rule, e.g. ``Bash(npm test:*)``.
        behavior: What the rule does when it matches.
        source: Where it came from, named in errors.

    Returns:
        The parsed rule.

    Raises:
        UsageError: The rule is empty, has no tool name, a bad tool name, or unbalanced
            parentheses.
    """
    stripped = text.strip()
    open_at = _find_unescaped(stripped, "(")
    if open_at < 0:
        tool, content = stripped, None
        if _find_unescaped(stripped, ")") >= 0:
            raise UsageError(f"malformed permission rule {text!r} in {source}: unbalanced ')'")
    else:
        tool = stripped[:open_at].strip()
        if not stripped.endswith(")") or stripped.endswith("\\)"):
            raise UsageError(
                f"malformed permission rule {text!r} in {source}: expected it to end with ')'"
            )
        raw = stripped[open_at + 1 : -1]
        if not _balanced(raw):
            raise UsageError(
                f"malformed permission rule {text!r} in {source}: unbalanced parentheses"
            )
        content = raw.replace("\\(", "(").replace("\\)", ")").strip()
        if content in ("", "*"):
            content = None
    if not tool:
        raise UsageError(f"malformed permission rule {text!r} in {source}: missing tool name")
    if not _TOOL_NAME.fullmatch(tool):
        raise UsageError(f"malformed permission rule {text!r} in {source}: bad tool name {tool!r}")
    return Rule(_TOOL_ALIASES.get(tool, tool), content, behavior, source)


def split_rule_list(value: str) -> list[str]:
    """Split a ``--allowedTools`` value into rule strings.

    Rules are separated by commas or whitespace outside parentheses, so
    ``"Bash(git diff *), Edit Read"`` gives ``["Bash(git diff *)", "Edit", "Read"]``.
    """
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0 and (char == "," or char.isspace()):
            if current:
                parts.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        parts.append("".join(current))
    return parts


def _find_unescaped(text: str, char: str) -> int:
    """Index of the first ``char`` not preceded by a backslash, or -1."""
    escaped = False
    for index, current in enumerate(text):
        if escaped:
            escaped = False
        elif current == "\\":
            escaped = True
        elif current == char:
            return index
    return -1


def _balanced(text: str) -> bool:
    """Whether unescaped parentheses in ``text`` nest properly."""
    depth = 0
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0
