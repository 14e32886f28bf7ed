"""The roster: the team a lead session leads, and who is in it, kept in the store.

One team per lead: a session creates at most one team and must delete it before creating
another. Teammates join with a name unique in the team; the lead is the member ``team-lead``.
Names, like those of teams, are 1-64 letters, digits, ``-`` or ``_`` (they become agent ids
``name@team`` and file names).
"""

from __future__ import annotations

import dataclasses
import re

from taskloom.clock import SYSTEM_CLOCK, Clock
from taskloom.store import MemberRow, Store, TeamRow, TeamTables
from taskloom.teams.model import LEAD_NAME, Member, Team, TeamError, lead_agent_id

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_NAME_RULE = 'use 1-64 letters, digits, "-" or "_", starting with a letter or digit'
#: Teammates' colours, assigned in the order they join, cycling.
PALETTE = ("blue", "green", "yellow", "purple", "orange", "pink", "cyan", "red")


def check_name(kind: str, name: str) -> None:
    """Refuse a team or member name that breaks the naming rule.

    Raises:
        TeamError: Naming ``kind`` (``Team name``, ``Teammate name``) and the rule.
    """
    if not _NAME.match(name):
        raise TeamError(f'{kind} "{name}" is invalid: {_NAME_RULE}.')


#: What a member that joins again under its old name takes over of its row.
_REJOIN_FIELDS = (
    "agent_type", "model", "prompt", "plan_mode_required", "joined_at", "cwd", "mode",
    "backend_type", "is_active", "worktree_path",
)  # fmt: skip


class Roster:
    """The teams of one lead session (see the module docstring)."""

    def __init__(self, store: Store, session_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        """Keep the teams that ``session_id`` leads in ``store``."""
        self.tables = TeamTables(store)
        self.session_id = session_id
        self._clock = clock

    def create(
        self, team_name: str | None, description: str, *, cwd: str = "", model: str | None = None
    ) -> Team:
        """Create this session's team, with the session as its lead, durably, now.

        Args:
            team_name: Its name; None or '' for ``session-<first 8 characters of the id>``.
            description: What the team is for.
            cwd: The lead's working directory.
            model: The lead's model (None: the default).

        Raises:
            TeamError: This session leads a team already; the name breaks the rule; another
                lead's team has the name.
            StoreError: The store could not be written.
        """
        current = self.tables.team_of_lead(self.session_id)
        if current is not None:
            raise TeamError(
                f'Already leading team "{current.name}". A leader can only manage one team at '
                "a time. Use TeamDelete to end the current team before creating a new one."
            )
        name = team_name or f"session-{self.session_id[:8]}"
        check_name("Team name", name)
        now = self._clock.time()
        row = TeamRow(name, description, now, lead_agent_id(name), self.session_id)
        lead = MemberRow(
            team=name, name=LEAD_NAME, agent_id=row.lead_agent_id, agent_type=LEAD_NAME,
            model=model, prompt="", color=None, plan_mode_required=False, joined_at=now,
            tmux_pane_id="", cwd=cwd, worktree_path=None, backend_type="in-process",
            is_active=True, mode=None,
        )  # fmt: skip
        if not self.tables.create_team(row, [lead]):
            raise TeamError(
                f'Team "{name}" already exists (led by another session). Choose another name.'
            )
        return Team.from_rows(row, [lead])

    def team(self) -> Team | None:
        """The team this session leads, or None."""
        row = self.tables.team_of_lead(self.session_id)
        return None if row is None else Team.from_rows(row, self.tables.members(row.name))

    def get(self, team: str) -> Team | None:
        """Any team in the store by name (another lead's too), or None."""
        row = self.tables.get_team(team)
        return None if row is None else Team.from_rows(row, self.tables.members(team))

    def join(
        self,
        team: str,
        name: str,
        *,
        agent_type: str,
        model: str | None,
        prompt: str,
        plan_mode_required: bool,
        cwd: str,
        mode: str | None,
        backend_type: str = "in-process",
        worktree_path: str | None = None,
    ) -> Member:
        """Add a teammate to ``team``, active, with the next colour of :data:`PALETTE`.

        ``worktree_path`` is its own worktree, when it has one (``cwd`` is then in it).

        Raises:
            TeamError: No such team; the name breaks the rule, is the lead's, or is taken.
            StoreError: The store could not be written.
        """
        if self.tables.get_team(team) is None:
            raise TeamError(f'Team "{team}" does not exist.')
        check_name("Teammate name", name)
        if name == LEAD_NAME:
            raise TeamError(f'"{LEAD_NAME}" is the lead\'s name. Choose another name.')
        # Colours are cosmetic: two teammates joining at the same instant may share one.
        joined = sum(1 for m in self.tables.members(team) if m.name != LEAD_NAME)
        row = MemberRow(
            team=team, name=name, agent_id=f"{name}@{team}", agent_type=agent_type, model=model,
            prompt=prompt, color=PALETTE[joined % len(PALETTE)],
            plan_mode_required=plan_mode_required, joined_at=self._clock.time(),
            tmux_pane_id="", cwd=cwd, worktree_path=worktree_path, backend_type=backend_type,
            is_active=True, mode=mode,
        )  # fmt: skip
        if not self.tables.add_member(row):
            existing = self.tables.member(team, name)
            if existing is None or existing.is_active:
                raise TeamError(
                    f'Teammate name "{name}" is taken in team "{team}". Choose another name.'
                )
            # A member that ended (shut down, or gone with an earlier process) may come back
            # under its name: its row is taken over, its colour kept.
            row = dataclasses.replace(row, color=existing.color)
            fields = {f: getattr(row, f) for f in _REJOIN_FIELDS}
            if not self.tables.set_member(team, name, **fields):
                raise TeamError(f'Team "{team}" has no member "{name}".')
        return Member.from_row(row)

    def set_active(self, team: str, name: str, active: bool) -> None:
        """Record whether a member is running now.

        Raises:
            TeamError: No such member.
            StoreError: The store could not be written.
        """
        if not self.tables.set_member(team, name, is_active=active):
            raise TeamError(f'Team "{team}" has no member "{name}".')

    def delete(self, team: str) -> None:
        """Delete a team this session leads, and its members; its task list stays.

        Raises:
            TeamError: No such team; another session leads it; a teammate is still active.
            StoreError: The store could not be written.
        """
        row = self.tables.get_team(team)
        if row is None:
            raise TeamError(f'Team "{team}" does not exist.')
        if row.lead_session_id != self.session_id:
            raise TeamError(f'Cannot delete team "{team}": another session leads it.')
        # Checked and deleted in one transaction: a teammate activated meanwhile keeps it.
        active = self.tables.delete_team(team, refuse_active=True)
        if active:
            raise TeamError(
                f'Cannot delete team "{team}": {len(active)} member(s) still active '
                f"({', '.join(active)}). Shut them down first."
            )

    def resolve(self, address: str) -> Member | None:
        """The member ``name`` of this session's team, or ``name@team`` of any team."""
        name, _, team = address.partition("@")
        if not team:
            mine = self.tables.team_of_lead(self.session_id)
            if mine is None:
                return None
            team = mine.name
        row = self.tables.member(team, name)
        return None if row is None else Member.from_row(row)
