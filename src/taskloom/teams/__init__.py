"""Agent teams: a lead session and long-lived teammates sharing a task list.

The durable state (teams, members, task lists) is in the store; :class:`Roster` is a lead
session's view of its team, ``task_tools`` and ``team_tools`` are what the models call.

The names below are imported when first asked for: every session asks whether teams are on
(:mod:`taskloom.teams.mode`), and most never load a team.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskloom.teams.model import LEAD_NAME, Member, Team, TeamError, lead_agent_id
    from taskloom.teams.roster import PALETTE, Roster

__all__ = ["LEAD_NAME", "PALETTE", "Member", "Roster", "Team", "TeamError", "lead_agent_id"]

_LAZY = {
    "LEAD_NAME": "model",
    "Member": "model",
    "Team": "model",
    "TeamError": "model",
    "lead_agent_id": "model",
    "PALETTE": "roster",
    "Roster": "roster",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
