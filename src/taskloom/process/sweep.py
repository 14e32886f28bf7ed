"""The start-up orphan sweep: kill what crashed sessions left running.

A process record names the child (pid + start time), its group, its task tag and the session
process that owned it (pid + start time). A record is swept only when its owner is gone —
the owner pid is dead or now belongs to a younger process — and only processes that are
provably ours are signalled: the leader must match both pid and start time, other members must
carry the task's tag. A pid reused by an unrelated program is never touched.
"""

from __future__ import annotations

import asyncio
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

    Records of live owners are left alone; swept records are deleted, and so are detached
    records whose process has ended. Trees whose leader still runs are killed through their
    group as well; everything else that carries a swept tag is found in one scan.
    """
    swept: list[SweptProcess] = []
    orphaned: list[ProcessRow] = []
    for row in store.list_processes():
        if row.detached:
            if not is_same_process(row.pid, row.pid_start):
                store.remove_process(row.pid, row.pid_start)
            continue
        if not is_same_process(row.owner_pid, row.owner_start):
            orphaned.append(row)
    if not orphaned:
        return swept
    led = [r for r in orphaned if is_same_process(r.pid, r.pid_start)]
    reports = await asyncio.gather(
        *(
            kill_tree(r.pgid, leader=r.pid, leader_start=r.pid_start, tag=r.task_id, grace=grace)
            for r in led
        )
    )
    by_row = {(r.pid, r.pid_start): rep for r, rep in zip(led, reports, strict=True)}
    rest = await kill_tree(None, tag={r.task_id for r in orphaned}, grace=grace)
    for row in orphaned:
        store.remove_process(row.pid, row.pid_start)
        swept.append(SweptProcess(row, by_row.get((row.pid, row.pid_start), rest)))
    return swept
