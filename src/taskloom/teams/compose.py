"""Putting a session's team together: the service, the lead's team tools, a teammate's engine.

Called by :class:`taskloom.Harness` when teams are on; kept here so that the composition root
stays one screen per concern.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom.teams.executor import InProcessExecutor
from taskloom.teams.prompts import teammate_section
from taskloom.teams.roster import Roster
from taskloom.teams.service import TeamService
from taskloom.teams.task_tools import task_tools
from taskloom.teams.team_tools import TeamCreateTool, TeamDeleteTool

if TYPE_CHECKING:
    from taskloom.agents.service import AgentService
    from taskloom.engine import EngineConfig
    from taskloom.tasks.runtime import TaskRuntime
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


def team_service(
    runtime: TaskRuntime,
    agents: Callable[[], AgentService],
    *,
    cwd: Path,
    base_prompt: Callable[[], str],
    tools: Callable[[], Sequence[Tool[Any]]],
) -> TeamService:
    """The session's team service.

    Args:
        runtime: The session's runtime.
        agents: The session's agent service (asked when a teammate is spawned: it is built
            after this).
        cwd: Where teammates work.
        base_prompt: The main thread's system prompt, which a teammate's starts from.
        tools: The lead's tools, as offered to it (``--tools`` and the rules that hide tools
            applied); a teammate gets those less :data:`TEAMMATE_DENIED`, with its own
            messaging, Agent and task list tools.
    """
    service: TeamService

    def make_config(name: str, team: str, model: str | None, mode: str | None) -> EngineConfig:
        builder = agents().builder
        definition = builder.catalog.get("general-purpose")
        if definition is None:  # a coordinator's catalog: the built-in all the same
            from taskloom.agents.builtins import builtin

            definition = builtin("general-purpose")
        member = f"{name}@{team}"
        config = builder.config(
            member, definition, description=member, cwd=cwd, is_async=False, model=model,
            mode=mode,
        )  # fmt: skip
        # Its own messaging, Agent (no teams in it) and task list tools come first: they
        # replace the lead's of the same names (the API refuses duplicate names).
        own = teammate_tools(agents(), service)
        mine = {t.name for t in own}
        offered = [*own, *(t for t in tools() if t.name not in TEAMMATE_DENIED | mine)]
        permissions = config.permissions
        if permissions is not None and permissions is builder.policy:
            # Its own policy object (same rules and mode): a plan approved for it, or a mode
            # the lead switches to, must not change the other's.
            permissions = permissions.with_mode(str(permissions.mode))
        return dataclasses.replace(
            config,
            permissions=permissions,
            system_prompt=f"{base_prompt()}\n\n{teammate_section(name, team, plan=mode == 'plan')}",
            tools=offered,
            wait_for_tasks=False,  # it goes idle; its tasks' notifications wake it
            metadata={**config.metadata, "agent_type": "teammate", "teammate": member},
        )

    def lead_mode() -> str:
        policy = agents().builder.policy
        return str(policy.mode) if policy is not None else "default"

    service = TeamService(
        runtime,
        Roster(runtime.store, runtime.session_id),
        InProcessExecutor(runtime),
        make_config,
        lead_mode=lead_mode,
    )
    return service


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
