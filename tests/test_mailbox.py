"""The durable mailbox: written before read, handed out once, acknowledged once, replayed.

Unit tests drive :class:`Mailbox` and :class:`Directory` on a real store; the acceptance tests
SIGKILL a real ``taskloom -p`` process and resume its session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR, clean_env, run_cli, scripted_argv, wait_until
from helpers import json_lines as lines
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.store.schema import MIGRATIONS, SCHEMA_VERSION
from taskloom.tasks.directory import Directory
from taskloom.tasks.mailbox import Kind, Mailbox
from taskloom.tasks.types import Priority
from taskloom.transcript import sidechain_dir, transcript_path


def _rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read with a connection of its own: what another process would see."""
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
        return conn.execute(sql, params).fetchall()


# -- the mailbox --------------------------------------------------------------------------------


async def test_a_row_is_committed_before_it_is_handed_out(home: Path) -> None:
    store = Store(db_path(home))
    try:
        box = Mailbox(store, "s1")
        letter = box.post(recipient="a1", sender="s1", kind="message", body="hi", summary="sum")
        taken = box.take("a1")  # no await in between: take must commit first
        assert taken == [letter]
        assert _rows(
            store.path, "SELECT recipient, sender, kind, body, summary, delivered_at FROM mailbox"
        ) == [("a1", "s1", "message", "hi", "sum", None)]
    finally:
        store.close()


async def test_a_row_is_handed_out_once_and_acknowledged_once(home: Path) -> None:
    store = Store(db_path(home))
    try:
        box = Mailbox(store, "s1")
        letter = box.post(recipient="a1", sender="s1", kind="message", body="hi")
        assert box.take("a2") == []  # another recipient's mail is not handed out
        assert box.take("a1") == [letter]
        assert box.take("a1") == [] and not box.has_pending("a1")
        assert box.ack([letter.id]) == [letter]
        stamp = _rows(store.path, "SELECT delivered_at FROM mailbox")[0][0]
        assert stamp is not None
        assert box.ack([letter.id]) == []  # a second acknowledgement changes nothing
        assert _rows(store.path, "SELECT delivered_at FROM mailbox") == [(stamp,)]
        box.requeue([letter.id])  # acknowledged rows never come back
        assert box.take("a1") == []
    finally:
        store.close()


async def test_unacknowledged_rows_are_replayed_after_reopening_the_store(home: Path) -> None:
    store = Store(db_path(home))
    box = Mailbox(store, "s1")
    acked = box.post(recipient="s1", sender="b1", kind="notification", body="done", topic="x")
    lost = box.post(recipient="a1", sender="s1", kind="message", body="steer", summary="s")
    box.post(recipient="a9", sender="s2", kind="message", body="other")
    assert {x.id for x in box.take()} >= {acked.id, lost.id}
    box.ack([acked.id])  # only this one reached a transcript before the "crash"
    store.close()

    again = Store(db_path(home))
    try:
        box2 = Mailbox(again, "s1")
        replayed = box2.replay()
        assert [x.body for x in replayed if x.recipient == "a1"] == ["steer"]
        assert acked.id not in {x.id for x in replayed}
        back = next(x for x in replayed if x.id == lost.id)
        assert (back.kind, back.sender, back.summary, back.seq) == ("message", "s1", "s", lost.seq)
        assert box2.replay() == []  # loading twice does not duplicate
        fresh = box2.post(recipient="a1", sender="s1", kind="message", body="later")
        assert fresh.seq > max(x.seq for x in replayed)  # posting order goes on
        assert [x.body for x in box2.take("a1")] == ["steer", "later"]
    finally:
        again.close()


def _post_later_and_next(box: Mailbox, kind: Kind) -> None:
    """Post l1, n1, l2, n2 to s1, each ``later`` or ``next`` as its name says."""
    for body in ("l1", "n1", "l2", "n2"):
        priority: Priority = "next" if body.startswith("n") else "later"
        box.post(recipient="s1", sender="t", kind=kind, body=body, priority=priority)


