"""Keep the last bytes a stdio MCP server writes to stderr, for error messages.

Servers log freely to stderr; passed through, that would scribble over our own output. A pipe
read by the event loop into a small ring buffer keeps memory bounded and leaves no file behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import TextIO


class StderrTail:
    """A pipe whose write end is the child's stderr; the read end keeps the last ``limit`` bytes.

    Must be created inside a running event loop.

    Attributes:
        writer: The write end, to pass as the child's stderr.
    """

    def __init__(self, limit: int = 8192) -> None:
        self._limit = limit
        self._buf = bytearray()
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self._fd: int | None = read_fd
        self.writer: TextIO = open(write_fd, "w", encoding="utf-8", closefd=True)  # noqa: SIM115
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(read_fd, self._read)

    def release_writer(self) -> None:
        """Close our copy of the write end once the child holds its own."""
        with contextlib.suppress(OSError):
            self.writer.close()

    def text(self, limit: int | None = None) -> str:
        """The last ``limit`` characters written (all kept when None), whitespace collapsed.

        Collapsed because the text goes into one-line status and error messages.
        """
        text = " ".join(self._buf.decode("utf-8", "replace").split())
        return text if limit is None else text[-limit:]

    def close(self) -> None:
        """Stop reading and close both ends (idempotent)."""
        self.release_writer()
        if self._fd is not None:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = None

    def _read(self) -> None:
        if self._fd is None:
            return
        try:
            chunk = os.read(self._fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # every writer is gone
            self._loop.remove_reader(self._fd)
            return
        self._buf += chunk
        del self._buf[: -self._limit]
