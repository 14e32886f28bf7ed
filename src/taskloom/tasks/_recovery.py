"""What a starting runtime does about sessions that ended without closing.

After a crash the store still says ``running`` for tasks whose processes the orphan sweep has
just killed, and for detached commands that have since ended. Both are settled here so that
nobody waits on them; a resumed session is then notified of them like any other ending.
"""

from __future__ import annotations

import os

from taskloom.process.identity import is_same_process
from taskloom.store import ProcessRow, Store
from taskloom.tasks.types import TaskStatus, TaskType

_LIVE = (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)


def settle_dead_sessions(store: Store, records: list[ProcessRow], now: float) -> None:
    """End the live-looking tasks of sessions whose process is gone.

    Args:
        store: The store.
        records: The process records as they were before the orphan sweep.
        now: The time to stamp as the tasks' end.
    """
    detached = {r.task_id: r for r in records if r.detached}
    for session in store.open_sessions():
        if session.pid == os.getpid() or is_same_process(
            session.pid, session.pid_start, session.boot_id
        ):
            continue
        for data in store.list_tasks(session.id, statuses=_LIVE):
            row = detached.get(data["id"])
            if row is None:
                _end(store, data, now, TaskStatus.KILLED)
        store.end_session(session.id, now)
    # Detached commands outlive their session; once one has ended, say so (exit status unknown:
    # nobody was left to collect it).
    for task_id, row in detached.items():
        if is_same_process(row.pid, row.pid_start, row.boot_id):
            continue
        record = store.get_task(task_id)
        if record is not None and record["status"] in _LIVE:
            _end(store, record, now, TaskStatus.COMPLETED)


def _end(store: Store, data: dict[str, object], now: float, status: TaskStatus) -> None:
    data.update(status=status.value, end_time=now, notified=False)
    if data["type"] == TaskType.LOCAL_BASH.value:
        data["interrupted"] = status == TaskStatus.KILLED
        data["pid"] = None
    store.upsert_task(data)