async def test_rows_are_handed_out_by_priority_then_posting_order(home: Path) -> None:
    store = Store(db_path(home))
    try:
        box = Mailbox(store, "s1")
        _post_later_and_next(box, "notification")
        assert [x.body for x in box.take("s1", priority="next")] == ["n1", "n2"]
        box.post(recipient="s1", sender="t", kind="notification", body="n3", priority="next")
        assert [x.body for x in box.take("s1")] == ["n3", "l1", "l2"]
    finally:
        store.close()


async def test_a_requeued_row_goes_back_to_its_place_in_posting_order(home: Path) -> None:
    store = Store(db_path(home))
    try:
        box = Mailbox(store, "s1")
        _post_later_and_next(box, "message")
        taken = box.take("s1")
        assert [x.body for x in taken] == ["n1", "n2", "l1", "l2"]
        # Put back in reverse: each is held again after the ones put back before it.
        box.requeue(x.id for x in reversed(taken))
        assert [x.body for x in box.pending("s1")] == ["n1", "n2", "l1", "l2"]
        later = [x for x in taken if x.priority == "later"]
        assert [x.body for x in box.take("s1", priority="later")] == ["l1", "l2"]
        box.requeue(x.id for x in reversed(later))
        assert [x.body for x in box.pending("s1")] == ["n1", "n2", "l1", "l2"]
    finally:
        store.close()


async def test_a_waiting_recipient_is_woken_by_the_row_written_for_it(home: Path) -> None:
    store = Store(db_path(home))
    try:
        box = Mailbox(store, "s1")
        waiter = asyncio.ensure_future(box.wait(30.0, "a1", "message"))
        await asyncio.sleep(0)
        box.post(recipient="a2", sender="s1", kind="message", body="not for a1")
        box.post(recipient="a1", sender="s1", kind="notification", body="other kind", topic="t")
        await asyncio.sleep(0)
        assert not waiter.done()
        started = time.monotonic()
        box.post(recipient="a1", sender="s1", kind="message", body="for a1")
        assert await asyncio.wait_for(waiter, 5.0) is True
        # Woken by the event, not a timeout (5 s) or a poll.
        assert time.monotonic() - started < min(1.0 * TIME_FACTOR, 5.0)
        assert await box.wait(0.05, "a3") is False
    finally:
        store.close()


def schema_1_database(home: Path) -> tuple[Path, sqlite3.Connection]:
    """A store file at schema 1 (before the mailbox), and a connection to fill it."""
    path = db_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in (s.strip() for s in MIGRATIONS[0].split(";")):
        if statement:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    return path, conn


