"""The embedded SQLite store: schema, WAL, group commit, cross-process reads, rows."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskloom.errors import StoreError
from taskloom.settings import db_path
from taskloom.store import MailRow, ProcessRow, SessionRow, Store
from taskloom.store._sql import mail_params
from taskloom.store.schema import SCHEMA_VERSION
from taskloom.tasks.types import AgentTaskState, ShellTaskState, TaskStatus


@contextlib.contextmanager
def other_connection(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(path, timeout=10)
    try:
        yield conn
    finally:
        conn.close()


def shell_task(task_id: str, session: str = "s1", **kw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "session_id": session,
        "command": f"echo {task_id}",
        "description": f"desc {task_id}",
        "owner": session,
        "start_time": 100.0,
    }
    fields.update(kw)
    return ShellTaskState(id=task_id, **fields).to_dict()


def note(nid: str, seq: int, created: float, session: str = "s1", **kw: Any) -> MailRow:
    """A task's notification, as the mailbox row its task posts to its owner."""
    fields: dict[str, Any] = {
        "recipient": "main",
        "sender": "b00000000",
        "kind": "notification",
        "topic": "terminal",
        "priority": "later",
        "body": f"<task-notification>{nid}</task-notification>",
        "summary": "",
    }
    fields.update(kw)
    return MailRow(id=nid, seq=seq, session_id=session, created_at=created, **fields)


# -- schema and files ---------------------------------------------------------------------------


def test_new_store_has_current_schema_and_wal(store: Store, home: Path) -> None:
    assert store.path == home / "taskloom.db"
    assert store.schema_version == SCHEMA_VERSION
    with other_connection(store.path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        views = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='view'")}
    # Notifications moved into the mailbox (schema 2); the old name reads them as a view.
    assert {"sessions", "tasks", "mailbox", "addresses", "processes"} <= tables
    assert "notifications" in views


def test_newer_schema_is_refused_naming_both_versions(home: Path) -> None:
    path = db_path()
    Store(path).close()
    newer = SCHEMA_VERSION + 9136
    with other_connection(path) as conn:
        conn.execute(f"PRAGMA user_version = {newer}")
    with pytest.raises(StoreError) as info:
        Store(path)
    message = str(info.value).replace(str(path), "<db>")
    assert re.search(rf"\b{newer}\b", message), message
    assert re.search(rf"\b{SCHEMA_VERSION}\b", message), message
    with other_connection(path) as conn:  # left as it was: no downgrade attempted
        assert conn.execute("PRAGMA user_version").fetchone()[0] == newer


def test_reopening_keeps_data(home: Path) -> None:
    path = db_path()
    first = Store(path)
    first.upsert_session(SessionRow("s1", 1234, 5.0, "/work", 10.0, None))
    first.upsert_task(shell_task("b00000001", status=TaskStatus.COMPLETED, exit_code=0))
    first.add_mail(note("n1", 0, 1.0))
    first.add_process(ProcessRow(4321, 6.0, 4321, "s1", "b00000001", 1234, 5.0))
    first.close()

    second = Store(path)
    try:
        assert second.schema_version == SCHEMA_VERSION
        assert second.get_session("s1") == SessionRow("s1", 1234, 5.0, "/work", 10.0, None)
        task = second.get_task("b00000001")
        assert task is not None
        assert (task["status"], task["exit_code"], task["command"]) == (
            "completed",
            0,
            "echo b00000001",
        )
        assert [n.id for n in second.undelivered_mail("s1")] == ["n1"]
        assert second.list_processes() == [
            ProcessRow(4321, 6.0, 4321, "s1", "b00000001", 1234, 5.0)
        ]
    finally:
        second.close()


def test_db_file_is_private(store: Store) -> None:
    store.upsert_task(shell_task("b00000001"))
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.path.parent).st_mode) == 0o700


def test_wal_and_shm_files_are_private(home: Path) -> None:
    old = os.umask(0o022)
    try:
        s = Store(db_path())
    finally:
        os.umask(old)
    try:
        s.upsert_task(shell_task("b00000001"))
        modes = {
            p.name: oct(stat.S_IMODE(os.stat(p).st_mode))
            for p in home.iterdir()
            if p.name.startswith("taskloom.db")
        }
    finally:
        s.close()
    assert {"taskloom.db", "taskloom.db-wal", "taskloom.db-shm"} <= set(modes)
    assert modes == dict.fromkeys(modes, oct(0o600))


