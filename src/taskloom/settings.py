"""Where taskloom keeps its state, and the few settings the runtime needs.

The layout (DESIGN §3.6)::

    $TASKLOOM_HOME/            (default ~/.taskloom)
        taskloom.db            the embedded store
        sessions/<id>/tasks/   task output files
        agents/  settings.json
"""

from __future__ import annotations

import os
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
    """Create ``path`` and its parents with mode 0700 and return it.

    Existing directories are tightened to 0700 when we own them, so output written by one user
    is never readable by another through a loose parent.
    """
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid == os.getuid() and st.st_mode & 0o077:
        path.chmod(0o700)
    return path
