"""Where the file tools' text and Bash's foreground commands go, when not to this machine.

By default Read, Write and Edit use the local disk and Bash runs a local shell task. A session
driven by an editor (ACP) may hand them to the editor instead, through two small protocols
set on :class:`~taskloom.engine_config.EngineConfig` (from
:class:`~taskloom.options.Options`) and seen by tools as ``ToolContext.text_files`` and
``ToolContext.commands``:

- :class:`TextFiles`: text files as the editor holds them, unsaved buffers included. The
  tools keep their own semantics (read before write, line numbering, bounds, the results the
  model sees); only where the text comes from and goes to changes. What they record as read
  is the text's :func:`text_version` instead of its mtime: an editor's buffer has none.
- :class:`CommandRunner`: a foreground command run where the user sees it (an editor's
  terminal), reported as a local command's end is (exit code, output, timeout).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from taskloom._dataclass import dataclass


class TextFiles(Protocol):
    """Text files held by someone else (an editor), by absolute path."""

    def serves(self, path: str) -> bool:
        """Whether text at ``path`` goes through here (False: the local disk)."""
        ...

    async def read(self, path: str) -> str | None:
        """The whole text at ``path``; None when there is no such file.

        Raises:
            OSError: It cannot be read (the message says why).
        """
        ...

    async def write(self, path: str, text: str) -> None:
        """Replace (or create) the text at ``path``.

        Raises:
            OSError: It cannot be written (the message says why).
        """
        ...


def text_version(text: str) -> int:
    """What read-before-write records for a served file: a digest of its text.

    It plays the part of the mtime for files on disk: "modified since read" is a different
    text now.
    """
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True, slots=True)
class CommandRequest:
    """A foreground command to run.

    Attributes:
        script: The bash script (the command, with any prelude of ours).
        command: The command as the model wrote it (what a user is shown).
        cwd: Where it runs.
        env: Its environment, whole.
        timeout: Seconds before it is killed.
        tool_use_id: The ``tool_use`` block that asked for it.
        output_limit: Bytes of output worth keeping (its start is dropped past it).
    """

    script: str
    command: str
    cwd: Path
    env: Mapping[str, str]
    timeout: float
    tool_use_id: str
    output_limit: int


@dataclass(frozen=True, slots=True)
class CommandEnd:
    """How a command run by a :class:`CommandRunner` ended.

    Attributes:
        output: Its output (stdout and stderr together, as they came).
        exit_code: Its exit status (128 + N: ended by signal N).
        timed_out: It was killed at its timeout.
        cut: The start of its output was dropped (over the request's ``output_limit``).
        terminal_id: Where it ran, for a front end to show (an editor's terminal id).
    """

    output: str
    exit_code: int
    timed_out: bool = False
    cut: bool = False
    terminal_id: str | None = None


class CommandRunner(Protocol):
    """Runs foreground commands somewhere else (an editor's terminal)."""

    async def run(self, request: CommandRequest) -> CommandEnd:
        """Run the command to its end, or kill it at its timeout; a cancel kills it too.

        Raises:
            OSError: It could not be run (the message says why).
        """
        ...


__all__ = ["CommandEnd", "CommandRequest", "CommandRunner", "TextFiles", "text_version"]
