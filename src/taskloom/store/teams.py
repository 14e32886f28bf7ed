"""Agent teams in the store: teams, their members, and each team's task list.

Every write that must know its outcome (a name taken, the next task id, a claim) runs in one
immediate transaction, so two sessions or processes sharing the database never both win.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import astuple, replace
from dataclasses import fields as dataclass_fields
from typing import Any

from taskloom._dataclass import dataclass
from taskloom.errors import TaskloomError
from taskloom.store.db import Store

#: The statuses a team task can be set to (``deleted`` removes it).
TASK_STATUSES = ("pending", "in_progress", "completed", "deleted")
#: A task's fields that an update can change, in the order changes are reported.
_TASK_FIELDS = (
    "subject", "description", "active_form", "status", "owner", "metadata", "blocks",
    "blocked_by",
)  # fmt: skip


class TeamTaskError(TaskloomError):
    """A team task change that the rules refuse (blocked, owned by another, unknown id)."""


@dataclass(frozen=True, slots=True)
class TeamRow:
    """One team as stored.

    Attributes:
        name: The team's unique name.
        description: What the team is for.
        created_at: Epoch seconds.
        lead_agent_id: The lead's agent id (``team-lead@<name>``).
        lead_session_id: The session that leads it.
    """

    name: str
    description: str
    created_at: float
    lead_agent_id: str
    lead_session_id: str


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One member of a team as stored (the lead is a member too).

    ``agent_id`` is ``<name>@<team>``; ``model``, ``color`` and ``mode`` are None for the
    defaults; ``tmux_pane_id`` is '' without a pane; ``worktree_path`` is None when the member
    works in ``cwd``; ``backend_type`` says how it runs (``in-process``, ``tmux``...);
    ``joined_at`` is in epoch seconds; ``is_active``: running now.
    """

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


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task of a team's task list as stored.

    ``id`` numbers it in its team's list (1, 2, ...); ``active_form`` is the text shown while
    it runs (None: none); ``owner`` a member's name (None: unowned); ``blocks`` the tasks
    that cannot start before it is completed, ``blocked_by`` those it waits for; times are
    epoch seconds.
    """

    team: str
    id: int
    subject: str
    description: str
    active_form: str | None
    status: str
    owner: str | None
    blocks: tuple[int, ...]
    blocked_by: tuple[int, ...]
    metadata: dict[str, Any]
    created_at: float
    updated_at: float


#: Member fields :meth:`TeamTables.set_member` may change (not its identity).
MEMBER_FIELDS = frozenset(f.name for f in dataclass_fields(MemberRow)) - {
    "team",
    "name",
    "agent_id",
}


def _rows(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    cur = conn.execute(sql, params)
    cur.row_factory = sqlite3.Row
    return cur.fetchall()


def _member(r: sqlite3.Row) -> MemberRow:
    data = dict(r)
    data["plan_mode_required"] = bool(data["plan_mode_required"])
    data["is_active"] = bool(data["is_active"])
    return MemberRow(**data)


def _task(r: sqlite3.Row) -> TaskRow:
    data = dict(r)
    data["blocks"] = tuple(json.loads(data["blocks"]))
    data["blocked_by"] = tuple(json.loads(data["blocked_by"]))
    data["metadata"] = json.loads(data["metadata"])
    return TaskRow(**data)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


_INSERT_MEMBER = (
    "INSERT INTO team_members(team, name, agent_id, agent_type, model, prompt, color, "
    "plan_mode_required, joined_at, tmux_pane_id, cwd, worktree_path, backend_type, is_active, "
    "mode) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(team, name) DO NOTHING"
)


def _member_params(row: MemberRow) -> tuple[Any, ...]:
    # The fields are in the INSERT's column order; sqlite3 binds a bool as 0 or 1.
    return astuple(row)


def _write_task(conn: sqlite3.Connection, row: TaskRow) -> None:
    conn.execute(
        "UPDATE team_tasks SET subject = ?, description = ?, active_form = ?, status = ?, "
        "owner = ?, blocks = ?, blocked_by = ?, metadata = ?, updated_at = ? "
        "WHERE team = ? AND id = ?",
        (
            row.subject,
            row.description,
            row.active_form,
            row.status,
            row.owner,
            _dumps(list(row.blocks)),
            _dumps(list(row.blocked_by)),
            _dumps(row.metadata),
            row.updated_at,
            row.team,
            row.id,
        ),
    )


def _ids(ids: Iterable[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


class TeamTables:
    """The team tables of one :class:`Store` (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        """Read and write teams in ``store``."""
        self.store = store

    # -- teams --------------------------------------------------------------------------------

    def create_team(self, row: TeamRow, members: Sequence[MemberRow] = ()) -> bool:
        """Create a team, with its first ``members``, in one transaction.

        Returns:
            False (nothing written) when a team of that name exists.

        Raises:
            StoreError: The store could not be written.
        """

        def op(conn: sqlite3.Connection) -> bool:
            done = conn.execute(
                "INSERT INTO teams(name, description, created_at, lead_agent_id, "
                "lead_session_id) VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO NOTHING",
                (row.name, row.description, row.created_at, row.lead_agent_id, row.lead_session_id),
            )
            if done.rowcount != 1:
                return False
            # A previous team of that name may have left members only if the store was
            # edited by hand; the new team starts with exactly ``members``.
            conn.execute("DELETE FROM team_members WHERE team = ?", (row.name,))
            conn.executemany(_INSERT_MEMBER, [_member_params(m) for m in members])
            return True

        return self.store.transaction(op)

    def get_team(self, name: str) -> TeamRow | None:
        """The team called ``name``, or None."""
        rows = self.store.query("SELECT * FROM teams WHERE name = ?", (name,))
        return TeamRow(**dict(rows[0])) if rows else None

    def team_of_lead(self, session_id: str) -> TeamRow | None:
        """The team session ``session_id`` leads, or None."""
        rows = self.store.query(
            "SELECT * FROM teams WHERE lead_session_id = ? ORDER BY created_at LIMIT 1",
            (session_id,),
        )
        return TeamRow(**dict(rows[0])) if rows else None

    def list_teams(self) -> list[TeamRow]:
        """Every team, oldest first."""
        rows = self.store.query("SELECT * FROM teams ORDER BY created_at, name")
        return [TeamRow(**dict(r)) for r in rows]

    def delete_team(self, name: str, *, refuse_active: bool = False) -> list[str]:
        """Delete a team and its members (its task list stays), in one transaction.

        Args:
            name: The team.
            refuse_active: Delete nothing while a member other than the lead is active.

        Returns:
            With ``refuse_active``, the active members that kept the team (empty: deleted, or
            there was no such team); otherwise always empty.

        Raises:
            StoreError: The store could not be written.
        """

        def op(conn: sqlite3.Connection) -> list[str]:
            if refuse_active:
                active = conn.execute(
                    "SELECT m.name FROM team_members m JOIN teams t ON t.name = m.team "
                    "WHERE m.team = ? AND m.is_active = 1 AND m.agent_id != t.lead_agent_id "
                    "ORDER BY m.rowid",
                    (name,),
                ).fetchall()
                if active:
                    return [n for (n,) in active]
            conn.execute("DELETE FROM team_members WHERE team = ?", (name,))
            conn.execute("DELETE FROM teams WHERE name = ?", (name,))
            return []

        return self.store.transaction(op)

    # -- members ------------------------------------------------------------------------------

    def add_member(self, row: MemberRow) -> bool:
        """Add a member; False (nothing written) when its name is taken in that team.

        Raises:
            StoreError: The store could not be written.
        """
        return self.store.transaction(
            lambda conn: conn.execute(_INSERT_MEMBER, _member_params(row)).rowcount == 1
        )

    def members(self, team: str) -> list[MemberRow]:
        """A team's members in the order they joined."""
        rows = self.store.query("SELECT * FROM team_members WHERE team = ? ORDER BY rowid", (team,))
        return [_member(r) for r in rows]

    def member(self, team: str, name: str) -> MemberRow | None:
        """One member of a team, or None."""
        rows = self.store.query(
            "SELECT * FROM team_members WHERE team = ? AND name = ?", (team, name)
        )
        return _member(rows[0]) if rows else None

    def set_member(self, team: str, name: str, **fields: Any) -> bool:
        """Change some fields of a member (names from :data:`MEMBER_FIELDS`), now.

        Returns:
            Whether there was such a member.

        Raises:
            ValueError: A field that cannot be changed.
            StoreError: The store could not be written.
        """
        unknown = set(fields) - MEMBER_FIELDS
        if unknown:
            raise ValueError(f"member fields that cannot be set: {', '.join(sorted(unknown))}")
        if not fields:
            return self.member(team, name) is not None
        values = [int(v) if isinstance(v, bool) else v for v in fields.values()]
        # The names are checked against MEMBER_FIELDS above, so they are safe to splice in.
        assignments = ", ".join(f"{k} = ?" for k in fields)
        return self.store.transaction(
            lambda conn: (
                conn.execute(
                    f"UPDATE team_members SET {assignments} WHERE team = ? AND name = ?",
                    (*values, team, name),
                ).rowcount
                == 1
            )
        )

    # -- the task list ------------------------------------------------------------------------

    def create_task(
        self,
        team: str,
        subject: str,
        description: str,
        active_form: str | None,
        metadata: dict[str, Any] | None,
        when: float,
    ) -> TaskRow:
        """Add a pending, unowned task with the next id of the team's list, now.

        The id is read and taken in one immediate transaction: two creators, in any
        processes, never get the same one, and no id is given twice (one whose task was
        deleted stays used).

        Raises:
            StoreError: The store could not be written.
        """
        meta = dict(metadata or {})

        def op(conn: sqlite3.Connection) -> TaskRow:
            # The highest ever handed out, not the highest left: a deleted one's id stays its.
            (last,) = conn.execute(
                "SELECT MAX(COALESCE((SELECT last FROM team_task_ids WHERE team = ?), 0), "
                "COALESCE((SELECT MAX(id) FROM team_tasks WHERE team = ?), 0))",
                (team, team),
            ).fetchone()
            conn.execute(
                "INSERT INTO team_task_ids(team, last) VALUES (?, ?) "
                "ON CONFLICT(team) DO UPDATE SET last = excluded.last",
                (team, last + 1),
            )
            row = TaskRow(team, last + 1, subject, description, active_form, "pending", None,
                          (), (), meta, when, when)  # fmt: skip
            conn.execute(
                "INSERT INTO team_tasks(team, id, subject, description, active_form, status, "
                "owner, blocks, blocked_by, metadata, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, 'pending', NULL, '[]', '[]', ?, ?, ?)",
                (team, row.id, subject, description, active_form, _dumps(meta), when, when),
            )
            return row

        return self.store.transaction(op)

    def get_task(self, team: str, task_id: int) -> TaskRow | None:
        """One task of a team's list, or None."""
        rows = self.store.query(
            "SELECT * FROM team_tasks WHERE team = ? AND id = ?", (team, task_id)
        )
        return _task(rows[0]) if rows else None

    def list_tasks(self, team: str) -> list[TaskRow]:
        """A team's tasks by id."""
        rows = self.store.query("SELECT * FROM team_tasks WHERE team = ? ORDER BY id", (team,))
        return [_task(r) for r in rows]

    def count_tasks(self) -> dict[str, dict[str, int]]:
        """For every team name with tasks: how many there are in each status."""
        rows = self.store.query(
            "SELECT team, status, COUNT(*) AS n FROM team_tasks GROUP BY team, status"
        )
        counts: dict[str, dict[str, int]] = {}
        for r in rows:
            counts.setdefault(r["team"], {})[r["status"]] = r["n"]
        return counts

    def update_task(
        self,
        team: str,
        task_id: int,
        changes: dict[str, Any],
        *,
        claimant: str | None = None,
        when: float,
    ) -> tuple[TaskRow, list[str]]:
        """Change a task by the rules, atomically (one immediate transaction).

        Args:
            team: The team whose list holds it.
            task_id: Its id.
            changes: Any of ``subject``, ``description``, ``active_form``, ``status``,
                ``owner`` ('' or None: unowned), ``metadata`` (merged; a None value removes
                the key), ``add_blocks`` and ``add_blocked_by`` (ids; both sides are
                updated). Status ``deleted`` removes the task and every reference to it.
            claimant: A member claiming the task: it succeeds only if the task is unowned or
                already theirs, and makes them the owner.
            when: The time of the change.

        Returns:
            The task after the change (for a deletion: as it was, status ``deleted``), and
            the names of what changed (``deleted`` for a deletion; ``blocks`` and
            ``blocked_by`` for the lists).

        Raises:
            TeamTaskError: Unknown task or field, a bad status, open blockers, another owner.
            StoreError: The store could not be written.
        """
        unknown = set(changes) - {*_TASK_FIELDS[:6], "add_blocks", "add_blocked_by"}
        if unknown:
            raise TeamTaskError(f"Unknown task fields: {', '.join(sorted(unknown))}")
        status = changes.get("status")
        if status is not None and status not in TASK_STATUSES:
            raise TeamTaskError(
                f'Invalid status "{status}": use pending, in_progress, completed or deleted'
            )
        return self.store.transaction(
            lambda conn: _update(conn, team, task_id, changes, claimant, when)
        )

    def delete_task(self, team: str, task_id: int) -> bool:
        """Remove a task and every reference to it; False when there was none."""

        def op(conn: sqlite3.Connection) -> bool:
            found = _load(conn, team, task_id)
            if found is None:
                return False
            _delete(conn, found, found.updated_at)
            return True

        return self.store.transaction(op)


def _load(conn: sqlite3.Connection, team: str, task_id: int) -> TaskRow | None:
    rows = _rows(conn, "SELECT * FROM team_tasks WHERE team = ? AND id = ?", (team, task_id))
    return _task(rows[0]) if rows else None


def _need(conn: sqlite3.Connection, team: str, task_id: int) -> TaskRow:
    found = _load(conn, team, task_id)
    if found is None:
        raise TeamTaskError(f"Task #{task_id} not found")
    return found


def _delete(conn: sqlite3.Connection, task: TaskRow, when: float) -> None:
    conn.execute("DELETE FROM team_tasks WHERE team = ? AND id = ?", (task.team, task.id))
    for other_id in {*task.blocks, *task.blocked_by}:
        other = _load(conn, task.team, other_id)
        if other is not None:
            _write_task(
                conn,
                replace(
                    other,
                    blocks=tuple(i for i in other.blocks if i != task.id),
                    blocked_by=tuple(i for i in other.blocked_by if i != task.id),
                    updated_at=when,
                ),
            )


def _update(
    conn: sqlite3.Connection,
    team: str,
    task_id: int,
    changes: dict[str, Any],
    claimant: str | None,
    when: float,
) -> tuple[TaskRow, list[str]]:
    """The body of :meth:`TeamTables.update_task`."""
    before = _need(conn, team, task_id)
    if changes.get("status") == "deleted":
        _delete(conn, before, when)
        return replace(before, status="deleted", updated_at=when), ["deleted"]
    task = before
    for key in ("subject", "description", "active_form"):
        if key in changes and changes[key] is not None:
            task = replace(task, **{key: changes[key]})
    if "status" in changes and changes["status"] is not None:
        task = replace(task, status=changes["status"])
    if "owner" in changes:
        task = replace(task, owner=changes["owner"] or None)
    if claimant is not None:
        if before.owner and before.owner != claimant:
            raise TeamTaskError(f"Task #{task_id} is already owned by {before.owner}")
        task = replace(task, owner=claimant)
    if changes.get("metadata") is not None:
        merged = dict(task.metadata)
        for key, value in changes["metadata"].items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        task = replace(task, metadata=merged)
    # The other side of each new edge: written with the task, rolled back on an error.
    touched: dict[int, TaskRow] = {}
    blocks, blocked_by = list(task.blocks), list(task.blocked_by)
    for blocking, ids in (
        (True, changes.get("add_blocks") or ()),
        (False, changes.get("add_blocked_by") or ()),
    ):
        for other_id in ids:
            if other_id == task_id:
                raise TeamTaskError(f"Task #{task_id} cannot block itself")
            other = touched.get(other_id) or _need(conn, team, other_id)
            mine, theirs = (
                (blocks, list(other.blocked_by)) if blocking else (blocked_by, list(other.blocks))
            )
            if other_id not in mine:
                mine.append(other_id)
            if task_id not in theirs:
                theirs.append(task_id)
                touched[other_id] = (
                    replace(other, blocked_by=tuple(theirs), updated_at=when)
                    if blocking
                    else replace(other, blocks=tuple(theirs), updated_at=when)
                )
    task = replace(task, blocks=tuple(blocks), blocked_by=tuple(blocked_by))
    if task.status == "in_progress" and before.status != "in_progress":
        blockers = [touched.get(i) or _load(conn, team, i) for i in task.blocked_by]
        open_ids = [b.id for b in blockers if b is not None and b.status != "completed"]
        if open_ids:
            raise TeamTaskError(f"Task #{task_id} is blocked by {_ids(open_ids)}")
    changed = [name for name in _TASK_FIELDS if getattr(task, name) != getattr(before, name)]
    if changed:
        task = replace(task, updated_at=when)
        _write_task(conn, task)
    for other in touched.values():
        _write_task(conn, other)
    return task, changed


def open_blockers(task: TaskRow, tasks: Iterable[TaskRow]) -> list[int]:
    """The ids of ``task``'s blockers that are not completed, given the team's ``tasks``."""
    status = {t.id: t.status for t in tasks}
    return [i for i in task.blocked_by if status.get(i, "completed") != "completed"]
