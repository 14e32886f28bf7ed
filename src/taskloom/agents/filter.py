"""Which tools a subagent gets, in three layers and then its definition's lists.

1. MCP tools (``mcp__…``) pass the next two layers.
2. A deny list for every agent: TaskOutput, ExitPlanMode, EnterPlanMode, AskUserQuestion,
   TaskStop — and Agent and Workflow, unless nesting is enabled — so a subagent neither
   recurses nor waits on a person.
3. Background agents get an allow-list: a tool added later is not theirs until listed here.

Then the definition: ``tools`` (None or ``*``: everything left; the session's MCP tools too
only when it names them: ``mcp__server__tool``, or a whole server as ``mcp__server`` or
``mcp__server__*``) and ``disallowedTools`` (:func:`by_definition`, which a teammate of the
type gets alone: see :mod:`taskloom.teams.compose`); its own MCP servers' tools are its own
(:func:`own_tools`). Last, :func:`restrict_spawns`: an agent whose definition names
the agent types it may start (``Agent(a, b)``, ``allowedAgentTypes``) gets an Agent tool that
starts only those.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from typing import Any

from taskloom.agents.definition import AgentDefinition
from taskloom.tools.base import Tool

ALL_AGENT_DISALLOWED = frozenset(
    {
        "TaskOutput",
        "ExitPlanMode",
        "EnterPlanMode",
        "AskUserQuestion",
        "TaskStop",
        "Agent",
        "Workflow",
    }
)
#: The tools that start agents: a subagent has them only when nesting is enabled.
SPAWNING = frozenset({"Agent", "Workflow"})
ASYNC_AGENT_ALLOWED = frozenset(
    {
        "Read",
        "Grep",
        "Glob",
        "Bash",
        "Edit",
        "Write",
        "NotebookEdit",
        "WebFetch",
        "WebSearch",
        "TodoWrite",
        "Skill",
        "ToolSearch",
        "SendMessage",
        "job_output",
        "job_list",
        "job_kill",
    }
)


def _tool_name(entry: str) -> str:
    # ``Bash(git:*)`` in a tools list names the tool; the rule part is for permissions.
    return entry.split("(", 1)[0].strip()


def restrict_spawns(tools: Sequence[Tool[Any]], types: tuple[str, ...] | None) -> list[Tool[Any]]:
    """``tools`` with the Agent tool limited to ``types`` (None: as it is; empty: removed).

    The Agent tool limits itself (its ``restricted``); one that cannot is left out rather
    than offered unlimited, and so is Workflow.
    """
    if types is None:
        return list(tools)
    out: list[Tool[Any]] = []
    for tool in tools:
        if tool.name == "Workflow":
            continue  # it cannot limit its types: left out rather than offered unlimited
        if tool.name == "Agent":
            restricted = getattr(tool, "restricted", None)
            if not types or restricted is None:
                continue
            tool = restricted(types)
        out.append(tool)
    return out


def filter_tools(
    tools: Sequence[Tool[Any]],
    *,
    allowed: Iterable[str] | None,
    disallowed: Iterable[str] = (),
    is_async: bool,
    allow_nesting: bool = False,
) -> list[Tool[Any]]:
    """The tools a subagent may use.

    Args:
        tools: Everything the parent could offer.
        allowed: The definition's ``tools`` (None or containing ``*``: all).
        disallowed: The definition's ``disallowedTools``.
        is_async: Whether the agent runs in the background.
        allow_nesting: Whether agents may start agents.
    """
    out = []
    for tool in by_definition(tools, allowed=allowed, disallowed=disallowed):
        name = tool.name
        if not name.startswith("mcp__"):
            if name in ALL_AGENT_DISALLOWED and not (name in SPAWNING and allow_nesting):
                continue
            if is_async and name not in ASYNC_AGENT_ALLOWED and name not in SPAWNING:
                continue
        out.append(tool)
    return out


def read_only_offer(tools: Sequence[Tool[Any]]) -> list[Tool[Any]]:
    """The tools a read-only agent is offered: MCP tools only where declared read-only.

    An MCP tool is kept when its server's annotations say ``readOnlyHint: true``; the agent's
    permissions refuse the others if it calls them anyway.
    """
    return [t for t in tools if not t.name.startswith("mcp__") or t.declared_read_only]


def by_definition(
    tools: Sequence[Tool[Any]], *, allowed: Iterable[str] | None, disallowed: Iterable[str] = ()
) -> list[Tool[Any]]:
    """The tools a definition's own lists keep (its ``tools``, then its ``disallowedTools``).

    Only that layer: a teammate of a type gets what its definition allows of the lead's
    tools, under the team's rules rather than a subagent's.

    Args:
        tools: The tools to choose from.
        allowed: The definition's ``tools`` (None or containing ``*``: all).
        disallowed: The definition's ``disallowedTools``.
    """
    wanted = None if allowed is None else {_tool_name(t) for t in allowed}
    if wanted is not None and "*" in wanted:
        wanted = None
    refused = {_tool_name(t) for t in disallowed}
    return [
        tool
        for tool in tools
        if not _names(tool.name, refused) and (wanted is None or _names(tool.name, wanted))
    ]


def _names(name: str, entries: set[str]) -> bool:
    """Whether a list's ``entries`` name tool ``name``: by name, or as one of a server's.

    A read-only type that lists ``Read`` and ``Grep`` must not get every MCP tool of the
    session with them (some write); one that wants a server's tools names the server.
    """
    if name in entries:
        return True
    if not name.startswith("mcp__"):
        return False
    server = name.split("__", 2)[1]
    return f"mcp__{server}" in entries or f"mcp__{server}__*" in entries


def own_tools(
    definition: AgentDefinition, tools: Sequence[Tool[Any]], taken: Container[str] = ()
) -> list[Tool[Any]]:
    """The tools of a definition's own MCP servers that its agent gets.

    Its ``tools`` list need not name them (the servers are declared for it); its
    ``disallowedTools`` still apply, and a name already ``taken`` by the session's tools stays
    theirs (the API refuses duplicate names).
    """
    mine = [t for t in tools if t.name not in taken]
    return by_definition(mine, allowed=None, disallowed=definition.disallowed_tools)
