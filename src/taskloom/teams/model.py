"""Teams and their members as the runtime and tools see them, and their JSON form.

The JSON form has the field names of Claude Code's team config (``config.json``), so that
scripts written for one read the other; times there are epoch milliseconds.
"""

from __future__ import annotations

from typing import Any

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.store import MemberRow, TeamRow

#: The lead's name in every team.
LEAD_NAME = "team-lead"


class TeamError(TaskloomError):
    """A team operation the rules refuse; the message is meant for the model or the user."""


def lead_agent_id(team: str) -> str:
    """The agent id of ``team``'s lead."""
    return f"{LEAD_NAME}@{team}"


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass(frozen=True, slots=True)
class Member:
    """One member of a team (the lead too); the fields are :class:`MemberRow`'s."""

    team: str
    name: str
    agent_id: str
    agent_type: str
    model: str | None
    prompt: str
    color: str | None
    plan_mode_required: bool
    joined_at: float
    tmux_pane_id: str
    cwd: str
    worktree_path: str | None
    backend_type: str
    is_active: bool
    mode: str | None

    @classmethod
    def from_row(cls, row: MemberRow) -> Member:
        """The member a store row holds."""
        return cls(
            row.team, row.name, row.agent_id, row.agent_type, row.model, row.prompt, row.color,
            row.plan_mode_required, row.joined_at, row.tmux_pane_id, row.cwd, row.worktree_path,
            row.backend_type, row.is_active, row.mode,
        )  # fmt: skip

    @property
    def is_lead(self) -> bool:
        """Whether this is the team's lead."""
        return self.name == LEAD_NAME

    def to_json(self) -> dict[str, Any]:
        """The member as Claude Code's team config writes it (``joinedAt`` in epoch ms)."""
        return {
            "agentId": self.agent_id,
            "name": self.name,
            "agentType": self.agent_type,
            "model": self.model,
            "prompt": self.prompt,
            "color": self.color,
            "planModeRequired": self.plan_mode_required,
            "joinedAt": _ms(self.joined_at),
            "tmuxPaneId": self.tmux_pane_id,
            "cwd": self.cwd,
            "worktreePath": self.worktree_path,
            "backendType": self.backend_type,
            "isActive": self.is_active,
            "mode": self.mode,
        }


@dataclass(frozen=True, slots=True)
class Team:
    """A team and its members, in the order they joined (the lead first).

    Attributes:
        name: Unique in the store.
        description: What the team is for.
        created_at: Epoch seconds.
        lead_agent_id: ``team-lead@<name>``.
        lead_session_id: The session that leads it.
        members: Everyone in it, the lead included.
    """

    name: str
    description: str
    created_at: float
    lead_agent_id: str
    lead_session_id: str
    members: tuple[Member, ...]

    @classmethod
    def from_rows(cls, row: TeamRow, members: list[MemberRow]) -> Team:
        """The team the store's rows hold."""
        return cls(
            row.name,
            row.description,
            row.created_at,
            row.lead_agent_id,
            row.lead_session_id,
            tuple(Member.from_row(m) for m in members),
        )

    def member(self, name: str) -> Member | None:
        """The member called ``name``, or None."""
        return next((m for m in self.members if m.name == name), None)

    def to_json(self) -> dict[str, Any]:
        """The team as Claude Code's team config writes it (``createdAt`` in epoch ms)."""
        return {
            "name": self.name,
            "description": self.description,
            "createdAt": _ms(self.created_at),
            "leadAgentId": self.lead_agent_id,
            "leadSessionId": self.lead_session_id,
            "members": [m.to_json() for m in self.members],
        }
