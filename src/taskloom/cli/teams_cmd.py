"""``taskloom teams``: list the agent teams in the store, their members and task counts."""

from __future__ import annotations

import json
import sys
from typing import Any

from taskloom.settings import db_path
from taskloom.store import Store, TeamTables
from taskloom.teams import Team


def collect() -> tuple[list[Team], dict[str, dict[str, int]]]:
    """Every team in the store, oldest first, and each team name's task counts by status."""
    store = Store(db_path())
    try:
        tables = TeamTables(store)
        teams = [Team.from_rows(row, tables.members(row.name)) for row in tables.list_teams()]
        return teams, tables.count_tasks()
    finally:
        store.close()


def task_summary(counts: dict[str, int]) -> str:
    """One line for a task list: ``5 tasks: 2 pending, 1 in progress, 2 completed``."""
    total = sum(counts.values())
    if not total:
        return "no tasks"
    parts = [
        f"{counts[status]} {status.replace('_', ' ')}"
        for status in ("pending", "in_progress", "completed")
        if counts.get(status)
    ]
    return f"{total} task{'s' if total != 1 else ''}: {', '.join(parts)}"


def list_teams(*, as_json: bool) -> int:
    """Print the teams; returns the exit code."""
    teams, counts = collect()
    if as_json:
        report: dict[str, Any] = {"teams": [team.to_json() for team in teams]}
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not teams:
        print("No teams.")
        return 0
    for team in teams:
        about = f": {team.description}" if team.description else ""
        print(f"{team.name}{about}  (lead session {team.lead_session_id})")
        for member in team.members:
            state = "active" if member.is_active else "inactive"
            kind = "" if member.is_lead else f" [{member.agent_type}]"
            print(f"  {member.name}{kind}  {state}  {member.agent_id}")
        print(f"  {task_summary(counts.get(team.name, {}))}")
    return 0
