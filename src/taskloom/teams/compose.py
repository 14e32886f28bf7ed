"""Putting a session's team together: the service, the lead's team tools, a teammate's engine.

Called by :func:`taskloom.started.compose` when teams are on; kept here so that the
composition root stays one screen per concern.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.agents.builder import DEFAULT_TYPE
from taskloom.agents.filter import (
    SPAWNING,
    by_definition,
    own_tools,
    read_only_offer,
    restrict_spawns,
)
from taskloom.teams.executor import ConfigMaker, Executors, InProcessExecutor, TeammateSpec
from taskloom.teams.placement import Placement, Placer, place
from taskloom.teams.prompts import teammate_section
from taskloom.teams.roster import Roster
from taskloom.teams.service import TeamService
from taskloom.teams.task_tools import task_tools
from taskloom.teams.team_tools import TeamCreateTool, TeamDeleteTool

if TYPE_CHECKING:
    from taskloom.agents.definition import AgentDefinition
    from taskloom.agents.service import AgentService
    from taskloom.engine import EngineConfig
    from taskloom.options import Options
    from taskloom.tasks.runtime import TaskRuntime
    from taskloom.teams.join import JoinSpec
    from taskloom.teams.member import TeammateProcess
    from taskloom.teams.pane_executor import Launcher, PaneExecutor
    from taskloom.tools.base import Tool

#: What a teammate may not have of the lead's tools: nobody answers its questions, it does
#: not switch plan mode itself, it hears of its tasks by notification, not by polling, and it
#: does not move the lead's working directory (the worktree tools act on the lead's).
TEAMMATE_DENIED = frozenset(
    {
        "AskUserQuestion",
        "EnterPlanMode",
        "ExitPlanMode",
        "TaskOutput",
        "EnterWorktree",
        "ExitWorktree",
        "TeamCreate",
        "TeamDelete",
        "StructuredOutput",
    }
)


def _config_maker(
    agents: Callable[[], AgentService],
    service: Callable[[], TeamService],
    *,
    cwd: Path,
    base_prompt: Callable[[], str],
    tools: Callable[[], Sequence[Tool[Any]]],
) -> ConfigMaker:
    """How a teammate's engine is configured, in the lead's process or its own.

    As a subagent of its type is (the builder's tools, prompt, model, mode, MCP servers, hooks
    and memory), plus the team's tools: of the lead's tools it gets what its definition allows,
    less :data:`TEAMMATE_DENIED`, with its own messaging and task list tools (and Agent, if its
    type may spawn). A built-in ``general-purpose`` teammate keeps the main thread's prompt (a
    subagent's says nobody reads it but its caller); every type ends with the team's section.
    """

    def make_config(
        name: str,
        team: str,
        model: str | None,
        mode: str | None,
        *,
        agent_type: str = DEFAULT_TYPE,
        where: Path | None = None,
        confined: bool = False,
        extra_tools: Sequence[Tool[Any]] = (),
    ) -> EngineConfig:
        builder = agents().builder
        definition = teammate_definition(agents(), agent_type)
        member, here = f"{name}@{team}", where or cwd
        # Plan is the strictest mode: asked for, or its definition's, it is the mode it runs in.
        section = teammate_section(name, team, plan="plan" in (mode, definition.permission_mode))
        config = builder.config(
            member, definition, description=member, cwd=here, is_async=False, model=model,
            mode=mode, confine_to=here if confined else None, extra_tools=extra_tools,
            suffix=section,
        )  # fmt: skip
        permissions = config.permissions
        if permissions is not None:
            # Its own policy object (same rules, mode and directories): a plan approved for
            # it, or a mode the lead switches to, must not change the other's.
            permissions = permissions.with_mode(str(permissions.mode))
        prompt = config.system_prompt
        if definition.source == "built-in" and definition.agent_type == DEFAULT_TYPE:
            prompt = f"{_moved(base_prompt(), cwd, here)}\n\n{section}"
        # Its own messaging, Agent (no teams in it) and task list tools come first: they
        # replace the lead's of the same names (the API refuses duplicate names).
        # Its Agent tool starts only the types its definition names (``Agent(a, b)``,
        # ``allowedAgentTypes``), as a subagent's of the type does.
        own = restrict_spawns(
            [
                t
                for t in teammate_tools(agents(), service())
                if t.name != "Agent" or by_definition([t], **_lists(definition))
            ],
            definition.allowed_agent_types,
        )
        mine = {t.name for t in own}
        session = tools()
        allowed = by_definition(session, **_lists(definition))
        allowed += own_tools(definition, extra_tools, {t.name for t in session})
        offered = [*own, *(t for t in allowed if t.name not in TEAMMATE_DENIED | mine)]
        if definition.read_only:  # its agents would run under the session's policy
            offered = read_only_offer([t for t in offered if t.name not in SPAWNING])
        return dataclasses.replace(
            config,
            permissions=permissions,
            system_prompt=prompt,
            tools=offered,
            wait_for_tasks=False,  # it goes idle; its tasks' notifications wake it
            metadata={**config.metadata, "agent_type": "teammate", "teammate": member},
            # Counted under the session (its budget, and its agents' under it).
            meter=agents().spawner.budgets.reopen(member, agents().runtime.session_id),
        )

    return make_config


def teammate_definition(agents: AgentService, agent_type: str) -> AgentDefinition:
    """The definition a teammate of ``agent_type`` is built from.

    Raises:
        ToolError: No such agent type (the message lists the known ones).
    """
    if agent_type == DEFAULT_TYPE and agents.builder.catalog.get(DEFAULT_TYPE) is None:
        from taskloom.agents.builtins import builtin

        return builtin(DEFAULT_TYPE)  # a coordinator's catalog: the built-in all the same
    return agents.builder.definition(agent_type)


def _lists(definition: AgentDefinition) -> dict[str, Any]:
    return {"allowed": definition.tools, "disallowed": definition.disallowed_tools}


def _moved(prompt: str, lead_cwd: Path, cwd: Path) -> str:
    """The main thread's prompt, its environment naming ``cwd`` (a worktree) as it works there."""
    if cwd == lead_cwd:
        return prompt
    return prompt.replace(f"Working directory: {lead_cwd}\n", f"Working directory: {cwd}\n", 1)


