"""Waking another process when a mailbox row is posted for it: one Unix datagram a ping.

The mailbox stays the store: a row for an address another process serves (a teammate in its
own pane, the lead) is committed, then that process is pinged on its wake-up socket, and it
reads what is new from the store. A ping carries nothing but "look now": a lost one (the
listener not up yet) loses no row, because a listener reads the store when it starts, too.
No process polls.

A socket path longer than ``sun_path`` allows (108 bytes) is reached through
``/proc/self/fd/N/`` of its directory, so a deep ``TASKLOOM_HOME`` works too.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Self

from taskloom.settings import ensure_private_dir

#: sun_path is 108 bytes on Linux, the last one for the NUL.
MAX_ADDRESS = 107


def wakeup_path(home: Path, session_id: str, address: str) -> Path:
    """Where the process serving ``address`` of ``session_id`` is woken (short, fixed length)."""
    digest = hashlib.sha256(f"{session_id}\0{address}".encode()).hexdigest()[:20]
    return home / "wake" / f"{digest}.sock"


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """An address for ``bind``/``connect``/``sendto`` that fits in sun_path, valid inside."""
    if len(os.fsencode(path)) <= MAX_ADDRESS:
        yield str(path)
        return
    # O_PATH: the directory is only an anchor, not something we need to list.
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC
    fd = os.open(path.parent, flags)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def ping(path: Path) -> bool:
    """Wake whoever listens at ``path``; False if nobody does (the row waits in the store)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            with unix_address(path) as address:
                sock.sendto(b"!", address)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return False
        except BlockingIOError:
            return True  # its queue is full of pings: it is woken already
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR):
                return False
            raise
    return True


class WakeupListener:
    """A process's wake-up socket: ``on_ping`` runs on the event loop after each burst of pings.

    Use as ``async with``; the socket file is removed at exit. A stale file (its listener dead)
    is replaced; a live listener on the path is an error, since two processes must never
    serve one address.

    Args:
        path: Where to listen (see :func:`wakeup_path`).
        on_ping: Called (on the loop) when pings arrive; several at once make one call.
    """

    def __init__(self, path: Path, on_ping: Callable[[], None]) -> None:
        self.path = path
        self._on_ping = on_ping
        self._sock: socket.socket | None = None
        self._file: tuple[int, int] = (0, 0)

    async def __aenter__(self) -> Self:
        """Bind the socket and start listening.

        Raises:
            OSError: Another live process listens at the path (``EADDRINUSE``), or it cannot
                be bound.
        """
        ensure_private_dir(self.path.parent)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            with unix_address(self.path) as address:
                try:
                    sock.bind(address)
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE or ping(self.path):
                        raise
                    with contextlib.suppress(FileNotFoundError):  # another took it first
                        os.unlink(self.path)  # nobody listens on it: a dead process's file
                    sock.bind(address)
            os.chmod(self.path, 0o600)
            info = os.stat(self.path)
        except BaseException:
            sock.close()
            raise
        self._file = (info.st_dev, info.st_ino)
        self._sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._read)
        return self

    def _read(self) -> None:
        sock = self._sock
        if sock is None:
            return
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while sock.recv(64):
                pass  # drain the burst: one call for all of it
        self._on_ping()

    async def __aexit__(self, *exc: object) -> None:
        """Stop listening and remove the socket file."""
        sock, self._sock = self._sock, None
        if sock is None:
            return
        with contextlib.suppress(ValueError, RuntimeError):  # the loop is closed already
            asyncio.get_running_loop().remove_reader(sock.fileno())
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            info = os.stat(self.path)
            if (info.st_dev, info.st_ino) == self._file:  # still ours, not a successor's
                os.unlink(self.path)


__all__ = ["MAX_ADDRESS", "WakeupListener", "ping", "unix_address", "wakeup_path"]
