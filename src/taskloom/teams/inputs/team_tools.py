"""Input models of :mod:`taskloom.teams.team_tools` (imported on first use)."""

from __future__ import annotations

from pydantic import Field

from taskloom.tools.inputs import ToolInput

TEAM_NAME_DESCRIPTION = (
    'The team\'s name: 1-64 letters, digits, "-" or "_". Teammates are addressed as name@team.'
)


class TeamCreateInput(ToolInput):
    """Input of :class:`TeamCreateTool`."""

    team_name: str = Field(description=TEAM_NAME_DESCRIPTION)
    description: str | None = Field(default=None, description="What the team is for.")


class TeamDeleteInput(ToolInput):
    """Input of :class:`TeamDeleteTool`."""