def _placer(agents: Callable[[], AgentService]) -> Placer:
    """Sets up a new teammate's environment with the session's agent environments."""

    async def placer(
        key: str, agent_type: str, *, cwd: Path, isolation: str | None, servers: bool
    ) -> Placement:
        service = agents()
        definition = teammate_definition(service, agent_type)
        return await place(
            service.spawner.environments, definition, key, cwd=cwd, isolation=isolation,
            servers=servers,
        )  # fmt: skip

    return placer


def team_service(
    runtime: TaskRuntime,
    agents: Callable[[], AgentService],
    *,
    cwd: Path,
    base_prompt: Callable[[], str],
    tools: Callable[[], Sequence[Tool[Any]]],
    panes: PaneExecutor | None = None,
) -> TeamService:
    """The lead session's team service.

    Args:
        runtime: The session's runtime.
        agents: The session's agent service (asked when a teammate is spawned: it is built
            after this).
        cwd: Where teammates work.
        base_prompt: The main thread's system prompt, which a teammate's starts from.
        tools: The lead's tools, as offered to it (``--tools`` and the rules that hide tools
            applied); a teammate gets those less :data:`TEAMMATE_DENIED`, with its own
            messaging, Agent and task list tools.
        panes: The tmux backend, when ``teammateMode`` chose it: new teammates start there.
    """
    service: TeamService
    make_config = _config_maker(
        agents, lambda: service, cwd=cwd, base_prompt=base_prompt, tools=tools
    )

    def lead_mode() -> str:
        policy = agents().builder.policy
        return str(policy.mode) if policy is not None else "default"

    service = TeamService(
        runtime,
        Roster(runtime.store, runtime.session_id),
        Executors(InProcessExecutor(runtime), panes, spawn_in=panes),
        make_config,
        lead_mode=lead_mode,
        placer=_placer(agents),
    )
    return service