# -- group commit -------------------------------------------------------------------------------


async def test_writes_in_loop_are_committed_by_end_of_iteration(store: Store) -> None:
    store.upsert_task(shell_task("b00000001"))
    store.upsert_task(shell_task("b00000002"))
    store.add_mail(note("n1", 0, 1.0))
    await asyncio.sleep(0)
    with other_connection(store.path) as conn:
        ids = sorted(r[0] for r in conn.execute("SELECT id FROM tasks"))
        notes = [r[0] for r in conn.execute("SELECT id FROM notifications")]
    assert ids == ["b00000001", "b00000002"]
    assert notes == ["n1"]


async def test_writes_in_loop_are_visible_to_own_reads_immediately(store: Store) -> None:
    store.upsert_task(shell_task("b00000001", status=TaskStatus.RUNNING))
    got = store.get_task("b00000001")
    assert got is not None
    assert got["status"] == "running"
    store.upsert_task(shell_task("b00000001", status=TaskStatus.KILLED))
    got = store.get_task("b00000001")
    assert got is not None
    assert got["status"] == "killed"
    assert [t["id"] for t in store.list_tasks("s1")] == ["b00000001"]


async def test_flush_commits_without_yielding(store: Store) -> None:
    store.upsert_task(shell_task("b00000001"))
    store.flush()
    with other_connection(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 1


def test_writes_outside_loop_commit_at_once(store: Store) -> None:
    store.upsert_task(shell_task("b00000001"))
    with other_connection(store.path) as conn:
        assert conn.execute("SELECT id FROM tasks").fetchall() == [("b00000001",)]


# -- tasks ----------------------------------------------------------------------------------------


def test_upsert_get_and_list_tasks(store: Store) -> None:
    store.upsert_task(shell_task("b00000001", start_time=3.0, status=TaskStatus.RUNNING))
    store.upsert_task(shell_task("b00000002", start_time=1.0, status=TaskStatus.COMPLETED))
    store.upsert_task(shell_task("b00000003", session="s2", start_time=2.5))
    agent = AgentTaskState(
        id="a00000001",
        session_id="s1",
        start_time=2.0,
        status=TaskStatus.RUNNING,
        activities=("Reading a.py",),
    ).to_dict()
    store.upsert_task(agent)

    assert store.get_task("a00000001") == json.loads(json.dumps(agent))
    assert store.get_task("zzzzzzzzz") is None
    assert [t["id"] for t in store.list_tasks()] == [
        "b00000002",
        "a00000001",
        "b00000003",
        "b00000001",
    ]
    assert [t["id"] for t in store.list_tasks("s1")] == ["b00000002", "a00000001", "b00000001"]
    assert [t["id"] for t in store.list_tasks("s1", statuses=["running"])] == [
        "a00000001",
        "b00000001",
    ]
    assert store.list_tasks("s1", statuses=[]) == []

    store.upsert_task(shell_task("b00000001", start_time=3.0, status=TaskStatus.FAILED))
    got = store.get_task("b00000001")
    assert got is not None
    assert got["status"] == "failed"
    assert len(store.list_tasks("s1")) == 3


def test_another_process_reads_tasks_while_store_is_open(store: Store) -> None:
    store.upsert_session(SessionRow("s1", os.getpid(), 1.0, "/", 1.0, None))
    store.upsert_task(shell_task("b00000001", start_time=1.0))
    store.upsert_task(shell_task("b00000002", start_time=2.0, status=TaskStatus.RUNNING))
    store.upsert_task(shell_task("b00000003", session="s2"))
    script = (
        "import json, sys\n"
        "from taskloom.store import Store\n"
        "s = Store(sys.argv[1])\n"
        "print(json.dumps([t['id'] + ':' + t['status'] for t in s.list_tasks('s1')]))\n"
        "s.close()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(store.path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["b00000001:pending", "b00000002:running"]
    # and the first store is still usable afterwards
    store.upsert_task(shell_task("b00000004", start_time=4.0))
    assert len(store.list_tasks("s1")) == 3


# -- notifications --------------------------------------------------------------------------------


def test_notifications_add_order_and_ack(store: Store) -> None:
    store.add_mail(note("late", 0, 30.0))
    store.add_mail(note("early-b", 2, 10.0))
    store.add_mail(note("early-a", 1, 10.0))
    store.add_mail(note("other", 0, 5.0, session="s2"))

    rows = store.undelivered_mail("s1")
    assert [r.id for r in rows] == ["early-a", "early-b", "late"]
    assert all(r.delivered_at is None and r.session_id == "s1" for r in rows)
    assert rows[0] == note("early-a", 1, 10.0)

    store.ack_mail(["early-a", "late"], when=99.0)
    assert [r.id for r in store.undelivered_mail("s1")] == ["early-b"]
    assert [r.id for r in store.undelivered_mail("s2")] == ["other"]

    store.ack_mail(["early-a"], when=200.0)  # acking again keeps the first stamp
    store.flush()
    with other_connection(store.path) as conn:
        stamps = dict(conn.execute("SELECT id, delivered_at FROM notifications"))
    assert stamps == {"late": 99.0, "early-a": 99.0, "early-b": None, "other": None}


def test_a_row_given_as_values_is_the_row_add_mail_writes(store: Store) -> None:
    row = note("v1", 3, 7.0, payload="")
    store.add_mail(row)
    expected = dataclasses.replace(row, id="v2", seq=4, created_at=8.0)
    values = mail_params(expected)  # the values in the order of the table's insert
    store.add_mail_values(*values)
    first, second = store.undelivered_mail("s1")
    assert first == row
    assert second == expected
    with pytest.raises(TypeError):
        store.add_mail_values(*values[:-1])
    assert len(store.undelivered_mail("s1")) == 2


def test_notification_ids_are_unique(store: Store) -> None:
    store.add_mail(note("n1", 0, 1.0))
    with pytest.raises(StoreError):
        store.add_mail(note("n1", 1, 2.0))
    assert [r.id for r in store.undelivered_mail("s1")] == ["n1"]


# -- processes ------------------------------------------------------------------------------------


def test_process_rows_add_list_detach_remove(store: Store) -> None:
    a = ProcessRow(100, 1.5, 100, "s1", "b00000001", 10, 0.5)
    b = ProcessRow(200, 2.5, 200, "s1", "b00000002", 10, 0.5)
    reused = ProcessRow(100, 9.5, 100, "s2", "b00000003", 11, 0.7)
    for row in (a, b, reused):
        store.add_process(row)

    def by_key() -> dict[tuple[int, float], ProcessRow]:
        return {(r.pid, r.pid_start): r for r in store.list_processes()}

    assert by_key() == {(100, 1.5): a, (200, 2.5): b, (100, 9.5): reused}

    store.set_process_detached("b00000002")
    rows = by_key()
    assert rows[(200, 2.5)].detached is True
    assert rows[(100, 1.5)].detached is False
    assert rows[(100, 9.5)].detached is False

    store.remove_process(100, 1.5)  # the same pid with another start time stays
    assert set(by_key()) == {(200, 2.5), (100, 9.5)}
    store.remove_process(200, 0.0)  # wrong start time: not that process
    assert set(by_key()) == {(200, 2.5), (100, 9.5)}
    store.remove_process(200, 2.5)
    store.remove_process(100, 9.5)
    assert store.list_processes() == []


# -- sessions -------------------------------------------------------------------------------------


def test_sessions_upsert_open_end(store: Store) -> None:
    store.upsert_session(SessionRow("s1", 10, 1.0, "/a", 100.0, None))
    store.upsert_session(SessionRow("s2", 20, 2.0, "/b", 200.0, None))
    assert {s.id for s in store.open_sessions()} == {"s1", "s2"}
    assert [s.id for s in store.list_sessions()] == ["s2", "s1"]

    store.end_session("s1", when=150.0)
    assert [s.id for s in store.open_sessions()] == ["s2"]
    assert store.get_session("s1") == SessionRow("s1", 10, 1.0, "/a", 100.0, 150.0)

    # resumed by another process: reopened, new pid, original start kept
    store.upsert_session(SessionRow("s1", 30, 3.0, "/c", 999.0, None))
    assert store.get_session("s1") == SessionRow("s1", 30, 3.0, "/c", 100.0, None)
    assert {s.id for s in store.open_sessions()} == {"s1", "s2"}

    store.end_session("s2")
    ended = store.get_session("s2")
    assert ended is not None
    assert ended.ended_at is not None
    assert ended.ended_at > 0
    assert store.get_session("nope") is None
