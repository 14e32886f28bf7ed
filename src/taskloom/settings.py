"""Where taskloom keeps its state, and the few settings the runtime needs.

The layout (DESIGN §3.6)::

    $TASKLOOM_HOME/            (default ~/.taskloom)
        taskloom.db            the embedded store
        sessions/<id>/tasks/   task output files
        agents/  settings.json
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

#: Default cap on one task's output file (DESIGN §3.2).
DEFAULT_OUTPUT_CAP_BYTES = 5 * 1024**3


def taskloom_home() -> Path:
    """Return the state directory: ``$TASKLOOM_HOME`` or ``~/.taskloom``."""
    env = os.environ.get("TASKLOOM_HOME")
    return Path(env).expanduser() if env else Path.home() / ".taskloom"


def db_path(home: Path | None = None) -> Path:
    """Return the path of the store database."""
    return (home or taskloom_home()) / "taskloom.db"


def session_dir(session_id: str, home: Path | None = None) -> Path:
    """Return the directory of one session (transcript, subagents, tasks)."""
    return (home or taskloom_home()) / "sessions" / session_id


def tasks_dir(session_id: str, home: Path | None = None) -> Path:
    """Return the directory holding a session's task output files."""
    return session_dir(session_id, home) / "tasks"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700 and return it.

    An existing directory we own is tightened to 0700, so output written by one user is never
    readable by another through a loose directory. A symlink is refused (never followed, never
    chmod-ed): it could point anywhere.

    Raises:
        OSError: ``path`` (or a parent it had to create) is a symlink or not a directory.
    """
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made concurrently; checked below
            os.mkdir(directory, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, "refusing a symlinked directory", str(path))
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "not a directory", str(path))
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path