def member_service(
    runtime: TaskRuntime,
    join: JoinSpec,
    agents: Callable[[], AgentService],
    *,
    base_prompt: Callable[[], str],
    tools: Callable[[], Sequence[Tool[Any]]],
) -> tuple[TeamService, TeammateProcess]:
    """A teammate's own process: its team service, and what runs the teammate in it.

    Args:
        runtime: The process's runtime (its own session).
        join: Who the teammate is and whose team (see :class:`~taskloom.teams.join.JoinSpec`).
        agents: The process's agent service (built after this).
        base_prompt: The system prompt a teammate's starts from.
        tools: The tools the process offers (a teammate gets those less the denied).
    """
    from pathlib import Path

    from taskloom.teams.member import TeammateProcess, team_mailbox

    mailbox = team_mailbox(runtime.store, join, runtime.home)
    service: TeamService
    make_config = _config_maker(
        agents, lambda: service, cwd=Path(join.cwd), base_prompt=base_prompt, tools=tools
    )
    local = InProcessExecutor(runtime, mailbox, join.session)
    service = TeamService(
        runtime,
        Roster(runtime.store, join.session),
        Executors(local, relay=True),
        make_config,
        lambda: join.mode or "default",
        mailbox=mailbox,
        leads=False,
    )

    async def spec() -> TeammateSpec:  # once the process's agent service is built
        # Its own MCP servers run here, in its directory; its lead made its worktree (none
        # is made here, whatever its type says).
        definition = teammate_definition(agents(), join.agent_type)
        placement = await place(
            agents().spawner.environments, dataclasses.replace(definition, isolation=None),
            join.task_id, cwd=Path(join.cwd), isolation=None, servers=True,
        )  # fmt: skip
        service.hold(placement)
        config = make_config(
            join.name, join.team, None, join.mode, agent_type=join.agent_type,
            confined=join.confined, extra_tools=placement.tools(),
        )  # fmt: skip
        return TeammateSpec(
            name=join.name,
            team=join.team,
            color=join.color,
            prompt=join.prompt,
            config=config,
            model=join.model,
            mode=join.mode,
            agent_type=join.agent_type,
        )

    return service, TeammateProcess(service, join, spec)


#: The session options a teammate's process inherits from its lead's (by field name).
_INHERITED = (
    "allowed_tools", "disallowed_tools", "skip_permissions", "settings", "skip_broken_settings",
    "setting_sources", "builtin_tools", "add_dirs", "mcp_config", "strict_mcp_config", "agents",
    "plugin_dirs",
    "append_system_prompt", "fallback_model", "max_output_tokens",
)  # fmt: skip
#: Inherited paths relative to the lead's directory (a teammate may work in another).
_PATHS_FROM_CWD = ("plugin_dirs", "add_dirs")
#: The lead's options that live in its process (Python objects, an SDK's callbacks): a
#: teammate in a process of its own goes without them, and the lead is told so once.
_NOT_CARRIED = {
    "tools": "its tools given in code",
    "hooks": "its hooks given in code (an SDK's hook callbacks among them)",
}


def session_team(
    runtime: TaskRuntime,
    options: Options,
    settings: Mapping[str, Any],
    agents: Callable[[], AgentService],
    *,
    cwd: Path,
    base_prompt: Callable[[], str],
    tools: Callable[[], Sequence[Tool[Any]]],
) -> tuple[TeamService | None, TeammateProcess | None]:
    """The session's team: the one it leads, or (``options.join_team``) the one it serves in.

    Returns:
        The team service (None: teams are off), and what runs the teammate when this
        process is a teammate's own.

    Raises:
        UsageError: A bad ``teammateMode``, or tmux asked for where it cannot run.
    """
    from taskloom.teams.mode import pane_server, teammate_mode, teams_enabled

    if options.join_team is not None:
        from taskloom.teams.join import JoinSpec

        join = JoinSpec.read(Path(options.join_team))
        return member_service(runtime, join, agents, base_prompt=base_prompt, tools=tools)
    if not teams_enabled(options.teams, settings):
        return None, None
    server = pane_server(teammate_mode(options.teammate_mode, settings))
    panes = None
    if server is not None:
        from taskloom.teams.pane_executor import PaneExecutor

        panes = PaneExecutor(
            runtime,
            server,
            _launcher(runtime, options, cwd, agents),
            prompter=options.prompter,
            keep_crashed=settings.get("teammateCrashedPane") != "close",
            # What its process spends counts for the session's budget, as an in-process one's.
            meter_for=lambda member: agents().spawner.budgets.reopen(member, runtime.session_id),
        )
    service = team_service(
        runtime, agents, cwd=cwd, base_prompt=base_prompt, tools=tools, panes=panes
    )
    return service, None