def test_the_old_notification_queue_moves_into_the_mailbox(home: Path) -> None:
    path, opened = schema_1_database(home)
    with contextlib.closing(opened) as conn:
        conn.execute(
            "INSERT INTO notifications VALUES "
            "('n1', 0, 's1', 's1', 'b00000001', 'terminal', 'later', 'body', 1.0, NULL), "
            "('n2', 1, 's1', 's1', 'b00000002', 'stall', 'next', 'done', 2.0, 5.0)"
        )
    store = Store(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        box = Mailbox(store, "s1")
        [letter] = box.replay()  # the acknowledged one stays delivered
        assert (letter.id, letter.kind, letter.sender, letter.topic, letter.body) == (
            "n1",
            "notification",
            "b00000001",
            "terminal",
            "body",
        )
        assert [(r.id, r.kind) for r in store.undelivered_mail("s1")] == [("n1", "notification")]
    finally:
        store.close()


def test_messages_waiting_in_an_old_agent_record_move_into_the_mailbox(home: Path) -> None:
    path, opened = schema_1_database(home)
    with contextlib.closing(opened) as conn:
        conn.execute(
            "INSERT INTO notifications VALUES "
            "('n1', 4, 's1', 's1', 'b00000001', 'terminal', 'later', 'body', 1.0, NULL)"
        )
        rows = [
            ("a1", 1.0, json.dumps({"id": "a1", "pending_messages": ["steer left", {"x": 1}]})),
            ("a2", 2.0, json.dumps({"id": "a2", "pending_messages": ["and you"]})),
            ("a3", 3.0, json.dumps({"id": "a3", "pending_messages": []})),
            ("a4", 4.0, "{not json"),
        ]
        for task_id, start, data in rows:
            conn.execute(
                "INSERT INTO tasks(id, session_id, type, status, start_time, data) "
                "VALUES (?, 's1', 'local_agent', 'running', ?, ?)",
                (task_id, start, data),
            )
    store = Store(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        letters = Mailbox(store, "s1").replay()
        assert [(x.recipient, x.kind, x.priority, x.body) for x in letters] == [
            ("s1", "notification", "later", "body"),
            ("a1", "message", "next", "steer left"),
            ("a1", "message", "next", '{"x":1}'),
            ("a2", "message", "next", "and you"),
        ]
        assert [x.seq for x in letters] == [4, 5, 6, 7]
        data = {r["id"]: r["data"] for r in store.query("SELECT id, data FROM tasks")}
        assert all("pending_messages" not in json.loads(data[t]) for t in ("a1", "a2", "a3"))
        assert data["a4"] == "{not json"  # an unreadable record is left alone, not lost
    finally:
        store.close()


def test_a_protocol_row_keeps_its_payload_apart_and_is_replayed_once(home: Path) -> None:
    store = Store(db_path(home))
    payload = json.dumps({"type": "shutdown_request", "requestId": "r1"})
    try:
        box = Mailbox(store, "s1")
        shown = f'<teammate-message teammate_id="team-lead">\n{payload}\n</teammate-message>'
        text = box.post(recipient="a1", sender="x", kind="message", body=payload)
        sent = box.post(
            recipient="a1",
            sender="x",
            kind="protocol",
            topic="shutdown_request",
            body=shown,
            payload=payload,
        )
        assert (text.data, sent.data) == (None, json.loads(payload))  # text is never protocol
        wrong: list[tuple[Kind, str]] = [("protocol", ""), ("control", ""), ("message", payload)]
        for kind, given in wrong:
            with pytest.raises(ValueError, match="payload"):
                box.post(recipient="a1", sender="x", kind=kind, body="b", payload=given)
        box.take("a1")
        store.flush()
    finally:
        store.close()
    store = Store(db_path(home))  # a new process: what was not acknowledged comes again
    try:
        box = Mailbox(store, "s1")
        again = {letter.id: letter for letter in box.replay()}
        assert again == {text.id: text, sent.id: sent}
        box.take("a1")
        box.ack(again)
        assert Mailbox(store, "s1").replay() == []
    finally:
        store.close()


def test_permission_rows_of_before_become_control_rows_and_old_text_stays_text(
    home: Path,
) -> None:
    path, opened = schema_1_database(home)
    request = json.dumps({"type": "permission_request", "requestId": "p1"})
    shaped = (
        '<teammate-message teammate_id="alice">\n{"type": "shutdown_approved"}\n</teammate-message>'
    )
    with contextlib.closing(opened) as conn:
        for number in range(1, 6):  # up to schema 6, the one before protocol rows
            for statement in (s.strip() for s in MIGRATIONS[number].split(";")):
                if statement:
                    conn.execute(statement)
        conn.execute("PRAGMA user_version = 6")
        conn.executemany(
            "INSERT INTO mailbox(id, seq, session_id, recipient, sender, kind, topic, priority, "
            "body, summary, created_at) VALUES (?, ?, 's1', 's1', 'alice@t', ?, '', 'next', ?, "
            "'', 1.0)",
            [("m1", 0, "protocol", request), ("m2", 1, "message", shaped),
             ("m3", 2, "protocol", "{not json")],
        )  # fmt: skip
    store = Store(path)
    try:
        assert store.schema_version == SCHEMA_VERSION
        letters = Mailbox(store, "s1").replay()
        assert [(x.id, x.kind, x.topic, x.data) for x in letters] == [
            ("m1", "control", "permission_request", json.loads(request)),
            ("m2", "message", "", None),
            ("m3", "control", "", None),
        ]
    finally:
        store.close()


def test_the_directory_of_names_is_durable_and_per_session(home: Path) -> None:
    store = Store(db_path(home))
    names = Directory(store, "s1")
    assert names.bind("worker", "a1")
    assert names.bind("worker", "a1")  # binding again to the same address is fine
    assert not names.bind("worker", "a2")  # a taken name is refused
    assert names.resolve("worker") == "a1"
    assert Directory(store, "s2").resolve("worker") is None
    assert names.bind("worker", "a2", replace=True)
    store.close()
    again = Store(db_path(home))
    try:
        assert Directory(again, "s1").entries() == {"worker": "a2"}
    finally:
        again.close()


# -- acceptance: SIGKILL, then --resume ---------------------------------------------------------


def _start(tmp_path: Path, script: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        scripted_argv(script, "--dangerously-skip-permissions"),
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=clean_env(),
    )


def _resume(tmp_path: Path, session_id: str, turns: list[Any], **extra: Any) -> list[Any]:
    script = tmp_path / f"resume-{time.monotonic_ns()}.json"
    script.write_text(json.dumps({"turns": turns, **extra}))
    proc = run_cli(
        "-p",
        "go on",
        "--output-format",
        "stream-json",
        "--model",
        f"scripted:{script}",
        "--dangerously-skip-permissions",
        "--resume",
        session_id,
        cwd=tmp_path,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr
    return lines(proc.stdout)


@pytest.mark.e2e
async def test_a_notification_survives_sigkill_and_is_delivered_once_on_resume(
    tmp_path: Path, home: Path
) -> None:
    script = tmp_path / "first.json"
    bash = {"command": "echo finished", "run_in_background": True, "description": "quick"}
    # The second answer takes long: the command ends, and its notification waits for the
    # next turn boundary, which the first process never reaches.
    script.write_text(
        json.dumps({"turns": [{"tool_calls": [{"name": "Bash", "input": bash}]}, {"delay": 30}]})
    )
    first = _start(tmp_path, script)
    assert first.stdout is not None
    session_id = task_id = None
    try:
        for line in first.stdout:
            event = json.loads(line)
            session_id = event["session_id"]
            if event.get("subtype") == "task_started":
                task_id = event["task_id"]
                break
        assert session_id and task_id
        db = db_path(home)
        await wait_until(
            lambda: bool(
                _rows(
                    db,
                    "SELECT 1 FROM mailbox WHERE sender = ? AND kind = 'notification'",
                    (task_id,),
                )
            ),
            timeout=20,
            what="the notification row",
        )
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        first.stdout.close()
    assert _rows(db, "SELECT delivered_at FROM mailbox WHERE sender = ?", (task_id,)) == [(None,)]

    events = _resume(tmp_path, session_id, ["Noted."])
    notified = [e["task_id"] for e in events if e.get("subtype") == "task_notification"]
    assert notified == [task_id]
    transcript = transcript_path(session_id, home, search=True).read_text()
    assert transcript.count(f"<task-id>{task_id}</task-id>") == 1
    [(stamp,)] = _rows(db, "SELECT delivered_at FROM mailbox WHERE sender = ?", (task_id,))
    assert stamp is not None

    # Delivered means delivered: a second resume does not bring it back.
    events = _resume(tmp_path, session_id, ["Nothing new."])
    assert [e for e in events if e.get("subtype") == "task_notification"] == []
    transcript = transcript_path(session_id, home, search=True).read_text()
    assert transcript.count(f"<task-id>{task_id}</task-id>") == 1


@pytest.mark.e2e
async def test_a_message_to_an_agent_survives_sigkill_and_is_delivered_once_on_resume(
    tmp_path: Path, home: Path
) -> None:
    """A message the agent never saw is held for it, not dropped and not sent twice.

    The agent died with the process before its next tool boundary. The message stays in its
    mailbox, undelivered; when the resumed session messages the agent again (by the name it
    was given, which the directory kept), the agent is resumed and its first input holds the
    held message and then the new one, each once. Both are acknowledged once recorded.
    """
    agent = {
        "description": "worker task",
        "prompt": "work",
        "name": "worker",
        "run_in_background": True,
    }
    script = tmp_path / "first.json"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    {"tool_calls": [{"name": "Agent", "input": agent}]},
                    {
                        "tool_calls": [
                            {
                                "name": "SendMessage",
                                "input": {"to": "worker", "message": "hello-from-main"},
                            }
                        ]
                    },
                    {"text": "Waiting for the worker."},
                ],
                # Busy in a long command: the message waits for its next tool boundary.
                "subagents": {
                    "general-purpose": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": "sleep 30"}}]},
                        {"text": "never reached"},
                    ]
                },
            }
        )
    )
    first = _start(tmp_path, script)
    assert first.stdout is not None
    session_id = agent_id = None
    queued = False
    try:
        for line in first.stdout:
            event = json.loads(line)
            session_id = event["session_id"]
            if event.get("subtype") == "task_started" and event["task_id"].startswith("a"):
                agent_id = event["task_id"]
            if "Message queued for agent" in line:
                queued = True
            if queued and "Waiting for the worker." in line:
                break
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        first.stdout.close()
    assert session_id and agent_id and queued
    db = db_path(home)
    rows = _rows(
        db,
        "SELECT body, delivered_at FROM mailbox WHERE recipient = ? AND kind = 'message'",
        (agent_id,),
    )
    # Framed for an agent that was running: "The main session sent a message while ...".
    assert len(rows) == 1 and "hello-from-main" in rows[0][0] and rows[0][1] is None

    events = _resume(
        tmp_path,
        session_id,
        [
            {
                "tool_calls": [
                    {
                        # Its own id: the scripted ids of the first run are taken.
                        "id": "toolu_resumed_send",
                        "name": "SendMessage",
                        "input": {"to": "worker", "message": "second-message"},
                    }
                ]
            },
            {"text": "Sent."},
            {"text": "All done."},
        ],
        subagents={"general-purpose": {"text": "Got both."}},
    )
    assert any(
        "it was resumed in the background with your message" in json.dumps(e) for e in events
    )
    sidechain = (
        sidechain_dir(transcript_path(session_id, home, search=True)) / f"agent-{agent_id}.jsonl"
    )
    text = sidechain.read_text()
    assert text.count("hello-from-main") == 1 and text.count("second-message") == 1
    assert text.index("hello-from-main") < text.index("second-message")
    rows = _rows(
        db,
        "SELECT body, delivered_at FROM mailbox WHERE recipient = ? AND kind = 'message' "
        "ORDER BY seq",
        (agent_id,),
    )
    assert len(rows) == 2 and "hello-from-main" in rows[0][0] and rows[1][0] == "second-message"
    assert all(stamp is not None for _, stamp in rows)

    # Nothing is left to hand out: another resume delivers neither again.
    _resume(tmp_path, session_id, ["Quiet."])
    assert sidechain.read_text().count("hello-from-main") == 1


