"""Child processes: spawn in a new process group, verified tree kill, orphan sweep."""

from taskloom.process.identity import boot_id, is_same_process, process_start_time
from taskloom.process.kill import KillReport, kill_tree
from taskloom.process.spawn import SESSION_ENV, TASK_ENV, Child, spawn_shell
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
