"""Scratch directories: the one place a read-only agent's sandboxed commands may write.

Each owner (a read-only agent) gets one, made when its first sandboxed command starts and
given to every command of it as ``TMPDIR``, so a helper script written by one command can be
run by the next. It lives in the system's temporary directory (private: mode 0700), which
the read-only text judge counts as scratch too, and is removed with everything in it when its
owner closes (:meth:`TaskRuntime.close_owner <taskloom.tasks.runtime.TaskRuntime.close_owner>`)
or the session does. A process killed before it could remove its directories leaves them:
their names carry its pid, and the next session that makes one removes those of processes
that are gone (:func:`sweep_orphans`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

_PREFIX = "taskloom-scratch-"
_ORPHAN = re.compile(re.escape(_PREFIX) + r"(\d+)-")


def sweep_orphans(root: Path | None = None) -> list[Path]:
    """Remove the scratch directories of processes that are gone; those removed.

    A directory whose process still runs (or whose pid another process now has) is kept.
    """
    removed = []
    with contextlib.suppress(OSError):
        for entry in Path(root or tempfile.gettempdir()).iterdir():
            found = _ORPHAN.match(entry.name)
            if found is None or _alive(int(found.group(1))) or not entry.is_dir():
                continue
            with contextlib.suppress(OSError):
                shutil.rmtree(entry)
                removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


class ScratchDirs:
    """The scratch directories of a session's owners."""

    def __init__(self) -> None:
        """No directory yet: each is made when first asked for."""
        self._dirs: dict[str, Path] = {}
        self._swept = False

    def of(self, owner: str) -> Path:
        """``owner``'s scratch directory, made now if it has none (or it was removed).

        Raises:
            OSError: It could not be made.
        """
        directory = self._dirs.get(owner)
        if directory is None or not directory.is_dir():
            if not self._swept:
                self._swept = True
                sweep_orphans()
            label = re.sub(r"[^A-Za-z0-9_-]", "_", owner)[:40]
            prefix = f"{_PREFIX}{os.getpid()}-{label}-"
            directory = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
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


__all__ = ["ScratchDirs", "sweep_orphans"]