def test_a_row_for_an_address_served_elsewhere_is_committed_and_its_process_told(
    home: Path,
) -> None:
    store = Store(db_path(home))
    told: list[str] = []

    def tell(recipient: str) -> None:
        told.append(recipient)
        if recipient == "bob":
            raise ConnectionRefusedError("nobody listens")  # only a wake-up is lost

    box = Mailbox(store, "s1", serves=lambda r: r == "lead", elsewhere=tell)
    try:
        alice = box.post(recipient="alice", sender="lead", kind="message", body="hi")
        bob = box.post(recipient="bob", sender="lead", kind="message", body="yo")
        mine = box.post(recipient="lead", sender="lead", kind="notification", body="n", topic="t")
        assert told == ["alice", "bob"]
        assert not box.has_pending("alice") and not box.has_pending("bob")
        assert [x.id for x in box.pending()] == [mine.id]
        # Committed before the process was told: another connection sees them at once.
        other = Store(db_path(home))
        try:
            seen = {r.id for r in other.undelivered_mail("s1")}
            assert {alice.id, bob.id} <= seen
            # Withdrawn (its sender told it failed): the other process never hands it out.
            box.withdraw([bob.id])
            theirs = Mailbox(other, "s1", serves=lambda r: r in ("alice", "bob"))
            assert [x.body for x in theirs.replay()] == ["hi"]
        finally:
            other.close()
    finally:
        store.close()
