"""Scratch directories: the one place a read-only agent's sandboxed commands may write.

Each owner (a read-only agent) gets one, made when its first sandboxed command starts and
given to every command of it as ``TMPDIR``, so a helper script written by one command can be
run by the next. It lives in the system's temporary directory (private: mode 0700), which
the read-only text judge counts as scratch too, and is removed with everything in it when its
owner closes (:meth:`TaskRuntime.close_owner <taskloom.tasks.runtime.TaskRuntime.close_owner>`)
or the session does.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path


class ScratchDirs:
    """The scratch directories of a session's owners."""

    def __init__(self) -> None:
        """No directory yet: each is made when first asked for."""
        self._dirs: dict[str, Path] = {}

    def of(self, owner: str) -> Path:
        """``owner``'s scratch directory, made now if it has none (or it was removed).

        Raises:
            OSError: It could not be made.
        """
        directory = self._dirs.get(owner)
        if directory is None or not directory.is_dir():
            label = re.sub(r"[^A-Za-z0-9_-]", "_", owner)[:40]
            directory = Path(tempfile.mkdtemp(prefix=f"taskloom-scratch-{label}-")).resolve()
            self._dirs[owner] = directory
        return directory

    def remove(self, owner: str) -> None:
        """Remove ``owner``'s scratch directory and what is in it (if it has one)."""
        directory = self._dirs.pop(owner, None)
        if directory is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(directory)

    def remove_all(self) -> None:
        """Remove every scratch directory (the session ends)."""
        for owner in list(self._dirs):
            self.remove(owner)


__all__ = ["ScratchDirs"]
