"""Messages from other taskloom processes on this machine, over a Unix domain socket.

A session listens at ``<session dir>/peer.sock`` (:class:`PeerListener`); another process
reaches it at the address ``uds:<socket path>`` with :func:`send_to_peer`. The wire protocol
is newline-delimited JSON, one request and one reply per connection::

    -> {"type": "message", "from": "<sender session id>", "reply_to": "<its socket>" | null,
        "text": "<non-empty text>", "summary": "<short preview>"}      (summary optional)
    <- {"ok": true, "id": "<mailbox letter id>"}
    <- {"ok": false, "error": "<what is wrong, naming the field>"}

The listener answers ``ok`` only once the message is a committed row of the session's
:class:`~taskloom.tasks.mailbox.Mailbox`: a sender told it was delivered can rely on it even if
this process dies right after. Only the owner may connect: the socket is 0600 in a 0700
directory. Linux limits a socket address to 107 bytes; a longer path is reached through
``/proc/self/fd/<fd of its directory>/<name>``, which is short whatever the directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import socket
import stat
from pathlib import Path
from typing import Any, Self

from taskloom.errors import StoreError, ToolError, UserError, describe_os_error
from taskloom.settings import ensure_private_dir, session_dir, taskloom_home
from taskloom.tasks.mailbox import Mailbox
from taskloom.tasks.wakeup import unix_address

_log = logging.getLogger(__name__)

SOCKET_NAME = "peer.sock"
MAX_LINE = 1 << 20  # one request line, in bytes: a message is text, not a file transfer
_READ_TIMEOUT = 5.0  # a client that connects and says nothing must not hold a handler
_PROBE_TIMEOUT = 0.5  # how long start() gives an existing socket to answer
_CLOSE_GRACE = 1.0  # how long aclose() lets in-flight requests finish before cancelling them
_ACCEPT_PAUSE = 1.0  # after accept() fails (out of descriptors): pause rather than spin


def socket_path(session_id: str, home: Path | None = None) -> Path:
    """Return where the session ``session_id`` listens for its peers."""
    return session_dir(session_id, home) / SOCKET_NAME


async def _open(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    with unix_address(path) as address:
        return await asyncio.open_unix_connection(address)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def check_request(request: Any, *, reply_to_session: bool = False) -> str | None:
    """What is wrong with a decoded request, or None when it is a valid message.

    ``reply_to_session``: ``reply_to`` is a session id (a ``bridge:`` sender's), not a path.
    """
    if not isinstance(request, dict):
        return "the request must be a JSON object"
    if request.get("type") != "message":
        return "field 'type' must be \"message\""
    if not isinstance(request.get("from"), str) or not request["from"]:
        return "field 'from' must be a non-empty string"
    if not isinstance(request.get("text"), str) or not request["text"]:
        return "field 'text' must be a non-empty string"
    if not isinstance(request.get("reply_to"), str | None):
        return "field 'reply_to' must be a string or null"
    if not isinstance(request.get("summary"), str | None):
        return "field 'summary' must be a string"
    for name in ("from", "text", "reply_to", "summary"):
        value = request.get(name)
        if isinstance(value, str) and not _encodable(value):
            # JSON's \ud800 escapes decode to lone surrogates, which no store can hold.
            return f"field {name!r} is not valid Unicode text (a lone surrogate)"
    sender = request["from"]
    if len(sender) > 256 or not _shown_as_is(sender):
        return "field 'from' must be a session id: printable, without quotes, at most 256 long"
    reply_to = request.get("reply_to")
    if reply_to is not None and reply_to_session:
        if len(reply_to) > 256 or not _shown_as_is(reply_to):
            return "field 'reply_to' must be a session id: printable, without quotes"
    elif reply_to is not None and not _plain_path(reply_to):
        return "field 'reply_to' must be an absolute socket path, without quotes or controls"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plain_path(text: str) -> bool:
    """An absolute path that can be shown to a model as it is (it is quoted in its framing)."""
    return text.startswith("/") and len(text) <= 4096 and _shown_as_is(text)


def _shown_as_is(text: str) -> bool:
    # Quoted in the text the model is shown: nothing that could close the quote or a line.
    return not any(ch in text for ch in "\"'`") and all(ch.isprintable() for ch in text)


def commit_request(
    mailbox: Mailbox, session_id: str, request: Any, prefix: str, *, reply_to_session: bool = False
) -> dict[str, Any]:
    """Check a peer's request and commit its message to the session's mailbox.

    Args:
        mailbox: The receiving session's mailbox.
        session_id: The receiving session.
        request: The decoded request.
        prefix: The sender's address scheme (``uds:``, ``bridge:``), before its ``reply_to``.
        reply_to_session: ``reply_to`` is a session id, not a socket path.

    Returns:
        The answer its sender is told: ``ok`` and the letter's id only once the row is
        committed, else the problem.
    """
    problem = check_request(request, reply_to_session=reply_to_session)
    if problem is not None:
        return {"ok": False, "error": problem}
    reply_to, sender = request.get("reply_to"), request["from"]
    try:
        letter = mailbox.post(
            recipient=session_id,
            sender=f"{prefix}{reply_to}" if reply_to else f"session:{sender}",
            kind="message",
            body=request["text"],
            priority="next",
            summary=request.get("summary") or "",
            commit=True,
        )
    except StoreError as exc:
        return {"ok": False, "error": f"the message could not be stored: {exc}"}
    return {"ok": True, "id": letter.id}


class PeerListener:
    """Accepts messages for one session on its Unix socket and posts them to its mailbox."""

    def __init__(self, mailbox: Mailbox, session_id: str, path: Path) -> None:
        """Prepare to listen at ``path`` for ``session_id``; nothing happens before start()."""
        self._mailbox = mailbox
        self._session_id = session_id
        self._path = path
        self._sock: socket.socket | None = None  # the listening socket
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file we bound
        self._handlers: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def path(self) -> Path:
        """The socket file's path."""
        return self._path

    async def start(self) -> None:
        """Bind the socket (0600, in a 0700 directory) and start accepting messages.

        Raises:
            UserError: Another live session listens at the path, or it cannot be bound.
        """
        if self._sock is not None or self._closed:
            raise RuntimeError("a PeerListener starts once")
        path = self._path
        try:
            ensure_private_dir(path.parent)
            await self._clear_stale()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            raise UserError(f"cannot listen at {path}: {describe_os_error(exc)}") from exc
        try:
            with unix_address(path) as address:
                sock.bind(address)
            st = os.lstat(path)
            self._identity = (st.st_dev, st.st_ino)
            # Before listen(): nobody can connect until the file is the owner's alone.
            os.chmod(path, 0o600)
            sock.listen(100)
            sock.setblocking(False)
            # Our own accept rather than asyncio.start_unix_server: on 3.11 a connection
            # accepted just before Server.close() fails in Server._attach and leaks its socket.
            asyncio.get_running_loop().add_reader(sock, self._accept)
            self._sock = sock
        except BaseException as exc:
            sock.close()
            self._unlink_if_ours()
            if not isinstance(exc, OSError):
                raise
            if exc.errno == errno.EADDRINUSE:  # another session bound it since _clear_stale
                raise UserError(f"another session listens at {path}") from exc
            raise UserError(f"cannot listen at {path}: {describe_os_error(exc)}") from exc

    async def _clear_stale(self) -> None:
        """Remove a socket file left by a dead process; refuse one that someone answers on."""
        try:
            st = os.lstat(self._path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise UserError(f"{self._path} exists and is not a socket; move it away")
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT):
                _, writer = await _open(self._path)
        except (ConnectionRefusedError, FileNotFoundError):  # a dead process's file, or gone
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            return
        except TimeoutError as exc:  # alive but too busy to accept: not ours to take over
            raise UserError(f"another session listens at {self._path}") from exc
        writer.transport.abort()
        raise UserError(f"another session listens at {self._path}")

    def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        if self._sock is None:
            return
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            _log.warning("cannot accept on %s: %s", self._path, exc)
            loop.remove_reader(self._sock)
            loop.call_later(_ACCEPT_PAUSE, self._resume)
            return
        # Accepted and tracked in one callback: aclose() knows of every connection.
        task = loop.create_task(self._handle(conn))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    def _resume(self) -> None:
        if self._sock is not None:
            asyncio.get_running_loop().add_reader(self._sock, self._accept)

    async def _handle(self, conn: socket.socket) -> None:
        writer: asyncio.StreamWriter | None = None
        flushed = False
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=MAX_LINE)
            reply = await self._answer(reader)
            if reply is not None:
                writer.write(json.dumps(reply).encode() + b"\n")
                async with asyncio.timeout(_READ_TIMEOUT):
                    await writer.drain()
            flushed = True
        except (ConnectionError, TimeoutError) as exc:
            _log.debug("peer connection on %s dropped: %s", self._path, exc)
        except Exception:  # a handler's failure must never reach the loop
            _log.exception("peer connection on %s failed", self._path)
        finally:
            # close() would wait for a client that reads nothing; abort() does not.
            if writer is None:
                conn.close()
            elif flushed:
                writer.close()
            else:
                writer.transport.abort()

    async def _answer(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT):
                line = await reader.readline()
        except TimeoutError:
            return {"ok": False, "error": f"no request line within {_READ_TIMEOUT} s"}
        except ValueError:  # the line overran the stream's limit
            return {"ok": False, "error": f"the request line is longer than {MAX_LINE} bytes"}
        if not line:
            return None  # connected and left (start() probing for a live listener)
        try:
            request = json.loads(line)
        except (ValueError, RecursionError) as exc:
            return {"ok": False, "error": f"the request is not JSON: {exc}"}
        return commit_request(self._mailbox, self._session_id, request, "uds:")

    async def aclose(self) -> None:
        """Stop listening, remove the socket file if it is still ours, finish or cancel handlers.

        Idempotent. In-flight requests get a bounded grace period, then are cancelled.
        """
        if self._closed:
            return
        self._closed = True
        sock, self._sock = self._sock, None
        if sock is None:
            return
        asyncio.get_running_loop().remove_reader(sock)
        sock.close()  # connections not yet accepted are dropped: their senders see EOF
        self._unlink_if_ours()  # first: a sender now fails at once rather than hang
        if self._handlers:
            _, late = await asyncio.wait(set(self._handlers), timeout=_CLOSE_GRACE)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=_CLOSE_GRACE)

    def _unlink_if_ours(self) -> None:
        # Another session may have replaced a file it took for stale: leave its socket alone.
        with contextlib.suppress(OSError):
            st = os.lstat(self._path)
            if (st.st_dev, st.st_ino) == self._identity:
                os.unlink(self._path)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def listening_sessions(home: Path | None = None) -> list[tuple[str, Path]]:
    """The sessions of this machine that answer on their socket: (session id, socket path).

    A socket file nobody answers on (its session died) is left out; each is probed at once,
    each for at most half a second.
    """
    sockets = sorted((home or taskloom_home()).glob(f"sessions/*/{SOCKET_NAME}"))

    async def answers(path: Path) -> bool:
        try:
            async with asyncio.timeout(_PROBE_TIMEOUT):
                _, writer = await _open(path)
        except (OSError, TimeoutError):
            return False
        writer.transport.abort()  # an empty request: the listener takes it for a probe
        return True

    alive = await asyncio.gather(*(answers(path) for path in sockets))
    return [(path.parent.name, path) for path, ok in zip(sockets, alive, strict=True) if ok]


