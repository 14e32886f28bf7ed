"""Agent teams: a lead session and long-lived teammates sharing a task list.

The durable state (teams, members, task lists) is in the store; :class:`Roster` is a lead
session's view of its team, ``task_tools`` and ``team_tools`` are what the models call.
"""

from taskloom.teams.model import LEAD_NAME, Member, Team, TeamError, lead_agent_id
from taskloom.teams.roster import PALETTE, Roster

__all__ = ["LEAD_NAME", "PALETTE", "Member", "Roster", "Team", "TeamError", "lead_agent_id"]
