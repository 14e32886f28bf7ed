"""Deferred tools: when the MCP tools are many, requests carry their names, not their schemas.

Claude Code's tool search. With it on, the MCP tools and the built-in tools Claude Code defers
(:data:`DEFERRED_BUILTINS`) are deferred: each request carries the other tools' schemas and
ToolSearch (:mod:`taskloom.tools.tool_search`), and the first user message starts with an
``<available-deferred-tools>`` block naming the deferred tools, one a line, sorted. A tool is
sent with every request from the one after a ToolSearch answer defined it, appended after
the others in the order they were found: what was sent before stays byte for byte what it
was (the prompt cache's prefix), and a new tool only adds to its end. Which tools are loaded
is read from the conversation itself (the ToolSearch answers in it), so a resumed or forked
conversation has the tools it had; a compacted one finds them again.

A deferred tool called before any search found it is not refused: it runs as its input
allows, and from then on its schema is sent too (the call is in the conversation). A model
that guessed its input wrong gets the usual validation error naming the fields, and the
schema with the next request.

When: the environment variable ``ENABLE_TOOL_SEARCH``, else the setting ``toolSearch``:
``auto`` (the default) turns it on when the MCP tools' definitions would take more than 10% of
the model's context window (``auto:N``: N%), ``true`` always (when there is a tool to defer),
``false`` never.
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from taskloom.errors import UserError
from taskloom.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from taskloom.models.base import ToolSpec
from taskloom.tools.base import Tool
from taskloom.tools.tool_search import TOOL_SEARCH, ToolSearchTool, defined_names

#: The environment variable that turns tool search on or off (Claude Code's); it wins.
TOOL_SEARCH_ENV = "ENABLE_TOOL_SEARCH"
#: The setting that does, when the environment variable is unset.
TOOL_SEARCH_SETTING = "toolSearch"
#: ``auto``'s share of the context window (percent) the MCP tools' definitions may take.
DEFAULT_AUTO_PERCENT = 10.0
#: The built-in tools Claude Code defers too while tool search is on (its ``shouldDefer``
#: tools that taskloom has): seldom needed, and cheap to fetch when they are.
DEFERRED_BUILTINS = frozenset(
    {
        "NotebookEdit",
        "WebFetch",
        "WebSearch",
        "Monitor",
        "TaskOutput",
        "TaskStop",
        "EnterWorktree",
        "ExitWorktree",
        "EnterPlanMode",
        "ExitPlanMode",
    }
)
#: Characters per token, to estimate what the definitions take (Read's estimate too).
_CHARS_PER_TOKEN = 4


def tool_search_mode(settings: Mapping[str, Any]) -> float | bool:
    """True (always on), False (off), or ``auto``'s percentage of the context window.

    Raises:
        UserError: The value is none of ``true``, ``false``, ``auto``, ``auto:N`` (0 ≤ N ≤
            100); the message names where it came from.
    """
    raw: Any = os.environ.get(TOOL_SEARCH_ENV) or None
    source = f"the environment variable {TOOL_SEARCH_ENV}"
    if raw is None:
        raw, source = settings.get(TOOL_SEARCH_SETTING), f"the setting {TOOL_SEARCH_SETTING}"
    if raw is None:
        return DEFAULT_AUTO_PERCENT
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in ("true", "1", "on"):
        return True
    if value in ("false", "0", "off"):
        return False
    if value == "auto":
        return DEFAULT_AUTO_PERCENT
    if value.startswith("auto:"):
        try:
            percent = float(value[len("auto:") :])
        except ValueError:
            percent = -1.0
        if 0 <= percent <= 100:
            return percent
    raise UserError(
        f"{source} must be true, false, auto or auto:N (N a percentage of the context window "
        f"from 0 to 100), got {raw!r}"
    )


def with_tool_search(
    tools: Sequence[Tool[Any]], model: str, settings: Mapping[str, Any]
) -> list[Tool[Any]]:
    """``tools``, plus ToolSearch when tool search is on for them; else ``tools`` as given.

    Args:
        tools: The tools an agent is offered (its MCP tools among them).
        model: The model asked (its context window is ``auto``'s measure).
        settings: The effective settings.

    Raises:
        UserError: A bad ``ENABLE_TOOL_SEARCH`` or ``toolSearch``.
    """
    mode = tool_search_mode(settings)
    if mode is False or any(t.name == TOOL_SEARCH for t in tools):
        return list(tools)
    mcp = [t for t in tools if is_mcp(t.name)]
    if mode is not True:
        from taskloom.models.windows import context_window

        if definition_tokens(mcp) <= context_window(model, settings) * float(mode) / 100:
            return list(tools)
    deferred = [t.name for t in tools if is_mcp(t.name) or t.name in DEFERRED_BUILTINS]
    if not deferred:
        return list(tools)
    return [*tools, ToolSearchTool(tools, deferred)]


def is_mcp(name: str) -> bool:
    """Whether ``name`` is an MCP tool's (``mcp__<server>__<tool>``)."""
    return name.startswith("mcp__")


def definition_tokens(tools: Sequence[Tool[Any]]) -> int:
    """About how many tokens the definitions of ``tools`` take in a request."""
    chars = 0
    for tool in tools:
        spec = tool.spec()
        chars += len(spec.name) + len(spec.description) + len(json.dumps(spec.input_schema))
    return chars // _CHARS_PER_TOKEN


def request_tools(tools: Sequence[Tool[Any]], messages: Sequence[Message]) -> list[ToolSpec]:
    """The schemas a request carries.

    Every tool's; with tool search on, those not deferred, then the deferred ones the
    conversation has loaded, in the order it loaded them.
    """
    search = _search_tool(tools)
    if search is None:
        return [t.spec() for t in tools]
    by_name = {t.name: t for t in tools}
    deferred = set(search.deferred) & by_name.keys()  # a teammate may have fewer tools
    specs = [t.spec() for t in tools if t.name not in deferred]
    return specs + [by_name[name].spec() for name in loaded_tools(messages, deferred)]


def request_messages(tools: Sequence[Tool[Any]], messages: Sequence[Message]) -> list[Message]:
    """The messages a request carries.

    With tool search on, the first user message starts with the ``<available-deferred-tools>``
    block (sent only, never kept in the conversation).
    """
    search = _search_tool(tools)
    if search is None or not messages or messages[0].role != "user":
        return list(messages)
    offered = {t.name for t in tools}
    names = "\n".join(sorted(n for n in search.deferred if n in offered))
    block = TextBlock(text=f"<available-deferred-tools>\n{names}\n</available-deferred-tools>")
    first = messages[0]
    return [first.replace(content=[block, *first.content]), *messages[1:]]


def loaded_tools(messages: Sequence[Message], deferred: Collection[str]) -> list[str]:
    """The deferred tools the conversation has loaded, in the order it did.

    A tool is loaded once a ToolSearch answer (not an error) defined it, or once it was called.
    """
    searches: set[str] = set()
    loaded: dict[str, None] = {}
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                if block.name == TOOL_SEARCH:
                    searches.add(block.id)
                elif block.name in deferred:
                    loaded.setdefault(block.name)
            elif isinstance(block, ToolResultBlock) and block.tool_use_id in searches:
                found = [] if block.is_error else defined_names(block.text())
                for name in found:
                    if name in deferred:
                        loaded.setdefault(name)
    return list(loaded)


def _search_tool(tools: Sequence[Tool[Any]]) -> ToolSearchTool | None:
    for tool in tools:
        if isinstance(tool, ToolSearchTool):
            return tool
    return None