async def send_to_peer(
    path: str | Path,
    *,
    sender: str,
    text: str,
    summary: str | None = None,
    reply_to: str | None = None,
    timeout: float = 2.0,
) -> str:
    """Deliver ``text`` to the session listening at ``path``; the whole exchange is bounded.

    Args:
        path: The peer's socket (the part after ``uds:`` of its address).
        sender: The sending session's id.
        text: The message (a non-empty str; callers validate).
        summary: A short preview for the recipient.
        reply_to: The sender's own socket path, for an answer.
        timeout: Seconds for connecting, sending and reading the reply together.

    Returns:
        The id of the mailbox row the message became.

    Raises:
        ToolError: The message was not delivered; the message says why and names ``path``.
    """
    where = Path(path)
    request = {"type": "message", "from": sender, "reply_to": reply_to, "text": text}
    if summary is not None:
        request["summary"] = summary
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await _open(where)
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            answer = await reader.readline()
    except TimeoutError as exc:  # before OSError: TimeoutError is one
        raise ToolError(f"{where} did not answer within {timeout} s") from exc
    except FileNotFoundError as exc:
        raise ToolError(f"no taskloom session listens at {where}: no such socket") from exc
    except ConnectionRefusedError as exc:
        if not _is_socket(where):  # connect() to a plain file is refused too
            raise ToolError(f"no taskloom session listens at {where}: not a socket") from exc
        raise ToolError(f"nobody listens at {where} (a stale socket?)") from exc
    except PermissionError as exc:
        raise ToolError(f"cannot reach {where}: permission denied") from exc
    except ValueError as exc:  # a reply line beyond the stream's limit
        raise ToolError(f"the session at {where} sent a malformed reply: too long") from exc
    except OSError as exc:
        raise ToolError(f"cannot reach the session at {where}: {exc.strerror or exc}") from exc
    finally:
        if writer is not None:
            writer.transport.abort()  # one exchange per connection: nothing is left to send
    return _delivered(where, answer)


def _delivered(where: Path, answer: bytes) -> str:
    """The letter id from a reply line, or the ToolError it stands for."""
    if not answer:
        raise ToolError(f"the session at {where} closed the connection without answering")
    try:
        reply = json.loads(answer)
    except (ValueError, RecursionError):
        reply = None
    if isinstance(reply, dict) and reply.get("ok") is False:
        error = reply.get("error") or "no reason given"
        raise ToolError(f"the session at {where} refused the message: {error}")
    if isinstance(reply, dict) and reply.get("ok") is True and isinstance(reply.get("id"), str):
        return str(reply["id"])
    raise ToolError(f"the session at {where} sent a malformed reply: {answer[:200]!r}")
