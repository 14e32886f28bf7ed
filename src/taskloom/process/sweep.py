"""The start-up orphan sweep: kill what crashed sessions left running.

A process record names the child (pid + start time + boot id), its group, its task tag and the
session process that owned it (pid + start time). A tag record names only a tag, recorded
before anything carrying it started, and its owner. A record is swept only when its owner is
gone — the owner pid is dead or now belongs to another process — and only processes that are
provably ours are signalled: the leader must match pid, start time and boot, other members must
carry the record's tag. A pid reused by an unrelated program is never touched.

A tag record may own a directory (a local Ray's temporary directory, a remote agent's scratch
checkout): what holds a file in it is killed with what carries the tag (a process may have
overwritten its environment: Ray's set their titles over it), and it is removed once nothing of
them is left. Such a directory may hold the
store of a session nested in it (a remote agent's worker keeps one in its scratch checkout,
recording its own commands): that store is swept first, its owner being gone by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskloom._dataclass import dataclass
from taskloom.errors import StoreError
from taskloom.process.identity import is_same_process
from taskloom.store import ProcessRow, Store, TagRow

if TYPE_CHECKING:
    from taskloom.process.kill import KillReport

#: Where a session that works inside an owned directory keeps its state: a remote agent's
#: worker runs with ``TASKLOOM_HOME`` there, in its scratch checkout.
NESTED_HOME = "home"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweptProcess:
    """A record the sweep acted on (a process or a tag record), and what the kill found."""

    row: ProcessRow | TagRow
    report: KillReport


def leader_alive(row: ProcessRow) -> bool:
    """Whether the recorded group leader is still the process we started."""
    return is_same_process(row.pid, row.pid_start, row.boot_id)


def owner_alive(row: ProcessRow | TagRow) -> bool:
    """Whether the session process that owns the record is still running."""
    return is_same_process(row.owner_pid, row.owner_start, row.boot_id)


async def sweep_orphans(
    store: Store, *, grace: float = 2.0, owner_pid: int | None = None
) -> list[SweptProcess]:
    """Kill the process trees of every non-detached record whose owner process is gone.

    With ``owner_pid``, only the records that process owned (a teammate's process that
    crashed: what it started is swept at once, not at the next start). Records of live owners
    are left alone. A swept record is deleted once its kill is verified
    (one with survivors stays, to be tried again); so is a detached record whose process has
    ended. Trees whose leader still runs are killed through their group as well; everything
    else that carries a swept tag, process record's or tag record's, is found in one scan.
    """
    swept: list[SweptProcess] = []
    orphaned: list[ProcessRow] = []
    for row in store.list_processes():
        if owner_pid is not None and row.owner_pid != owner_pid:
            continue
        if row.detached:
            if not leader_alive(row):
                store.remove_process(row.pid, row.pid_start)
            continue
        if not owner_alive(row):
            orphaned.append(row)
    orphaned_tags = [
        t
        for t in store.list_tags()
        if not owner_alive(t) and (owner_pid is None or t.owner_pid == owner_pid)
    ]
    if not orphaned and not orphaned_tags:
        return swept  # the usual start: the kill is not even loaded
    from taskloom.process.kill import kill_tree

    led = [r for r in orphaned if leader_alive(r)]
    reports = await asyncio.gather(
        *(
            kill_tree(r.pgid, leader=r.pid, leader_start=r.pid_start, tag=r.task_id, grace=grace)
            for r in led
        )
    )
    by_row = {(r.pid, r.pid_start): rep for r, rep in zip(led, reports, strict=True)}
    tags = {r.task_id for r in orphaned} | {t.tag for t in orphaned_tags}
    owned = [t.path for t in orphaned_tags if t.path]
    rest = await kill_tree(None, tag=tags, grace=grace, holding=owned)
    for row in orphaned:
        report = by_row.get((row.pid, row.pid_start), rest)
        if report.verified and rest.verified:
            store.remove_process(row.pid, row.pid_start)
        swept.append(SweptProcess(row, report))
    if rest.verified:
        store.forget_tags([t for t in orphaned_tags if await remove_owned(t.path, grace)])
    swept.extend(SweptProcess(t, rest) for t in orphaned_tags)
    return swept


async def reap_tags(store: Store, rows: list[TagRow], *, grace: float) -> bool:
    """Kill what carries these tags (verified), remove the directories they own, forget them.

    A record whose processes or directory are not verified gone stays, for the sweep to try
    again. Returns whether every record was forgotten.
    """
    if not rows:
        return True
    from taskloom.process.kill import kill_tree

    owned = [r.path for r in rows if r.path]
    report = await kill_tree(None, tag={r.tag for r in rows}, grace=grace, holding=owned)
    if not report.verified:
        return False
    done = [r for r in rows if await remove_owned(r.path, grace)]
    if done and not store.closed:
        store.forget_tags(done)
    return len(done) == len(rows)


async def remove_owned(path: str, grace: float) -> bool:
    """Remove a directory a tag record owns ('' for none); whether it is gone.

    The store of a session nested in it (:data:`NESTED_HOME`) is swept first: what that
    session recorded and left running is killed, or the directory stays (its records with it).
    A directory a command made read-only is made writable to be emptied.
    """
    if not path:
        return True
    root = Path(path)
    db = root / NESTED_HOME / "taskloom.db"
    if db.is_file() and not await sweep_store(db, grace=grace):
        return False
    shutil.rmtree(root, onerror=_writable_then_retry)
    return not root.exists()


def _writable_then_retry(func: Any, path: str, exc_info: Any) -> None:
    """``rmtree``'s error handler: make the parent directory writable and try once more."""
    parent = os.path.dirname(path)
    with contextlib.suppress(OSError):
        os.chmod(parent, 0o700)
        func(path)


async def sweep_store(db: Path, *, grace: float) -> bool:
    """Sweep the orphans recorded in the store at ``db``; whether it holds no record left.

    A record left is one whose kill was not verified, or whose owner still runs. A store that
    cannot be opened (busy, refused) is reported and counts as not swept: what it records may
    still run, so the directory holding it must stay for a later sweep.
    """
    try:
        store = Store(db, reserve_bytes=0)
    except (StoreError, OSError) as exc:
        log.warning("cannot sweep the store %s: %s", db, exc)
        return False
    try:
        await sweep_orphans(store, grace=grace)
        left = [r for r in store.list_processes() if not r.detached] + store.list_tags()
    finally:
        store.close()
    return not left
