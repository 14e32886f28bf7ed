"""The store's compare-and-set statements, each run inside one immediate transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection
from typing import Any

from taskloom.store.rows import MailRow, ProcessRow, SessionRow, TagRow


def claim(
    conn: sqlite3.Connection, row: SessionRow, may_take: Callable[[SessionRow], bool]
) -> tuple[bool, SessionRow | None]:
    """The body of :meth:`Store.claim_session`."""
    cur = conn.execute("SELECT * FROM sessions WHERE id = ?", (row.id,))
    cur.row_factory = sqlite3.Row
    found = cur.fetchone()
    if found is None:
        conn.execute(
            "INSERT INTO sessions(id, pid, pid_start, boot_id, cwd, started_at, ended_at) "
            "VALUES (?, ?, ?, ?, ?, ?, NULL)",
            (row.id, row.pid, row.pid_start, row.boot_id, row.cwd, row.started_at),
        )
        return True, None
    current = SessionRow(**dict(found))
    if not may_take(current):
        return False, current
    # The transaction already excludes other writers; the WHERE clause states the contract.
    done = conn.execute(
        "UPDATE sessions SET pid = ?, pid_start = ?, boot_id = ?, cwd = ?, ended_at = NULL "
        "WHERE id = ? AND pid = ? AND pid_start = ? AND boot_id = ? AND ended_at IS ?",
        (
            row.pid,
            row.pid_start,
            row.boot_id,
            row.cwd,
            row.id,
            current.pid,
            current.pid_start,
            current.boot_id,
            current.ended_at,
        ),
    )
    return done.rowcount == 1, current


def end_session_of(
    conn: sqlite3.Connection,
    session: SessionRow,
    when: float,
    statuses: Collection[str],
    settle: Callable[[dict[str, Any]], dict[str, Any] | None] | None,
) -> bool:
    """The body of :meth:`Store.end_session_of`."""
    done = conn.execute(
        "UPDATE sessions SET ended_at = ? WHERE id = ? AND pid = ? AND pid_start = ? "
        "AND boot_id = ? AND ended_at IS NULL",
        (when, session.id, session.pid, session.pid_start, session.boot_id),
    )
    if done.rowcount != 1:
        return False
    if settle is not None and statuses:
        wanted = list(statuses)
        rows = conn.execute(
            f"SELECT data FROM tasks WHERE session_id = ? AND status IN "
            f"({','.join('?' * len(wanted))}) ORDER BY start_time",
            (session.id, *wanted),
        ).fetchall()
        settled = [settle(json.loads(data)) for (data,) in rows]
        conn.executemany(UPSERT_TASK, [task_params(d) for d in settled if d is not None])
    return True


def insert_tags(
    conn: sqlite3.Connection,
    tags: list[str],
    session_id: str,
    owner_pid: int,
    owner_start: float,
    boot_id: str,
    when: float,
    path: str = "",
) -> list[TagRow]:
    """The body of :meth:`Store.record_tags`."""
    rows = []
    for tag in tags:
        cur = conn.execute(
            "INSERT INTO tags(tag, session_id, owner_pid, owner_start, boot_id, created_at, path)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (tag, session_id, owner_pid, owner_start, boot_id, when, path),
        )
        assert cur.lastrowid is not None
        rows.append(
            TagRow(cur.lastrowid, tag, session_id, owner_pid, owner_start, boot_id, when, path)
        )
    return rows


def process_params(row: ProcessRow) -> tuple[Any, ...]:
    """A process row as the parameters of an INSERT."""
    return (
        row.pid,
        row.pid_start,
        row.pgid,
        row.session_id,
        row.task_id,
        row.owner_pid,
        row.owner_start,
        row.boot_id,
        int(row.detached),
    )


#: Insert or replace one task record (parameters: :func:`task_params`).
UPSERT_TASK = (
    "INSERT INTO tasks(id, session_id, type, status, description, owner, start_time, "
    "end_time, output_file, notified, data) VALUES (?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT(id) DO UPDATE SET status = excluded.status, "
    "description = excluded.description, owner = excluded.owner, "
    "start_time = excluded.start_time, end_time = excluded.end_time, "
    "output_file = excluded.output_file, notified = excluded.notified, data = excluded.data"
)


def task_params(data: dict[str, Any]) -> tuple[Any, ...]:
    """A task state dict as the parameters of :data:`UPSERT_TASK`."""
    return (
        data["id"],
        data["session_id"],
        data["type"],
        data["status"],
        data["description"],
        data["owner"],
        data["start_time"],
        data["end_time"],
        data["output_file"],
        int(data["notified"]),
        _ENCODER.encode(data),
    )


# One encoder for every record: json.dumps with separators makes a new one per call, and
# every task's record is encoded at each commit that writes it.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


#: Insert one mailbox row (parameters: :func:`mail_params`).
INSERT_MAIL = (
    "INSERT INTO mailbox(id, seq, session_id, recipient, sender, kind, topic, priority, body, "
    "summary, created_at, payload, delivered_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL)"
)


def mail_params(row: MailRow) -> tuple[Any, ...]:
    """A mailbox row as the parameters of :data:`INSERT_MAIL`."""
    return (
        row.id,
        row.seq,
        row.session_id,
        row.recipient,
        row.sender,
        row.kind,
        row.topic,
        row.priority,
        row.body,
        row.summary,
        row.created_at,
        row.payload,
    )


def bind_address(
    conn: sqlite3.Connection,
    session_id: str,
    team: str,
    name: str,
    address: str,
    when: float,
    replace: bool,
) -> bool:
    """The body of :meth:`Store.bind_address`."""
    on_conflict = (
        "DO UPDATE SET address = excluded.address, created_at = excluded.created_at"
        if replace
        else "DO NOTHING"
    )
    done = conn.execute(
        "INSERT INTO addresses(session_id, team, name, address, created_at) "
        f"VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id, team, name) {on_conflict}",
        (session_id, team, name, address, when),
    )
    return done.rowcount == 1
