"""The main thread's engine configuration: its tools, system prompt, meter and the rest.

The counterpart, for the thread the program talks to, of :mod:`taskloom.agents.builder` (a
subagent's configuration). :func:`taskloom.started.compose` makes it once the session's parts
exist (the agent service, the team, the worktree the thread may move into, the MCP servers),
so that the composition root stays one screen per concern.

The main thread is offered the core tools of the settings' ``toolProfile``, the web tools
(WebFetch; WebSearch when the session can search), Agent and
SendMessage, EnterWorktree and ExitWorktree, EnterPlanMode, ExitPlanMode and AskUserQuestion
(which ask the user), Skill (when there are skills), a team lead's tools, StructuredOutput
(with a ``json_schema``), the MCP servers' tools and the program's own, and ToolSearch when
those are deferred (:mod:`taskloom.tools.deferral`). A coordinator only
orchestrates: it has Agent, SendMessage and TaskStop, its workers have the rest, and its
prompt says what they have. ``builtin_tools`` keeps only the built-in tools it names; the
permission policy hides the tools it denies outright.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskloom.agents.service import AgentService
    from taskloom.engine_config import EngineConfig
    from taskloom.events import EngineObserver
    from taskloom.hooks import HookConfig
    from taskloom.mcp.manager import McpManager
    from taskloom.models.base import Model
    from taskloom.options import Options
    from taskloom.permissions import PermissionPolicy, PermissionPrompter
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.service import TeamService
    from taskloom.tools.base import Tool
    from taskloom.tools.structured import StructuredOutput
    from taskloom.tools.worktree_tools import WorktreeSession


def main_tools(
    service: AgentService,
    place: WorktreeSession,
    hooks: HookConfig,
    *,
    profile: str,
    coordinator: bool,
    lead: TeamService | None,
    only: Sequence[str] | None,
    structured: StructuredOutput | None,
    mcp: McpManager | None,
    extra: Sequence[Tool[Any]],
    policy: PermissionPolicy,
) -> list[Tool[Any]]:
    """The tools the main thread is offered.

    Args:
        service: The session's agent service (for Agent and SendMessage).
        place: Where the main thread works (for EnterWorktree and ExitWorktree).
        hooks: The session's hooks (the worktree tools run WorktreeCreate and WorktreeRemove).
        profile: The core tools' profile (setting ``toolProfile``).
        coordinator: The main thread only orchestrates workers.
        lead: The team the main thread leads (its team tools), if any.
        only: The names of the built-in tools to keep (``builtin_tools``); None keeps all.
        structured: The StructuredOutput tool, when runs must answer to a ``json_schema``.
        mcp: The session's MCP servers (a coordinator's workers have their tools).
        extra: The program's own tools.
        policy: The permission policy: what it denies outright is not offered.
    """
    from taskloom.agents.agent_tool import AgentTool
    from taskloom.agents.send_message import LeadSendMessageTool, SendMessageTool
    from taskloom.agents.workflow_tool import WorkflowTool
    from taskloom.tools.registry import core_tools, interactive_tools, skill_tools, web_tools
    from taskloom.tools.worktree_tools import EnterWorktreeTool, ExitWorktreeTool

    # A team lead's SendMessage may ask to be woken by a teammate's next idle notice.
    send = SendMessageTool(service) if lead is None else LeadSendMessageTool(service)
    builtin: list[Tool[Any]]
    if coordinator:
        from taskloom.tools.tasks import TaskStopTool

        # It orchestrates only: the workers have the tools (and the MCP servers).
        builtin = [AgentTool(service, coordinator=True), send, TaskStopTool()]
    else:
        builtin = [
            *core_tools(profile),
            *web_tools(service.builder.model, service.builder.settings),
            AgentTool(service),
            WorkflowTool(service),
            send,
            EnterWorktreeTool(place, hooks),
            ExitWorktreeTool(place, hooks),
            *interactive_tools(),
            *skill_tools(service.builder.skills),
        ]
    messenger = service.messenger
    if messenger.listen_path is not None or messenger.bridge_address is not None:
        from taskloom.agents.list_peers import ListPeersTool

        # A session that listens takes part in messages between sessions: it may look for
        # its peers (one that does not keeps its offered tools, and their bytes, as they were).
        builtin.append(ListPeersTool(service))
    if lead is not None:
        from taskloom.teams.compose import lead_tools

        builtin += lead_tools(lead)
    if only is not None:
        builtin = [t for t in builtin if t.name in only]
    if structured is not None:
        builtin.append(structured)
    mcp_tools: list[Tool[Any]] = []
    if mcp is not None and not coordinator:
        from taskloom.mcp.monitor import MonitorMcpTool

        mcp_tools = [*mcp.tools(), MonitorMcpTool(mcp)]
    offered = [t for t in [*builtin, *mcp_tools, *extra] if not policy.hides(t.name, t.kind)]
    if policy.hides("ToolSearch", "other"):
        return offered
    from taskloom.tools.deferral import with_tool_search

    # Many MCP tools: their schemas are deferred, found with ToolSearch (tools/deferral.py).
    return with_tool_search(offered, service.builder.model.name, service.builder.settings)


def main_config(
    runtime: TaskRuntime,
    options: Options,
    service: AgentService,
    *,
    model: Model,
    tools: Sequence[Tool[Any]],
    cwd: Path,
    settings: dict[str, Any],
    max_tokens: int,
    policy: PermissionPolicy,
    hooks: HookConfig,
    place: WorktreeSession,
    prompter: PermissionPrompter | None,
    observer: EngineObserver | None,
    coordinator: bool,
    mcp: McpManager | None,
    lead: bool = False,
) -> EngineConfig:
    """The main thread's engine configuration.

    Args:
        runtime: The session's runtime (the main thread's owner is the session).
        options: The session's options (turns, headless, waiting, prompts, budget flags).
        service: The session's agent service (the coordinator's workers, the budgets).
        model: The model to ask (the session's switch: the program may choose another).
        tools: The tools offered (:func:`main_tools`).
        cwd: The session's working directory.
        settings: The effective settings.
        max_tokens: The cap on each response, in tokens.
        policy: The permission policy.
        hooks: The session's hooks.
        place: Where the main thread works now (EnterWorktree moves it).
        prompter: Who answers the calls that need approval.
        observer: What hears the engine.
        coordinator: The main thread only orchestrates workers.
        mcp: The session's MCP servers (a coordinator's prompt names those connected).
        lead: It leads a team (teams are on): its prompt says how (unless replaced).
    """
    from taskloom.engine_config import EngineConfig
    from taskloom.instructions import ConversationInstructions
    from taskloom.transcript import transcript_path

    return EngineConfig(
        model=model,
        system_prompt=_prompt(options, cwd, service, coordinator=coordinator, mcp=mcp, lead=lead),
        tools=tools,
        owner=runtime.session_id,
        cwd=cwd,
        max_turns=options.max_turns,
        max_tokens=max_tokens,
        permissions=policy,
        headless=options.headless,
        wait_for_tasks=options.wait_for_tasks,
        prompter=prompter,
        settings=settings,
        hooks=hooks,
        cwd_source=lambda: place.cwd,
        session_id=runtime.session_id,
        transcript_path=str(transcript_path(runtime.session_id, runtime.home, runtime.cwd)),
        observer=observer,
        # The session's budget is the spawner's (see taskloom.agents.compose.agent_service).
        meter=service.spawner.budgets.meter(runtime.session_id),
        instructions=ConversationInstructions(service.builder.instructions),
        # The editor's buffers and terminal are the main thread's: its subagents work on disk.
        text_files=options.text_files,
        commands=options.commands,
    )


def _prompt(
    options: Options,
    cwd: Path,
    service: AgentService,
    *,
    coordinator: bool,
    mcp: McpManager | None,
    lead: bool,
) -> str:
    """The main thread's system prompt; a coordinator's says what its workers have.

    A team lead's (teams on) says how to lead, after ours: a replaced prompt is left whole.
    """
    from taskloom.prompts import main_system_prompt

    told = service.builder.instructions.text()
    if not coordinator or options.system_prompt is not None:
        append = options.append_system_prompt
        if lead and options.system_prompt is None:
            from taskloom.teams.prompts import lead_section

            append = "\n\n".join(p for p in (lead_section(), append) if p)
        return main_system_prompt(cwd, append, replace=options.system_prompt, instructions=told)
    from taskloom.agents.coordinator import coordinator_system_prompt

    servers = mcp.status() if mcp is not None else {}
    connected = [name for name, status in servers.items() if status == "connected"]
    return coordinator_system_prompt(service.builder, cwd, connected, options.append_system_prompt)


__all__ = ["main_config", "main_tools"]
