"""The ACP wire's lines, read in bounded pieces: no line, however long, ends the session.

asyncio's ``readline`` refuses a line over its buffer limit (64 KiB unless told) by raising,
which would end the connection; a prompt with a screenshot or the editor's answer to a read
of a large file is more than that. :class:`BoundedLines` reads in chunks and holds at most
:data:`MAX_LINE_BYTES` of one line: a longer one is read past, never held whole, and given as
an :class:`Overlong` that says how long it was and which JSON-RPC message it seems to be (its
``id``, whether it had a ``method``), so the transport can answer it instead of hanging a
request.
"""

from __future__ import annotations

import asyncio
import json
import re

from taskloom._dataclass import dataclass

#: Longest line held, in bytes: a prompt of several images of the API's 5 MB each, or the
#: text of a large file the editor sends back.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: How much of an over-long line is kept to find out which message it was.
_HEAD_BYTES = 64 * 1024
_CHUNK_BYTES = 256 * 1024

# The message's own ``id`` and ``method`` come before its ``params`` or ``result`` in what
# the client libraries write; a key further on may belong to something nested.
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,256}")')
_BODY = re.compile(rb'"(?:params|result|error)"\s*:')
_METHOD = re.compile(rb'"method"\s*:')


@dataclass(frozen=True, slots=True)
class Overlong:
    """A line over :data:`MAX_LINE_BYTES`, read past.

    Attributes:
        size: Its length in bytes.
        request_id: The ``id`` found in its head (None: none found).
        is_request: Whether its head names a ``method`` (a request or notification, not an
            answer to one of ours).
    """

    size: int
    request_id: int | str | None
    is_request: bool

    @classmethod
    def of(cls, head: bytes, size: int) -> Overlong:
        """What can be told of a line from its first bytes."""
        body = _BODY.search(head)
        top = head[: body.start()] if body else head
        found = _ID.search(top)
        request_id: int | str | None = None
        if found is not None:
            request_id = json.loads(found.group(1))
        return cls(size, request_id, _METHOD.search(top) is not None)


class BoundedLines:
    """The lines of ``reader``, each at most :data:`MAX_LINE_BYTES` (an :class:`Overlong` else)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int = MAX_LINE_BYTES) -> None:
        """Read from ``reader``; lines over ``limit`` bytes are read past."""
        self._reader = reader
        self._limit = limit
        self._buffer = bytearray()
        self._ended = False

    async def next(self) -> bytes | Overlong | None:
        """The next line (with its newline, unless the input ended first); None at the end."""
        searched = 0
        while True:
            end = self._buffer.find(b"\n", searched)
            if end >= self._limit:  # a whole line came in one read: dropped all the same
                over = Overlong.of(bytes(self._buffer[:_HEAD_BYTES]), end + 1)
                del self._buffer[: end + 1]
                return over
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > self._limit:
                return await self._read_past()
            searched = len(self._buffer)
            if not await self._fill():
                line = bytes(self._buffer)
                self._buffer.clear()
                return line or None

    async def _fill(self) -> bool:
        """Read one more chunk into the buffer; False at the end of the input."""
        if self._ended:
            return False
        chunk = await self._reader.read(_CHUNK_BYTES)
        if not chunk:
            self._ended = True
            return False
        self._buffer += chunk
        return True

    async def _read_past(self) -> Overlong:
        """Drop the rest of an over-long line, keeping its head; what it was."""
        head = bytes(self._buffer[:_HEAD_BYTES])
        size = len(self._buffer)
        self._buffer.clear()
        while await self._fill():
            end = self._buffer.find(b"\n")
            if end >= 0:
                size += end + 1
                del self._buffer[: end + 1]
                break
            size += len(self._buffer)
            self._buffer.clear()
        return Overlong.of(head, size)


__all__ = ["MAX_LINE_BYTES", "BoundedLines", "Overlong"]
