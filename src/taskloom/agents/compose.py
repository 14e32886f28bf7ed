"""Putting a session's agents together: the service, and the tools a subagent could be given.

Called by :func:`taskloom.started.compose` as the session starts (the team's counterpart is
:mod:`taskloom.teams.compose`), so that the composition root stays one screen per concern.
The service reads the agent definitions (a coordinator's catalog has its worker) and the skills
and custom commands (its builder holds them: the Skill tool's, and what agents preload),
configures each agent's engine (:mod:`taskloom.agents.builder`) and sets up its environment
(:mod:`taskloom.agents.environment`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.service import AgentService
    from taskloom.agents.team_port import TeamPort
    from taskloom.events import EngineObserver
    from taskloom.hooks import HookConfig
    from taskloom.mcp.manager import McpManager
    from taskloom.models.base import Model
    from taskloom.options import Options
    from taskloom.permissions import PermissionPolicy, PermissionPrompter
    from taskloom.skills import SkillRoot
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.tools.base import Tool


def agent_service(
    runtime: TaskRuntime,
    options: Options,
    settings: dict[str, Any],
    *,
    cwd: Path,
    model: Model,
    policy: PermissionPolicy,
    hooks: HookConfig,
    tools: Callable[[], Sequence[Tool[Any]]],
    max_tokens: int,
    prompter: PermissionPrompter | None,
    observer: EngineObserver | None,
    coordinator: bool,
    mcp: McpManager | None,
    mcp_config: dict[str, Any],
    listen_path: Path | None,
    team: TeamPort | None,
    spent: Callable[[str], None],
    plugin_agents: Sequence[AgentDefinition] = (),
    plugin_roots: Sequence[SkillRoot] = (),
) -> AgentService:
    """The session's subagent service.

    Args:
        runtime: The session's runtime.
        options: The session's options (``agents``: definitions given as JSON;
            ``setting_sources``: the scopes of instruction files read).
        settings: The effective settings.
        cwd: The session's working directory (where the agent definitions are found).
        model: The main thread's model (``inherit``; aliases resolve beside it).
        policy: The session's permission policy.
        hooks: The session's hooks.
        tools: Returns every tool a subagent could be given (:func:`subagent_tools`).
        max_tokens: The cap on each response, in tokens.
        prompter: Who answers the calls that need approval.
        observer: What hears the engines.
        coordinator: The main thread only orchestrates workers (the default type).
        mcp: The session's MCP servers.
        mcp_config: The configuration they were started from (an agent's own servers).
        listen_path: This session's socket for other sessions, if it listens.
        team: The session's team, if any.
        spent: Told why once the session's budget (``options``' flags, then the settings)
            ran out: the main thread ends its run.
        plugin_agents: The session's plugins' agents.
        plugin_roots: Where the session's plugins' skills and commands are.
    """
    from taskloom.agents.budget import session_budget
    from taskloom.agents.builder import AgentBuilder
    from taskloom.agents.environment import Environments
    from taskloom.agents.loader import load_agents
    from taskloom.agents.service import AgentService
    from taskloom.instructions import load_instructions
    from taskloom.models.resolve import alias_resolver
    from taskloom.skills import default_roots, load_catalog

    catalog = load_agents(cwd, flag_json=options.agents, plugin_agents=plugin_agents)
    if coordinator:
        from taskloom.agents.coordinator import coordinator_catalog

        catalog = coordinator_catalog(catalog)
    builder = AgentBuilder(
        runtime,
        catalog=catalog,
        model=model,
        model_name=model.name,
        tools=tools,
        settings=settings,
        policy=policy,
        max_tokens=max_tokens,
        resolve_model=alias_resolver(model, settings),
        hooks=hooks,
        prompter=prompter,
        observer=observer,
        default_type="worker" if coordinator else "general-purpose",
        # Read once: every prompt made from them this session has the same bytes.
        instructions=load_instructions(cwd, settings, options.setting_sources),
        skills=load_catalog([*default_roots(cwd), *plugin_roots]),
    )
    environments = Environments(runtime, hooks=hooks, mcp=mcp, mcp_config=mcp_config)
    return AgentService(
        runtime,
        builder,
        environments,
        cwd=cwd,
        coordinator=coordinator,
        listen_path=listen_path,
        teams=team,
        session_budget=session_budget(settings, options.max_budget_tokens, options.max_budget_usd),
        on_session_spent=spent,
    )


def subagent_tools(service: AgentService, mcp: McpManager | None, profile: str) -> list[Tool[Any]]:
    """Every tool a subagent could be given (filtered per agent; Agent only when nesting).

    Args:
        service: The session's agent service (for Agent and SendMessage).
        mcp: The session's MCP servers.
        profile: The core tools' profile (setting ``toolProfile``).
    """
    from taskloom.agents.agent_tool import AgentTool
    from taskloom.agents.send_message import SendMessageTool
    from taskloom.agents.workflow_tool import WorkflowTool
    from taskloom.tools.registry import core_tools, skill_tools, web_tools

    session_mcp: list[Tool[Any]] = []
    if mcp is not None:
        from taskloom.mcp.monitor import MonitorMcpTool

        session_mcp = [*mcp.tools(), MonitorMcpTool(mcp)]
    return [
        *core_tools(profile),
        *web_tools(service.builder.model, service.builder.settings),
        *skill_tools(service.builder.skills),
        SendMessageTool(service),
        AgentTool(service),
        WorkflowTool(service),
        *session_mcp,
    ]


__all__ = ["agent_service", "subagent_tools"]
