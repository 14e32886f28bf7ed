"""The start-up orphan sweep: kill what crashed sessions left running.

A process record names the child (pid + start time), its group, its task tag and the session
process that owned it (pid + start time). A record is swept only when its owner is gone —
the owner pid is dead or now belongs to a younger process — and only processes that are
provably ours are signalled: the leader must match both pid and start time, other members must
carry the task's tag. A pid reused by an unrelated program is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from taskloom.process.kill import KillReport, kill_tree
from taskloom.process.spawn import process_start_time
from taskloom.store import ProcessRow, Store

_START_TOLERANCE_S = 0.01


def is_same_process(pid: int, start: float) -> bool:
    """Tell whether ``pid`` is alive and is the process that started at ``start``."""
    actual = process_start_time(pid)
    return actual is not None and abs(actual - start) < _START_TOLERANCE_S


@dataclass(frozen=True, slots=True)
class SweptProcess:
    """A record the sweep acted on, and what the kill found."""

    row: ProcessRow
    report: KillReport


async def sweep_orphans(store: Store, *, grace: float = 2.0) -> list[SweptProcess]:
    """Kill the process trees of every non-detached record whose owner process is gone.

    Records of live owners are left alone; swept records are deleted.
    """
    swept: list[SweptProcess] = []
    for row in store.list_processes():
        if row.detached or is_same_process(row.owner_pid, row.owner_start):
            continue
        report = await kill_tree(
            row.pgid, leader=row.pid, leader_start=row.pid_start, tag=row.task_id, grace=grace
        )
        store.remove_process(row.pid, row.pid_start)
        swept.append(SweptProcess(row, report))
    return swept