def inherited_options(options: Options, cwd: Path) -> dict[str, Any]:
    """The lead's options a teammate's process is started with, as JSON values.

    Paths relative to the lead's directory ``cwd`` are made absolute: a teammate working in a
    worktree would read them from its own directory.
    """
    inherited: dict[str, Any] = {}
    for name in _INHERITED:
        value = getattr(options, name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, (list, tuple)):
            value = [str(v) for v in value]
        if name in _PATHS_FROM_CWD and value:
            value = [str(cwd / Path(v).expanduser()) for v in value]
        inherited[name] = value
    return inherited


def _launcher(
    runtime: TaskRuntime, options: Options, cwd: Path, agents: Callable[[], AgentService]
) -> Launcher:
    """Makes the spec a teammate's process starts from, out of the lead's options."""
    import os

    from taskloom.process.identity import process_start_time
    from taskloom.tasks.ids import new_uuid
    from taskloom.teams.join import JoinSpec
    from taskloom.teams.panes import PaneError

    inherited = inherited_options(options, cwd)
    me = os.getpid()
    lead_start = process_start_time(me) or 0.0
    missing = [what for name, what in _NOT_CARRIED.items() if getattr(options, name)]
    told: list[bool] = []

    def launch(spec: TeammateSpec, task_id: str, pane_id: str) -> JoinSpec:
        model = spec.model or (options.model if isinstance(options.model, str) else None)
        if model is None and options.model is not None:
            raise PaneError(
                "teammateMode tmux: the lead's model is a Python object, which a teammate's "
                "process cannot share; give the lead (or the teammate) a model by name"
            )
        if missing and not told:
            told.append(True)
            import logging

            logging.getLogger(__name__).warning(
                "teammates in tmux panes run in processes of their own, without the lead's %s",
                ", ".join(missing),
            )
        policy = agents().builder.policy
        return JoinSpec(
            session=runtime.session_id,
            team=spec.team,
            name=spec.name,
            task_id=task_id,
            prompt=spec.prompt,
            color=spec.color,
            pane_id=pane_id,
            lead_pid=me,
            lead_start=lead_start,
            home=str(runtime.home),
            # Its own worktree's, if it has one (made by the lead, which finishes it).
            cwd=str(spec.config.cwd),
            agent_type=spec.agent_type,
            confined=spec.config.confine_to is not None,
            model=model,
            # Its own mode, else the lead's as it is now (teammates inherit it).
            mode=spec.mode or (str(policy.mode) if policy is not None else None),
            lead_prompts=options.prompter is not None,
            options=inherited,
            process_session=new_uuid(),
            keep_transcript=runtime.keep_transcripts,
        )

    return launch


def teammate_tools(agents: AgentService, team: TeamService) -> list[Tool[Any]]:
    """What only a member has: messaging, subagents without teams, the task list."""
    from taskloom.agents.agent_tool import AgentTool
    from taskloom.agents.send_message import SendMessageTool

    return [
        SendMessageTool(agents),
        AgentTool(agents, in_process_teammate=True),
        *task_tools(team.board),
    ]


def lead_tools(team: TeamService) -> list[Tool[Any]]:
    """The lead's team tools: TeamCreate, TeamDelete and the task list."""
    return [
        TeamCreateTool(team.roster, team.is_lead),
        TeamDeleteTool(team.roster, team.is_lead),
        *task_tools(team.board),
    ]
