"""Agent teams: a lead session and long-lived teammates sharing a task list.

The durable state (teams, members, task lists) is in the store; :class:`Roster` is a lead
session's view of its team, ``task_tools`` and ``team_tools`` are what the models call.

The names below are imported when first asked for: every session asks whether teams are on
(:mod:`taskloom.teams.mode`), and most never load a team.
"""

from typing import TYPE_CHECKING

from taskloom._lazy import lazy_exports

if TYPE_CHECKING:
    from taskloom.teams.model import LEAD_NAME, Member, Team, TeamError, lead_agent_id
    from taskloom.teams.roster import PALETTE, Roster

__all__ = ["LEAD_NAME", "PALETTE", "Member", "Roster", "Team", "TeamError", "lead_agent_id"]

__getattr__ = lazy_exports(
    __name__,
    {
        "LEAD_NAME": "model",
        "Member": "model",
        "Team": "model",
        "TeamError": "model",
        "lead_agent_id": "model",
        "PALETTE": "roster",
        "Roster": "roster",
    },
)
