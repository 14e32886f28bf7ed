"""``taskloom tasks``: list task records from the store, a page at a time.

A session that fanned out holds thousands of tasks: the table shows one page of them
(:data:`DEFAULT_PAGE` rows unless ``--limit`` says otherwise, ``--offset`` for the next) and
says how many there are; only the rows shown are read and looked at (their output files,
their kinds' notes). ``--json`` gives every row unless ``--limit`` or ``--offset`` is given.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from taskloom.clock import span
from taskloom.settings import db_path
from taskloom.store import Store

#: How many rows the table shows when ``--limit`` is not given.
DEFAULT_PAGE = 100


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size if path else None
    except OSError:
        return None


def _human(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{n}B"


def _note(record: dict[str, Any]) -> str | None:
    """What the task's kind adds after its status (a workflow's ``12/50``), if anything."""
    from taskloom.tasks.kinds import kind_of  # importing the package registers every kind
    from taskloom.tasks.types import readable_state

    state = readable_state(dict(record))
    if state is None:  # a record of a newer taskloom: its status alone
        return None
    return kind_of(state).status_note(state).strip() or None


def collect(
    session: str | None, all_sessions: bool, *, limit: int | None = None, offset: int = 0
) -> tuple[str | None, list[dict[str, Any]], int]:
    """The chosen session id, one page of its task rows, and how many rows it has in all.

    Every session's rows with ``all_sessions``; the page is at most ``limit`` rows (None: all)
    after the first ``offset``, oldest first.
    """
    store = Store(db_path())
    try:
        if all_sessions:
            chosen = None
        elif session is not None:
            chosen = session
        else:
            sessions = store.list_sessions()
            chosen = sessions[0].id if sessions else None
            if chosen is None:
                return None, [], 0
        records = store.list_tasks(chosen, limit=limit, offset=offset)
        total = store.count_tasks(chosen) if limit is not None or offset else len(records)
    finally:
        store.close()
    now = time.time()
    rows = []
    for rec in records:
        rows.append(
            {
                "id": rec["id"],
                "type": rec["type"],
                "status": rec["status"],
                "status_note": _note(rec),
                "description": rec.get("description", ""),
                "session_id": rec.get("session_id"),
                "owner": rec.get("owner"),
                "start_time": rec.get("start_time"),
                "end_time": rec.get("end_time"),
                "age_s": round(now - (rec.get("start_time") or now), 3),
                "exit_code": rec.get("exit_code"),
                "tokens": rec.get("total_tokens"),
                "tool_uses": rec.get("tool_uses"),
                "subtree_tokens": rec.get("subtree_tokens"),
                "subtree_tool_uses": rec.get("subtree_tool_uses"),
                "cost_usd": rec.get("cost_usd"),
                "subtree_cost_usd": rec.get("subtree_cost_usd"),
                "output_file": rec.get("output_file") or None,
                "output_size": _size(rec.get("output_file") or ""),
            }
        )
    return chosen, rows, total


def list_tasks(
    *,
    session: str | None,
    all_sessions: bool,
    as_json: bool,
    limit: int | None = None,
    offset: int = 0,
) -> int:
    """Print one page of the tasks; returns the exit code.

    Args:
        session: The session (None: the latest).
        all_sessions: Every session's tasks.
        as_json: JSON rows for scripts.
        limit: The most rows shown (None: :data:`DEFAULT_PAGE` in the table, all in JSON;
            0: all).
        offset: How many rows to skip first.
    """
    if limit is None and not as_json:
        limit = DEFAULT_PAGE
    chosen, rows, total = collect(session, all_sessions, limit=limit or None, offset=max(0, offset))
    if as_json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    where = "any session" if all_sessions else (f"session {chosen}" if chosen else "the store")
    if not rows:
        beyond = f" past the first {offset}" if total else ""
        print(f"No tasks in {where}{beyond}.")
        return 0
    from rich.console import Console
    from rich.table import Table

    title = "all sessions" if all_sessions else f"session {chosen}"
    table = Table(title=f"Tasks ({title})")
    for name in ("id", "type", "status", "description", "age", "usage", "output"):
        table.add_column(name, overflow="fold" if name == "description" else "ellipsis")
    for row in rows:
        table.add_row(
            row["id"],
            row["type"],
            f"{row['status']} {row['status_note']}" if row["status_note"] else row["status"],
            row["description"],
            span(row["age_s"]),
            _usage(row),
            _human(row["output_size"]),
        )
    console = Console()
    console.print(table)
    if len(rows) < total:
        first, last = offset + 1, offset + len(rows)
        hint = f"--offset {last} for the next page, " if last < total else ""
        console.print(f"Rows {first}-{last} of {total} ({hint}--limit 0 for all).")
    return 0


def _usage(row: dict[str, Any]) -> str:
    """An agent's tokens, tool calls and cost, and its subtree's when it started agents."""
    if row.get("tokens") is None:
        return ""
    text = f"{_count(row['tokens'])} tok · {row.get('tool_uses') or 0} tools"
    own, whole = row.get("cost_usd") or 0.0, row.get("subtree_cost_usd") or 0.0
    if own:
        text += f" · ${own:.4f}"
    sub_tokens, sub_tools = row.get("subtree_tokens") or 0, row.get("subtree_tool_uses") or 0
    # Its agents' spending shows as more tool calls or more cost than its own.
    if sub_tools > (row.get("tool_uses") or 0) or whole > own + 1e-9:
        text += f" (with its agents: {_count(sub_tokens)} · {sub_tools} tools"
        text += f" · ${whole:.4f})" if whole else ")"
    return text


def _count(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)
