"""The client's file system as the file tools' backend, and the one call that picks backends.

When the client's ``initialize`` offers ``fs.readTextFile`` and ``fs.writeTextFile``, the main
thread's Read, Write and Edit take text through ``fs/read_text_file`` and
``fs/write_text_file`` (:class:`ClientTextFiles`): the editor's unsaved buffers are what Read
sees and what Write and Edit change, and saving stays the editor's. The tools keep their own
semantics (:mod:`taskloom.tools.backends`): what is offered is one text, the tool pages it.

Every read asks for the whole text, never a ``line``/``limit`` window: Read's result names
the file's total line count, and read-before-write records a digest of the whole text, which
Write and Edit compare with the text they are about to change; a window could give neither.
Both capabilities are needed: reading one side and writing the other would make every write
look like a change made behind the model's back.

:func:`backends` is what a session's front end calls with the client's capabilities; it gives
the :class:`~taskloom.options.Options` fields ``text_files`` and ``commands``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import acp

from taskloom._dataclass import dataclass
from taskloom.acp.terminal import ClientTerminal

if TYPE_CHECKING:
    from taskloom.options import Options

#: The JSON-RPC error ACP clients answer a read of a missing file with.
RESOURCE_NOT_FOUND = -32002


class ClientTextFiles:
    """Text files as the client (an editor) holds them, through ``fs/*``.

    Args:
        conn: The agent side of the connection (its ``read_text_file``, ``write_text_file``).
        session_id: The ACP session the requests are made for.
    """

    def __init__(self, conn: Any, session_id: str) -> None:
        self._conn = conn
        self._session_id = session_id

    def serves(self, path: str) -> bool:
        """Every absolute path (ACP names files by absolute path only)."""
        return os.path.isabs(path)

    async def read(self, path: str) -> str | None:
        """The whole text of ``path`` as the editor has it; None when there is no such file.

        Raises:
            OSError: The client refused or failed the request.
        """
        try:
            response = await self._conn.read_text_file(session_id=self._session_id, path=path)
        except acp.RequestError as exc:
            # Clients differ in how they say "no such file": the disk decides the others.
            if exc.code == RESOURCE_NOT_FOUND or not os.path.lexists(path):
                return None
            raise OSError(f"the editor could not read it: {_said(exc)}") from exc
        except ConnectionError as exc:
            raise OSError(f"the editor is gone: {exc}") from exc
        text: str = response.content
        return text

    async def write(self, path: str, text: str) -> None:
        """Replace the editor's text of ``path`` (it creates the file when there is none).

        Raises:
            OSError: The client refused or failed the request.
        """
        try:
            await self._conn.write_text_file(session_id=self._session_id, path=path, content=text)
        except acp.RequestError as exc:
            raise OSError(f"the editor could not write it: {_said(exc)}") from exc
        except ConnectionError as exc:
            raise OSError(f"the editor is gone: {exc}") from exc


def _said(exc: acp.RequestError) -> str:
    """The client's error as one line: its message, and its data when it gave some."""
    data = getattr(exc, "data", None)
    return f"{exc} ({data})" if data else str(exc)


@dataclass(frozen=True, slots=True)
class ClientBackends:
    """What a session takes from the client: its files, its terminal (None: local).

    Attributes:
        text_files: The editor's buffers, for Read, Write and Edit.
        commands: The editor's terminals, for a foreground Bash.
    """

    text_files: ClientTextFiles | None = None
    commands: ClientTerminal | None = None

    def apply(self, options: Options) -> Options:
        """``options`` with these backends for its main thread."""
        return dataclasses.replace(options, text_files=self.text_files, commands=self.commands)


def backends(
    conn: Any,
    client_capabilities: Any,
    session_id: str,
    updates: Callable[[Any], None] | None = None,
) -> ClientBackends:
    """The backends a session uses, from what the client's ``initialize`` offered.

    Args:
        conn: The agent side of the connection.
        client_capabilities: The client's ``ClientCapabilities`` (None: it offered nothing).
        session_id: The ACP session they serve.
        updates: Sends a ``session/update`` of that session in order with the others (the
            session's update queue): a terminal is embedded in its tool call through it.
            None: straight through ``conn``.

    Returns:
        The client's text files when it offers both ``fs.readTextFile`` and
        ``fs.writeTextFile``; its terminals when it offers ``terminal``.
    """
    fs = getattr(client_capabilities, "fs", None)
    files = None
    if fs is not None and fs.read_text_file and fs.write_text_file:
        files = ClientTextFiles(conn, session_id)
    terminal = None
    if getattr(client_capabilities, "terminal", False):
        terminal = ClientTerminal(conn, session_id, updates)
    return ClientBackends(files, terminal)


__all__ = ["ClientBackends", "ClientTextFiles", "backends"]
