"""The only tools a dream is given: reading and replacing files of the memories it tidies.

A dream (:mod:`taskloom.agents.dream`) must never leave half a file, nor touch anything but
the memory directories it was given, whatever its model asks. So the guarantees are the
tools', not the model's:

- every path is resolved (symbolic links followed) and must lie inside one of the dream's
  memory directories; anything else is refused;
- MemoryWrite replaces a file atomically: the new content goes to a temporary file in the
  same directory, is flushed to disk, then renamed over the old one (:func:`replace_file`),
  so a dream killed at any moment — its task cancelled, its process killed — leaves each file
  as it was or as it was written, never in between; a temporary file a killed process left
  is removed at the next dream's start (:func:`sweep_leftovers`);
- an index (``MEMORY.md``) is written only within its caps
  (:data:`~taskloom.agents.memory.MAX_LINES` lines, :data:`~taskloom.agents.memory.MAX_CHARS`
  characters): what an agent is shown of it is then all of it;
- MemoryDelete needs a reason, never removes an index, and refuses a note its directory's
  index still names: an index must not point at nothing, and what a dream removes it must
  have justified;
- an existing file is rewritten or removed only once the dream has read it (MemoryRead) and
  while it is unchanged since: a dream never undoes a note an agent wrote meanwhile;
- every change is reported to the dream (:class:`MemoryScope`'s ``on_change``), which keeps
  the change list in its output — a removed note's text with it, so nothing is lost.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.agents.memory import MAX_CHARS, MAX_LINES
from taskloom.tools.base import Tool, ToolContext, ToolResult, tool_error

if TYPE_CHECKING:
    from taskloom.agents.inputs.dream_tools import (
        MemoryDeleteInput,
        MemoryListInput,
        MemoryReadInput,
        MemoryWriteInput,
    )

#: The suffix of a temporary file :func:`replace_file` writes before its rename.
TEMP_SUFFIX = ".dream-tmp"
#: Largest file a dream reads or writes (memory notes are short; this bounds a stray one).
MAX_FILE_BYTES = 512 * 1024
#: Most characters of a removed note kept in the change list.
KEPT_CHARS = 20_000
INDEX = "MEMORY.md"


def replace_file(path: Path, data: bytes) -> None:
    """Replace (or create) ``path`` with ``data`` atomically: temporary file, fsync, rename.

    An existing file keeps its permission bits. The directory is synced after the rename, so
    the new name survives a crash of the machine too.

    Raises:
        OSError: It could not be written (the old file is then untouched).
    """
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, os.stat(path).st_mode & 0o7777)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a directory be synced
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def sweep_leftovers(directories: Sequence[Path]) -> list[Path]:
    """Remove the temporary files a killed dream's process left in ``directories``."""
    removed = []
    for directory in directories:
        for leftover in directory.rglob(f".*{TEMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                leftover.unlink()
                removed.append(leftover)
    return removed


def index_problem(text: str) -> str | None:
    """Why ``text`` may not be an index (over its caps), or None."""
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_LINES:
        return f"an index may have at most {MAX_LINES} lines; this has {lines}"
    if len(text) > MAX_CHARS:
        return f"an index may have at most {MAX_CHARS} characters; this has {len(text)}"
    return None


@dataclass(frozen=True)
class Change:
    """One file a dream changed.

    Attributes:
        action: ``created``, ``rewrote`` or ``removed``.
        path: The file.
        reason: Why, as the dream said.
        before: Its size in bytes before (0: it did not exist).
        after: Its size in bytes after (0: removed).
        removed_text: A removed file's text (cut at :data:`KEPT_CHARS`), else ''.
    """

    action: str
    path: str
    reason: str
    before: int
    after: int
    removed_text: str = ""

    def line(self) -> str:
        """``- rewrote /m/MEMORY.md (812 -> 301 bytes): merged duplicates``."""
        return f"- {self.action} {self.path} ({self.before} -> {self.after} bytes): {self.reason}"


class MemoryScope:
    """The memory directories one dream may touch, and who hears of each change."""

    def __init__(self, directories: Sequence[Path], on_change: Callable[[Change], None]) -> None:
        """Allow ``directories`` (resolved now); tell ``on_change`` of each change made."""
        self.directories = tuple(d.resolve() for d in directories)
        self.on_change = on_change
        #: Each file as the dream last read or wrote it: its size and mtime (ns).
        self._seen: dict[Path, tuple[int, int]] = {}

    def saw(self, path: Path) -> None:
        """The dream read ``path`` (or wrote it) just now: it may change it until it changes."""
        stat = path.stat()
        self._seen[path] = (stat.st_size, stat.st_mtime_ns)

    def unseen(self, path: Path) -> str | None:
        """Why the dream may not replace or remove ``path`` now (None: it may).

        An existing file must have been read by the dream and be unchanged since: what it
        removes or rewrites, it has read (an agent that wrote a note meanwhile is not undone).
        """
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"it cannot be looked at: {exc.strerror or exc}"
        seen = self._seen.get(path)
        if seen is None:
            return "read it first (MemoryRead)"
        if seen != (stat.st_size, stat.st_mtime_ns):
            return "it changed since it was read; read it again"
        return None

    def resolve(self, raw: str) -> Path:
        """The file ``raw`` names, inside one of the directories.

        Raises:
            ValueError: It is relative, outside them (links followed), or a directory.
        """
        if not os.path.isabs(raw):
            raise ValueError(f"{raw!r} is not an absolute path")
        path = Path(os.path.realpath(raw))
        if not any(path.is_relative_to(d) and path != d for d in self.directories):
            allowed = ", ".join(str(d) for d in self.directories)
            raise ValueError(f"{raw} is outside the memory directories ({allowed})")
        if path.is_dir():
            raise ValueError(f"{raw} is a directory")
        if path.name.endswith(TEMP_SUFFIX):
            raise ValueError(f"{raw} is a temporary file")
        return path

    def root_of(self, path: Path) -> Path:
        """The memory directory ``path`` lies in (the deepest, if they nest)."""
        return max(
            (d for d in self.directories if path.is_relative_to(d)), key=lambda d: len(d.parts)
        )

    def is_index(self, path: Path) -> bool:
        """Whether ``path`` is the index of its memory directory."""
        return path == self.root_of(path) / INDEX

    def listing(self) -> str:
        """Every file of the directories, with its size and lines."""
        lines = []
        for directory in self.directories:
            lines.append(f"{directory}/")
            files = sorted(p for p in directory.rglob("*") if p.is_file())
            for path in files:
                if path.name.endswith(TEMP_SUFFIX):
                    continue
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    lines.append(f"  {path.relative_to(directory)}: unreadable ({exc.strerror})")
                    continue
                count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
                lines.append(f"  {path.relative_to(directory)}: {len(data)} bytes, {count} lines")
            if not files:
                lines.append("  (empty)")
        return "\n".join(lines)


class MemoryList(Tool["MemoryListInput"]):
    """Lists the files of the memory directories."""

    name = "MemoryList"
    description = "Lists every file of the memory directories you tidy, with sizes and lines."
    input_model = "taskloom.agents.inputs.dream_tools:MemoryListInput"
    kind = "read"
    concurrency_safe = True

    def __init__(self, scope: MemoryScope) -> None:
        """List ``scope``'s directories."""
        self.scope = scope

    async def call(self, params: MemoryListInput, ctx: ToolContext) -> ToolResult:
        """The listing."""
        return ToolResult(self.scope.listing())


class MemoryRead(Tool["MemoryReadInput"]):
    """Reads one file of the memory directories."""

    name = "MemoryRead"
    description = "Reads a whole file of the memory directories (absolute path)."
    input_model = "taskloom.agents.inputs.dream_tools:MemoryReadInput"
    kind = "read"
    concurrency_safe = True

    def __init__(self, scope: MemoryScope) -> None:
        """Read inside ``scope`` only."""
        self.scope = scope

    async def call(self, params: MemoryReadInput, ctx: ToolContext) -> ToolResult:
        """The file's text (undecodable bytes replaced)."""
        try:
            path = self.scope.resolve(params.file_path)
            if path.stat().st_size > MAX_FILE_BYTES:
                return tool_error(f"{path} is over {MAX_FILE_BYTES} bytes; leave it as it is.")
            self.scope.saw(path)  # before reading: a change after this is seen as one
            text = path.read_bytes().decode("utf-8", errors="replace")
        except ValueError as exc:
            return tool_error(str(exc))
        except FileNotFoundError:
            return tool_error(f"{params.file_path} does not exist.")
        except OSError as exc:
            return tool_error(f"Cannot read {params.file_path}: {exc.strerror or exc}")
        return ToolResult(text or "(empty file)")


class MemoryWrite(Tool["MemoryWriteInput"]):
    """Creates or replaces one file of the memory directories, atomically."""

    name = "MemoryWrite"
    description = (
        "Creates or replaces a whole file of the memory directories (absolute path), "
        "atomically. An index (MEMORY.md) must stay within "
        f"{MAX_LINES} lines and {MAX_CHARS} characters. Give the reason for the change."
    )
    input_model = "taskloom.agents.inputs.dream_tools:MemoryWriteInput"
    kind = "edit"

    def __init__(self, scope: MemoryScope) -> None:
        """Write inside ``scope`` only."""
        self.scope = scope

    async def call(self, params: MemoryWriteInput, ctx: ToolContext) -> ToolResult:
        """Replace the file (nothing is written if it is refused)."""
        reason = " ".join(params.reason.split())
        data = params.content.encode("utf-8")
        try:
            path = self.scope.resolve(params.file_path)
        except ValueError as exc:
            return tool_error(str(exc))
        problem = index_problem(params.content) if self.scope.is_index(path) else None
        if not reason:
            problem = "give the reason for the change"
        elif len(data) > MAX_FILE_BYTES:
            problem = f"a memory file may have at most {MAX_FILE_BYTES} bytes"
        problem = problem or self.scope.unseen(path)
        if problem is not None:
            return tool_error(f"{path} was not written: {problem}.")
        try:
            before = path.read_bytes() if path.exists() else None
            if before == data:
                return ToolResult(f"{path} already holds that content: nothing changed.")
            path.parent.mkdir(parents=True, exist_ok=True)
            replace_file(path, data)
            self.scope.saw(path)
        except OSError as exc:
            return tool_error(f"Cannot write {path}: {exc.strerror or exc}")
        action = "created" if before is None else "rewrote"
        self.scope.on_change(Change(action, str(path), reason, len(before or b""), len(data)))
        return ToolResult(f"{path}: {action} ({len(data)} bytes).")


class MemoryDelete(Tool["MemoryDeleteInput"]):
    """Removes one note of the memory directories, with the reason."""

    name = "MemoryDelete"
    description = (
        "Removes a note of the memory directories (absolute path), giving why it may go: "
        "stale (say what shows it) or merged into another note (say which). Never an index; "
        "a note its directory's MEMORY.md still names must first be taken out of the index."
    )
    input_model = "taskloom.agents.inputs.dream_tools:MemoryDeleteInput"
    kind = "edit"

    def __init__(self, scope: MemoryScope) -> None:
        """Remove inside ``scope`` only."""
        self.scope = scope

    async def call(self, params: MemoryDeleteInput, ctx: ToolContext) -> ToolResult:
        """Remove the note (nothing is removed if it is refused)."""
        reason = " ".join(params.reason.split())
        try:
            path = self.scope.resolve(params.file_path)
            problem = self._problem(path, reason)
            if problem is not None:
                return tool_error(f"{path} was not removed: {problem}.")
            data = path.read_bytes()
            path.unlink()
        except ValueError as exc:
            return tool_error(str(exc))
        except FileNotFoundError:
            return tool_error(f"{params.file_path} does not exist.")
        except OSError as exc:
            return tool_error(f"Cannot remove {params.file_path}: {exc.strerror or exc}")
        text = data.decode("utf-8", errors="replace")[:KEPT_CHARS]
        self.scope.on_change(Change("removed", str(path), reason, len(data), 0, text))
        return ToolResult(f"{path}: removed.")

    def _problem(self, path: Path, reason: str) -> str | None:
        if not reason:
            return "give the reason it may go"
        if self.scope.is_index(path):
            return "an index is never removed (rewrite it instead)"
        unseen = self.scope.unseen(path)
        if unseen is not None:
            return unseen
        index = self.scope.root_of(path) / INDEX
        try:
            listed = index.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return None
        relative = str(path.relative_to(self.scope.root_of(path)))
        if relative in listed or path.name in listed:
            return f"{index} still names it; take it out of the index first"
        return None


def memory_tools(scope: MemoryScope) -> list[Tool[Any]]:
    """The tools of a dream over ``scope``: list, read, write, remove."""
    return [
        MemoryList(scope),
        MemoryRead(scope),
        MemoryWrite(scope),
        MemoryDelete(scope),
    ]


__all__ = [
    "TEMP_SUFFIX",
    "Change",
    "MemoryDelete",
    "MemoryList",
    "MemoryRead",
    "MemoryScope",
    "MemoryWrite",
    "index_problem",
    "memory_tools",
    "replace_file",
    "sweep_leftovers",
]
