"""Where an agent's shell stands between its calls: its working directory.

Each agent has one (the engine keeps it, as it keeps what the agent has read). A ``cd`` in one
Bash call holds for its next calls, and Read, Grep and Glob resolve relative paths against it;
the agent's other tools see it as ``ToolContext.cwd``. It starts in the agent's start directory
(the session's, the worktree it entered, a subagent's own) and goes back there:

- when the agent's place changes (EnterWorktree / ExitWorktree move the main thread);
- when a command leaves the directories the agent may use (its start directory's tree, its
  worktree and the directories added to it): ``Shell cwd was reset to DIR``;
- when the directory it stood in no longer exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


class WorkingDirectory:
    """One agent's shell directory.

    Attributes:
        start: Where its shell starts, and goes back to.
        current: Where its next command runs.
        roots: The directories (resolved) it may stand in: it may use their trees.
    """

    def __init__(self, start: Path, roots: Iterable[Path] = ()) -> None:
        """Stand at ``start``; may move within it and ``roots``."""
        self.start = start
        self.current = start
        self.roots: tuple[Path, ...] = ()
        self._note: str | None = None
        self.limit_to(roots)

    def follow(self, place: Path, roots: Iterable[Path] = ()) -> None:
        """The agent's place is ``place`` now (with ``roots``): the shell starts over there."""
        self.start = self.current = place
        self._note = None
        self.limit_to(roots)

    def limit_to(self, roots: Iterable[Path]) -> None:
        """Set the directories it may use (its start directory always among them)."""
        resolved = [self.start.resolve(), *(Path(r).resolve() for r in roots)]
        self.roots = tuple(dict.fromkeys(resolved))

    def here(self) -> Path:
        """Where the next call runs: the current directory, or the start if it is gone."""
        if self.current != self.start and not self.current.is_dir():
            self._note = self._reset(f"{self.current} no longer exists")
        return self.current

    def moved(self, new: str | None) -> str | None:
        """A command ended standing in ``new`` (``pwd -P``; None: unknown, nothing changes).

        Returns:
            A note for the command's result when the shell went back to its start directory.
        """
        if new is None:
            return None
        if not new:  # its directory was removed under it: pwd could not tell where it is
            return self._reset("the directory it stood in no longer exists")
        path = Path(new)
        if path == self.current.resolve():
            return None  # unchanged: keep the path as it was spelled
        if not path.is_dir():
            return self._reset(f"{path} no longer exists")
        if not _inside(path, self.roots):
            return self._reset(f"{path} is outside the directories this agent may use")
        self.current = path
        return None

    def take_note(self) -> str | None:
        """The reset not yet told (the directory vanished between calls), once."""
        note, self._note = self._note, None
        return note

    def _reset(self, why: str) -> str:
        self.current = self.start
        return f"Shell cwd was reset to {self.start} ({why})."


__all__ = ["WorkingDirectory"]
