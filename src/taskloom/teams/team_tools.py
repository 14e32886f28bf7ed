"""TeamCreate and TeamDelete: the lead starts and ends its team.

Only the lead calls them: a teammate is told so. A lead has at most one team at a time;
deleting it is refused while a teammate is still active, and keeps the team's task list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from taskloom.errors import StoreError
from taskloom.signals import emit
from taskloom.teams.model import TeamError
from taskloom.teams.roster import Roster
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.teams.inputs.team_tools import (
        TeamCreateInput,
        TeamDeleteInput,
    )

ONLY_LEAD = "Only the team lead can create or delete a team."
NO_TEAM = "No team to delete."


#: :class:`TeamCreateInput`'s closed schema written out (``Tool.static_schema``).
INPUT_SCHEMA_CREATE: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TeamCreateTool`.",
    "properties": {
        "team_name": {
            "description": 'The team\'s name: 1-64 letters, digits, "-" or "_". Teammates are '
            "addressed as name@team.",
            "type": "string",
        },
        "description": {"type": "string", "description": "What the team is for."},
    },
    "required": ["team_name"],
    "type": "object",
}


class TeamCreateTool(Tool["TeamCreateInput"]):
    """Create the caller's team, with the caller as its lead."""

    name = "TeamCreate"
    description = (
        "Create a team that you lead, with a shared task list. Then spawn teammates with "
        "Agent and a name: they join this team, work through the task list (TaskCreate, "
        "TaskList, TaskUpdate) and message each other with SendMessage. You can lead one "
        "team at a time; end it with TeamDelete once every teammate has shut down."
    )
    input_model = "taskloom.teams.inputs.team_tools:TeamCreateInput"
    static_schema = (input_model, INPUT_SCHEMA_CREATE)

    def __init__(self, roster: Roster, is_lead: Callable[[ToolContext], bool]) -> None:
        """Create teams in ``roster``; ``is_lead`` tells whether the caller is the lead."""
        self.roster = roster
        self.is_lead = is_lead

    async def call(self, params: TeamCreateInput, ctx: ToolContext) -> ToolResult:
        """Create the team, or say why not."""
        if not self.is_lead(ctx):
            return tool_error(ONLY_LEAD)
        try:
            team = self.roster.create(
                params.team_name.strip() or None, params.description or "", cwd=str(ctx.cwd)
            )
        except (TeamError, StoreError) as exc:
            return tool_error(str(exc))
        emit(
            "team_created",
            session_id=ctx.runtime.session_id,
            team_name=team.name,
            teammate_count=0,
            lead_agent_type="main",
        )
        return ToolResult(
            f'Team "{team.name}" created. You are its lead ({team.lead_agent_id}). Spawn '
            "teammates with Agent and a name; they join this team.",
            data={
                "team_name": team.name,
                "team_file_path": None,
                "lead_agent_id": team.lead_agent_id,
            },
        )


#: :class:`TeamDeleteInput`'s closed schema written out (``Tool.static_schema``).
INPUT_SCHEMA_DELETE: dict[str, Any] = {
    "additionalProperties": False,
    "description": "Input of :class:`TeamDeleteTool`.",
    "properties": {},
    "type": "object",
}


class TeamDeleteTool(Tool["TeamDeleteInput"]):
    """Delete the caller's team (its task list stays)."""

    name = "TeamDelete"
    description = (
        "Delete the team you lead and its member list, once every teammate has shut down "
        "(ask them with SendMessage and a shutdown_request). The task list is kept."
    )
    input_model = "taskloom.teams.inputs.team_tools:TeamDeleteInput"
    static_schema = (input_model, INPUT_SCHEMA_DELETE)

    def __init__(self, roster: Roster, is_lead: Callable[[ToolContext], bool]) -> None:
        """Delete teams from ``roster``; ``is_lead`` tells whether the caller is the lead."""
        self.roster = roster
        self.is_lead = is_lead

    async def call(self, params: TeamDeleteInput, ctx: ToolContext) -> ToolResult:
        """Delete the team, or say why not."""
        if not self.is_lead(ctx):
            return tool_error(ONLY_LEAD)
        try:
            team = self.roster.team()
            if team is None:
                return ToolResult(NO_TEAM, data={"success": False, "team_name": None})
            self.roster.delete(team.name)
        except (TeamError, StoreError) as exc:
            return tool_error(str(exc))
        emit("team_deleted", session_id=ctx.runtime.session_id, team_name=team.name)
        return ToolResult(
            f'Team "{team.name}" deleted.', data={"success": True, "team_name": team.name}
        )
