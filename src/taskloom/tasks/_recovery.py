"""What a starting runtime does about sessions that ended without closing.

After a crash the store still says ``running`` for tasks whose processes the orphan sweep has
just killed, and for detached commands that have since ended. Both are settled here so that
nobody waits on them; a resumed session is then notified of them like any other ending. Tasks
that outlive their session (detached remote agents) are left running: a resumed session takes
them up again. A session whose records the sweep could not clear (a kill not verified) is left
open, its tasks running: a task is said to be killed only once its processes are verified gone,
and the next start tries again.

Another process may be settling the same crashed session, or resuming it, at the same moment:
a session is ended here only by a compare-and-set on the dead owner it was seen with, and its
tasks are settled only by whoever won that (or by the runtime that claimed it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from typing import Any

from taskloom.errors import StoreError
from taskloom.process.identity import is_same_process
from taskloom.process.sweep import owner_alive, remove_owned
from taskloom.store import ProcessRow, SessionRow, Store, TagRow
from taskloom.tasks.claim import owner_gone
from taskloom.tasks.kinds import kind_of_record, outlives_session
from taskloom.tasks.types import TaskStatus

_LIVE = (TaskStatus.PENDING.value, TaskStatus.RUNNING.value)

log = logging.getLogger(__name__)


def settle_dead_sessions(
    store: Store, records: list[ProcessRow], now: float, taken: SessionRow | None = None
) -> None:
    """End the live-looking tasks of sessions whose process is gone.

    Args:
        store: The store.
        records: The process records as they were before the orphan sweep.
        now: The time to stamp as the tasks' end.
        taken: The record of the session this process has just claimed, as it was before:
            if its owner had crashed, its tasks are settled too (the session stays open).
    """
    detached = {r.task_id: r for r in records if r.detached}
    if taken is not None and taken.ended_at is None and owner_gone(taken):
        _end_live_tasks(store, taken.id, detached, now)

    def settle(data: dict[str, Any]) -> dict[str, Any] | None:
        if outlives_session(data):
            return None  # it goes on: the session's next process takes it up
        row = detached.get(data["id"])
        if row is None:  # its processes were the orphan sweep's to kill
            return _ended(data, now, TaskStatus.KILLED)
        return None if _still_runs(row) else _ended(data, now, TaskStatus.COMPLETED)

    unswept = _unswept_sessions(store)
    for session in store.open_sessions():
        if session.pid == os.getpid() or not owner_gone(session) or session.id in unswept:
            continue
        # Ending the session and settling its tasks is one transaction: a resume claiming the
        # session right after must find them settled (and notify them), not still running.
        # If someone claimed it first, the compare-and-set fails and its tasks are theirs.
        store.end_session_of(session, now, statuses=_LIVE, settle=settle)
    # Detached commands outlive their session; once one has ended, say so (exit status unknown:
    # nobody was left to collect it).
    for task_id, row in detached.items():
        if _still_runs(row):
            continue
        record = store.get_task(task_id)
        if record is not None and record["status"] in _LIVE:
            store.upsert_task(_ended(record, now, TaskStatus.COMPLETED))


def _unswept_sessions(store: Store) -> set[str]:
    """Sessions with records of a gone owner still there: the sweep could not verify them."""
    rows: list[ProcessRow | TagRow] = [*store.list_processes(), *store.list_tags()]
    return {
        r.session_id
        for r in rows
        if not (isinstance(r, ProcessRow) and r.detached) and not owner_alive(r)
    }


def _still_runs(row: ProcessRow) -> bool:
    return is_same_process(row.pid, row.pid_start, row.boot_id)


def _end_live_tasks(
    store: Store, session_id: str, detached: dict[str, ProcessRow], now: float
) -> None:
    for data in store.list_tasks(session_id, statuses=_LIVE):
        if data["id"] not in detached and not outlives_session(data):
            store.upsert_task(_ended(data, now, TaskStatus.KILLED))


def _ended(data: dict[str, Any], now: float, status: TaskStatus) -> dict[str, Any]:
    """The record ``data`` (changed in place) as ended with ``status`` at ``now``, unnotified."""
    data.update(status=status.value, end_time=now, notified=False)
    data.update(kind_of_record(data).settle_changes(status))
    return data


async def kill_lingering(
    store: Store, session_id: str, task_ids: Collection[str], grace: float
) -> None:
    """Kill what this session's processes left running (found by their tags), at its close.

    Args:
        store: The store holding the session's process and tag records.
        session_id: The closing session.
        task_ids: Its tasks whose processes are tagged with their ids (its commands): those
            tags are searched even if the store cannot be read (a full disk), so the session
            still leaves nothing behind.
        grace: Seconds between SIGTERM and SIGKILL.
    """
    from taskloom.process.kill import kill_tree  # at the close, not at the start

    try:
        rows = [r for r in store.list_processes() if r.session_id == session_id and not r.detached]
        tagged = store.list_tags(session_id)
    except StoreError as exc:
        log.warning("cannot read process records, killing by task tags only: %s", exc)
        await kill_tree(None, tag=set(task_ids), grace=grace)
        return
    if not rows and not tagged:
        return
    tags = {r.task_id for r in rows} | {t.tag for t in tagged}
    report = await kill_tree(None, tag=tags, grace=grace, holding=[t.path for t in tagged])
    if report.verified:
        for row in rows:
            store.remove_process(row.pid, row.pid_start)
        store.forget_tags([t for t in tagged if await remove_owned(t.path, grace)])
