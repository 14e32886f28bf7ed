"""Messages between taskloom processes over a Unix socket: delivered durably, or refused clearly.

Every test uses real sockets and a real store; the peer side is either :func:`send_to_peer` or
raw bytes on a connection of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sqlite3
import stat
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import TIME_FACTOR
from taskloom.agents.peers import MAX_LINE, PeerListener, send_to_peer, socket_path
from taskloom.errors import StoreError, ToolError, UserError
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.mailbox import Mailbox

SESSION = "s1"


@contextlib.contextmanager
def _mailbox(home: Path) -> Iterator[Mailbox]:
    store = Store(db_path(home))
    try:
        yield Mailbox(store, SESSION)
    finally:
        store.close()


@contextlib.asynccontextmanager
async def _listening(
    home: Path, path: Path | None = None
) -> AsyncIterator[tuple[PeerListener, Mailbox]]:
    with _mailbox(home) as box:
        async with PeerListener(box, SESSION, path or socket_path(SESSION, home)) as listener:
            yield listener, box


@contextlib.contextmanager
def _short(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits in sun_path (pytest's temporary paths may not)."""
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _bind(sock: socket.socket, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _short(path) as address:
        sock.bind(address)


@contextlib.contextmanager
def _dead_socket(path: Path) -> Iterator[None]:
    """A socket file that nobody listens on: what a crashed process leaves behind."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        _bind(sock, path)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


async def _raw(path: Path, data: bytes) -> dict[str, Any]:
    """Send raw bytes and return the decoded reply line."""
    async with asyncio.timeout(5):
        with _short(path) as address:
            reader, writer = await asyncio.open_unix_connection(address)
        try:
            writer.write(data)
            line = await reader.readline()
        finally:
            writer.transport.abort()
    reply = json.loads(line)
    assert isinstance(reply, dict)
    return reply


def _long_path(home: Path) -> Path:
    path = socket_path("x" * 120, home)
    assert len(os.fsencode(path)) > 107
    return path


# -- delivery ----------------------------------------------------------------------------------


async def test_a_message_sent_is_a_committed_mailbox_row_of_the_session(home: Path) -> None:
    async with _listening(home) as (listener, box):
        letter_id = await send_to_peer(
            listener.path, sender="s2", text="hello there", summary="greeting"
        )
        (letter,) = box.pending(recipient=SESSION)
        assert (letter.id, letter.sender, letter.kind, letter.priority) == (
            letter_id,
            "session:s2",
            "message",
            "next",
        )
        assert (letter.body, letter.summary) == ("hello there", "greeting")
        # Committed before the reply: another connection to the database sees it already.
        with contextlib.closing(sqlite3.connect(db_path(home), timeout=10)) as conn:
            rows = conn.execute(
                "SELECT id, recipient, sender, body FROM mailbox WHERE session_id = ?", (SESSION,)
            ).fetchall()
        assert rows == [(letter_id, SESSION, "session:s2", "hello there")]


async def test_a_reply_address_becomes_the_sender_and_a_missing_summary_is_empty(
    home: Path,
) -> None:
    async with _listening(home) as (listener, box):
        await send_to_peer(listener.path, sender="s2", text="hi", reply_to="/run/s2/peer.sock")
        (letter,) = box.pending(recipient=SESSION)
        assert (letter.sender, letter.summary) == ("uds:/run/s2/peer.sock", "")


async def test_concurrent_senders_are_each_delivered_once(home: Path) -> None:
    async with _listening(home) as (listener, box):
        ids = await asyncio.gather(
            *(send_to_peer(listener.path, sender=f"p{n}", text=f"m{n}") for n in range(20))
        )
        pending = box.pending(recipient=SESSION)
        assert len(set(ids)) == 20
        assert {x.id for x in pending} == set(ids)
        assert {x.body for x in pending} == {f"m{n}" for n in range(20)}


async def test_the_socket_is_the_owners_alone(home: Path) -> None:
    async with _listening(home) as (listener, _):
        st = os.lstat(listener.path)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o600
        assert stat.S_IMODE(os.stat(listener.path.parent).st_mode) == 0o700


async def test_a_path_longer_than_sun_path_works_for_listening_and_sending(home: Path) -> None:
    path = _long_path(home)
    async with _listening(home, path) as (_, box):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o600
        letter_id = await send_to_peer(path, sender="s2", text="long way")
        assert [x.id for x in box.pending(recipient=SESSION)] == [letter_id]
    assert not path.exists()
    with pytest.raises(ToolError, match="no such socket"):
        await send_to_peer(path, sender="s2", text="gone")


async def test_a_long_stale_socket_is_refused_and_then_replaced(home: Path) -> None:
    path = _long_path(home)
    with _dead_socket(path):
        with pytest.raises(ToolError, match="a stale socket"):
            await send_to_peer(path, sender="s2", text="anyone?")
        async with _listening(home, path):
            await send_to_peer(path, sender="s2", text="now")


# -- the listener's socket file -----------------------------------------------------------------


async def test_a_second_listener_on_a_live_socket_is_refused(home: Path) -> None:
    async with _listening(home) as (first, box):
        second = PeerListener(box, "s9", first.path)
        with pytest.raises(UserError, match="another session listens at") as refused:
            await second.start()
        assert str(refused.value) == f"another session listens at {first.path}"
        await second.aclose()
        await send_to_peer(first.path, sender="s2", text="still here")  # the first still works
        assert [x.body for x in box.pending()] == ["still here"]


async def test_a_stale_socket_file_is_replaced(home: Path) -> None:
    path = socket_path(SESSION, home)
    with _dead_socket(path):
        with pytest.raises(ToolError, match="a stale socket"):
            await send_to_peer(path, sender="s2", text="hi")
        async with _listening(home) as (listener, box):
            await send_to_peer(listener.path, sender="s2", text="hi")
            assert len(box.pending()) == 1


async def test_a_file_that_is_not_a_socket_is_left_alone(home: Path) -> None:
    path = socket_path(SESSION, home)
    path.parent.mkdir(parents=True)
    path.write_text("precious")
    with _mailbox(home) as box, pytest.raises(UserError, match="not a socket"):
        await PeerListener(box, SESSION, path).start()
    assert path.read_text() == "precious"


async def test_aclose_removes_the_socket_and_later_sends_fail(home: Path) -> None:
    with _mailbox(home) as box:
        listener = PeerListener(box, SESSION, socket_path(SESSION, home))
        await listener.start()
        await listener.aclose()
        await listener.aclose()  # idempotent
    assert not listener.path.exists()
    with pytest.raises(ToolError, match="no such socket"):
        await send_to_peer(listener.path, sender="s2", text="late")


async def test_aclose_does_not_wait_long_for_a_client_that_says_nothing(home: Path) -> None:
    with _mailbox(home) as box:
        listener = PeerListener(box, SESSION, socket_path(SESSION, home))
        await listener.start()
        with _short(listener.path) as address:
            reader, writer = await asyncio.open_unix_connection(address)
        try:
            started = time.monotonic()
            await listener.aclose()  # its handler waits for a line: cancelled after the grace
            assert time.monotonic() - started < 3.0 * TIME_FACTOR
            async with asyncio.timeout(5):
                assert await reader.read() == b""  # and the connection is closed
        finally:
            writer.transport.abort()


async def test_aclose_leaves_a_socket_that_replaced_ours_alone(home: Path) -> None:
    async with _listening(home) as (listener, _):
        listener.path.unlink()
        with _dead_socket(listener.path):
            await listener.aclose()
            assert stat.S_ISSOCK(os.lstat(listener.path).st_mode)


# -- refusals ------------------------------------------------------------------------------------


async def test_a_missing_socket_fails_at_once_naming_the_path(home: Path) -> None:
    path = socket_path("nobody", home)
    started = time.monotonic()
    with pytest.raises(ToolError) as failed:
        await send_to_peer(path, sender="s2", text="hi")
    assert time.monotonic() - started < 2.0 * TIME_FACTOR
    assert str(failed.value) == f"no taskloom session listens at {path}: no such socket"


async def test_a_stale_socket_is_reported_as_such(home: Path) -> None:
    path = socket_path("crashed", home)
    with _dead_socket(path), pytest.raises(ToolError) as failed:
        await send_to_peer(path, sender="s2", text="hi")
    assert str(failed.value) == f"nobody listens at {path} (a stale socket?)"


async def test_a_plain_file_is_not_a_socket(home: Path) -> None:
    path = home / "plain"
    path.parent.mkdir(parents=True)
    path.write_text("")
    with pytest.raises(ToolError, match="not a socket") as failed:
        await send_to_peer(path, sender="s2", text="hi")
    assert str(path) in str(failed.value)


async def test_a_listener_that_never_answers_times_out(home: Path) -> None:
    path = home / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        _bind(mute, path)
        mute.listen(1)  # connections wait in the backlog: never accepted, never read
        started = time.monotonic()
        with pytest.raises(ToolError) as failed:
            await send_to_peer(path, sender="s2", text="hello?", timeout=0.5)
        assert time.monotonic() - started < 0.5 + 0.5 * TIME_FACTOR
    assert str(failed.value) == f"{path} did not answer within 0.5 s"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (b"", "closed the connection without answering"),
        (b"garbage\n", "sent a malformed reply: b'garbage\\n'"),
        (b'{"ok": true}\n', "sent a malformed reply"),
        (b'{"ok": false, "error": "full"}\n', "refused the message: full"),
    ],
)
async def test_a_bad_or_negative_reply_is_reported_naming_the_path(
    home: Path, reply: bytes, expected: str
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(reply)
        writer.close()

    path = home / "odd.sock"
    path.parent.mkdir(parents=True)
    with _short(path) as address:
        server = await asyncio.start_unix_server(answer, address)
    try:
        with pytest.raises(ToolError) as failed:
            await send_to_peer(path, sender="s2", text="hi")
    finally:
        server.close()
        await server.wait_closed()
    assert str(path) in str(failed.value) and expected in str(failed.value), failed.value


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (b"not json\n", "not JSON"),
        (b"[1, 2]\n", "JSON object"),
        (b'{"type": "note", "from": "s2", "text": "hi"}\n', "'type'"),
        (b'{"type": "message", "text": "hi"}\n', "'from'"),
        (b'{"type": "message", "from": "s2"}\n', "'text'"),
        (b'{"type": "message", "from": "s2", "text": ""}\n', "'text'"),
        (b'{"type": "message", "from": "s2", "text": 7}\n', "'text'"),
        (b'{"type": "message", "from": "s2", "text": "hi", "reply_to": 1}\n', "'reply_to'"),
        (b'{"type": "message", "from": "s2", "text": "hi", "summary": []}\n', "'summary'"),
        (b"[" * 100_000 + b"\n", "not JSON"),
    ],
)
async def test_a_malformed_request_gets_a_refusal_naming_what_is_wrong(
    home: Path, data: bytes, named: str
) -> None:
    async with _listening(home) as (listener, box):
        reply = await _raw(listener.path, data)
        assert reply["ok"] is False and named in reply["error"], reply
        assert box.pending() == []


async def test_a_request_line_over_the_limit_is_refused(home: Path) -> None:
    async with _listening(home) as (listener, box):
        reply = await _raw(listener.path, b"x" * (MAX_LINE + 10) + b"\n")
        assert reply["ok"] is False and "longer than" in reply["error"]
        assert box.pending() == []


async def test_a_store_that_refuses_the_row_is_a_refusal_for_the_sender(home: Path) -> None:
    async with _listening(home) as (listener, box):
        with contextlib.closing(sqlite3.connect(db_path(home), timeout=10)) as conn:
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON mailbox "
                "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
            )
            conn.commit()
        with pytest.raises(ToolError, match=r"refused the message: .*could not be stored") as no:
            await send_to_peer(listener.path, sender="s2", text="hi")
        assert str(listener.path) in str(no.value)
        assert box.pending() == []


async def test_text_with_a_lone_surrogate_is_refused_and_loses_nothing_else(
    tmp_path: Path, store: Store
) -> None:
    """JSON may spell a lone surrogate (``\\ud800``); no store can hold it: refused by name."""
    mailbox = Mailbox(store, "s1")
    async with PeerListener(mailbox, "s1", tmp_path / "p.sock") as listener:
        other = mailbox.post(recipient="s1", sender="t", kind="message", body="queued before")
        line = b'{"type": "message", "from": "s2", "text": "bad \\ud800 text"}\n'
        reply = await _raw(listener.path, line)
        assert reply == {
            "ok": False,
            "error": "field 'text' is not valid Unicode text (a lone surrogate)",
        }
        store.flush()
        assert [r.id for r in mailbox.pending("s1")] == [other.id]


def test_a_value_the_store_cannot_encode_is_rejected_alone(store: Store) -> None:
    mailbox = Mailbox(store, "s1")
    kept = mailbox.post(recipient="s1", sender="t", kind="message", body="fine")
    with pytest.raises(StoreError, match="store write rejected"):
        mailbox.post(recipient="s1", sender="t", kind="message", body="bad \ud800", commit=True)
    # The good row of the same batch reached the disk; the bad one is not handed out.
    assert [r.id for r in store.undelivered_mail("s1")] == [kept.id]
    assert [letter.id for letter in mailbox.pending("s1")] == [kept.id]
