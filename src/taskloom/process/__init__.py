"""Child processes: spawn in a new process group, verified tree kill, orphan sweep."""

from __future__ import annotations

from typing import TYPE_CHECKING

from taskloom._lazy import lazy_exports
from taskloom.process.identity import boot_id, is_same_process, process_start_time
from taskloom.process.spawn import SESSION_ENV, TASK_ENV, Child, spawn_shell

if TYPE_CHECKING:
    from taskloom.process.kill import KillReport, kill_tree
    from taskloom.process.sweep import sweep_orphans

__all__ = [
    "SESSION_ENV",
    "TASK_ENV",
    "Child",
    "KillReport",
    "boot_id",
    "is_same_process",
    "kill_tree",
    "process_start_time",
    "spawn_shell",
    "sweep_orphans",
]


# The kill and the sweep load when asked for: importing any taskloom.process module runs this
# package first, and a start with nothing to kill needs neither (issue 34).
__getattr__ = lazy_exports(
    __name__, {"KillReport": "kill", "kill_tree": "kill", "sweep_orphans": "sweep"}
)
