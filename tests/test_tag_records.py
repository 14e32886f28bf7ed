"""Tag records: tags recorded for the orphan sweep have a table of their own, not fake processes.

Real SQLite, real processes: what the store says is read through a second connection, and the
sweep is shown to stop real processes that carry a recorded tag.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from helpers import alive, wait_until
from taskloom.process.identity import boot_id, process_start_time
from taskloom.process.registry import ProcessRecorder, recorded_tag
from taskloom.process.spawn import TASK_ENV
from taskloom.process.sweep import sweep_orphans
from taskloom.settings import db_path
from taskloom.store import ProcessRow, Store, TagRow
from taskloom.store.schema import MIGRATIONS, SCHEMA_VERSION
from taskloom.tasks.runtime import TaskRuntime


def seen_elsewhere(path: Path) -> tuple[list[tuple[str, str]], int]:
    """The (tag, session) pairs another connection reads, and how many process rows."""
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
        tags = conn.execute("SELECT tag, session_id FROM tags ORDER BY id").fetchall()
        processes = conn.execute("SELECT count(*) FROM processes").fetchone()[0]
    return [(t, s) for t, s in tags], processes


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=10)
    return gone.pid


def unique(tag: str) -> str:
    """``tag`` made this run's own: a sweep kills whatever on the machine carries a dead
    owner's tag, so a fixed one would reach a concurrent run's (``.ci/twice``) processes."""
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def tagged_sleep(tag: str) -> subprocess.Popen[bytes]:
    """A ``sleep`` carrying ``tag``, in a session of its own: only its tag leads to it."""
    return subprocess.Popen(
        ["sleep", "300"], env={**os.environ, TASK_ENV: tag}, start_new_session=True
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


async def test_tags_are_committed_before_record_tags_returns_and_forgotten_one_by_one(
    store: Store,
) -> None:
    # Inside a running loop ordinary writes wait for the group commit; tags must not.
    first = store.record_tags("s1", ["mcp-a", "mcp-b"], owner_pid=10, owner_start=1.5, when=7.0)
    again = store.record_tags("s1", ["mcp-a"], owner_pid=10, owner_start=1.5, when=8.0)
    other = store.record_tags("s2", ["hook-c"], owner_pid=11, owner_start=2.5, boot_id="b")
    assert seen_elsewhere(store.path) == (
        [("mcp-a", "s1"), ("mcp-b", "s1"), ("mcp-a", "s1"), ("hook-c", "s2")],
        0,  # none of them is a process row
    )
    assert first == [
        TagRow(first[0].id, "mcp-a", "s1", 10, 1.5, "", 7.0),
        TagRow(first[1].id, "mcp-b", "s1", 10, 1.5, "", 7.0),
    ]
    # The same tag recorded twice is two records: forgetting one keeps the other.
    assert len({r.id for r in [*first, *again, *other]}) == 4
    assert store.list_tags() == [*first, *again, *other]
    assert store.list_tags("s1") == [*first, *again]
    assert store.list_tags("s2") == other
    assert store.record_tags("s1", [], owner_pid=10, owner_start=1.5) == []

    store.forget_tags(first)
    assert store.list_tags() == [*again, *other]
    store.flush()
    assert seen_elsewhere(store.path) == ([("mcp-a", "s1"), ("hook-c", "s2")], 0)
    store.forget_tags([*again, *other, *first])  # already forgotten ones are no matter
    assert store.list_tags() == []


async def test_ids_are_never_reused_so_a_stale_record_forgets_nothing_else(store: Store) -> None:
    [old] = store.record_tags("s1", ["git-1"], owner_pid=10, owner_start=1.5)
    store.forget_tags([old])  # e.g. the sweep of another session reaped it
    [new] = store.record_tags("s1", ["git-2"], owner_pid=10, owner_start=1.5)
    assert new.id != old.id
    store.forget_tags([old])  # the first holder forgets its record late
    assert store.list_tags() == [new]


async def test_a_recorded_tag_is_a_tag_record_while_the_block_runs_and_gone_after(
    store: Store,
) -> None:
    recorder = ProcessRecorder(store, "s1")
    with recorded_tag("hook", recorder) as record:
        assert record.tag.startswith("hook-")
        assert seen_elsewhere(store.path) == ([(record.tag, "s1")], 0)
        [row] = record.rows
        me = os.getpid()
        assert (row.owner_pid, row.owner_start, row.boot_id) == (
            me,
            process_start_time(me),
            boot_id(),
        )
    assert store.list_tags() == []
    with recorded_tag("hook", recorder) as kept:
        kept.keep()  # survivors: the next sweep must try again
    assert [r.tag for r in store.list_tags()] == [kept.tag]
    assert store.list_processes() == []


async def test_the_sweep_stops_what_carries_a_dead_owners_tag_and_leaves_live_owners_alone(
    store: Store,
) -> None:
    orphan_tag, kept_tag = unique("mcp-orphan"), unique("mcp-live")
    orphan, kept = tagged_sleep(orphan_tag), tagged_sleep(kept_tag)
    try:
        me = os.getpid()
        [dead] = store.record_tags(
            "crashed", [orphan_tag], owner_pid=dead_pid(), owner_start=1.0, boot_id=boot_id()
        )
        [live] = ProcessRecorder(store, "running").record_tags([kept_tag])
        assert live.owner_pid == me
        swept = await sweep_orphans(store, grace=0.2)
        assert [s.row for s in swept] == [dead]
        assert swept[0].report.verified and orphan.pid in swept[0].report.signalled
        assert orphan.wait(timeout=10) is not None
        assert alive(kept.pid)
        assert store.list_tags() == [live]  # the reaped one is forgotten, the live one stays
    finally:
        stop(orphan)
        stop(kept)


def old_store(path: Path, version: int) -> sqlite3.Connection:
    """A database at ``path`` made by a taskloom whose schema was ``version``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    for script in MIGRATIONS[:version]:
        for statement in (s.strip() for s in script.split(";")):
            if statement:
                conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {version}")
    return conn


async def test_a_tag_only_process_row_of_an_old_store_becomes_a_tag_record_and_is_still_swept(
    home: Path,
) -> None:
    path = db_path()
    mcp_tag = unique("mcp-0123456789ab")
    orphan = tagged_sleep(mcp_tag)
    try:
        owner, boot = dead_pid(), boot_id()
        with contextlib.closing(old_store(path, 2)) as conn:
            insert = "INSERT INTO processes VALUES (?,?,?,?,?,?,?,?,?)"
            # What schema 2 wrote for an MCP server's tag: a process row with pid 0.
            conn.execute(insert, (0, 1700.5, 0, "crashed", mcp_tag, owner, 3.0, boot, 0))
            # Detached, it was never swept, only dropped: it goes.
            conn.execute(insert, (0, 1701.5, 0, "crashed", "shell-detached", owner, 3.0, boot, 1))
            # A real process row stays as it was.
            conn.execute(insert, (owner, 4.0, owner, "crashed", "b00000001", owner, 3.0, boot, 0))
        store = Store(path)
        try:
            assert store.schema_version == SCHEMA_VERSION
            assert store.list_processes() == [
                ProcessRow(owner, 4.0, owner, "crashed", "b00000001", owner, 3.0, boot)
            ]
            [row] = store.list_tags()
            assert (row.tag, row.session_id, row.owner_pid, row.owner_start, row.boot_id) == (
                mcp_tag,
                "crashed",
                owner,
                3.0,
                boot,
            )
            assert row.created_at == 1700.5
        finally:
            store.close()
        assert alive(orphan.pid)
        async with TaskRuntime() as rt:  # the next session's sweep, at start-up
            assert orphan.wait(timeout=10) is not None
            assert rt.store.list_tags() == []
            assert rt.store.list_processes() == []
    finally:
        stop(orphan)


def holder(directory: Path) -> subprocess.Popen[bytes]:
    """A ``sleep`` with no tag whose working directory is ``directory`` (as a Ray process,
    whose environment its title overwrote, holds files in the directory made for it)."""
    return subprocess.Popen(["sleep", "300"], cwd=directory, start_new_session=True)


async def test_the_sweep_kills_what_holds_an_owned_directory_and_what_a_nested_store_left(
    store: Store, tmp_path: Path
) -> None:
    """A dead owner's tag record owning a directory (a local Ray's): what holds files in it is
    killed, the store of a session nested in it (a remote agent's worker's, in its scratch
    checkout) is swept, and only then is the directory removed and the record forgotten."""
    owned = tmp_path / "owned"
    (owned / "home").mkdir(parents=True)
    ray_like = holder(owned)
    left_tag = unique("shell-left")
    command = tagged_sleep(left_tag)  # recorded only in the nested store
    try:
        nested = Store(owned / "home" / "taskloom.db")
        try:
            nested.record_tags(
                "worker", [left_tag], owner_pid=dead_pid(), owner_start=1.0, boot_id=boot_id()
            )
        finally:
            nested.close()
        [record] = store.record_tags(
            "crashed", [unique("ray-0123")], owner_pid=dead_pid(), owner_start=1.0,
            boot_id=boot_id(), path=str(owned),
        )  # fmt: skip
        assert record.path == str(owned) and store.list_tags() == [record]
        swept = await sweep_orphans(store, grace=0.2)
        assert [s.row for s in swept] == [record] and swept[0].report.verified
        assert ray_like.wait(timeout=10) is not None and command.wait(timeout=10) is not None
        assert not owned.exists()
        assert store.list_tags() == []
    finally:
        stop(ray_like)
        stop(command)


GUARDED = """
import os, subprocess, sys, time
from pathlib import Path
from taskloom.process.guard import Guard
from taskloom.process.registry import ProcessRecorder
from taskloom.store import Store

owned = Path(sys.argv[1])
store = Store(Path(sys.argv[2]))
ProcessRecorder(store, "guarded").record_tags(["ray-guarded"], path=str(owned))
store.flush()
owned.mkdir()
guard = Guard(store.path, "ray-guarded", grace=0.2)
guard.start()
held = subprocess.Popen(["sleep", "300"], cwd=owned, start_new_session=True)
print(guard._proc.pid, held.pid, flush=True)
if sys.argv[3] == "bye":
    import asyncio
    asyncio.run(guard.stop())
    print("bye", flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("end", ["killed", "bye"])
async def test_a_guard_sweeps_its_session_the_moment_it_dies_and_not_after_a_bye(
    home: Path, tmp_path: Path, end: str
) -> None:
    owned = tmp_path / "owned"
    session = subprocess.Popen(
        [sys.executable, "-c", GUARDED, str(owned), str(db_path()), end],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert session.stdout is not None
    guard_pid, held_pid = map(int, session.stdout.readline().split())
    try:
        if end == "bye":
            assert session.stdout.readline() == "bye\n"
            assert not alive(guard_pid)  # it has gone, and touched nothing
            assert alive(held_pid) and owned.exists()
        session.kill()
        session.wait(timeout=10)
        if end == "killed":
            # The guard kills what holds the directory, removes it, forgets the record, exits.
            await wait_until(lambda: not alive(guard_pid), 10, "the guard")
            assert not alive(held_pid) and not owned.exists()
            check = Store(db_path(), reserve_bytes=0)
            try:
                assert check.list_tags() == []
            finally:
                check.close()
    finally:
        for pid in (held_pid, guard_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(owned, ignore_errors=True)


async def test_an_owned_directory_a_command_made_read_only_is_still_removed(tmp_path: Path) -> None:
    from taskloom.process.sweep import remove_owned

    owned = tmp_path / "scratch"
    locked = owned / "work" / "cache"
    locked.mkdir(parents=True)
    (locked / "entry").write_text("x")
    locked.chmod(0o500)  # as some build tools leave their caches
    (owned / "work").chmod(0o500)
    assert await remove_owned(str(owned), grace=1.0)
    assert not owned.exists()


async def test_an_owned_directory_whose_nested_store_cannot_be_opened_stays(tmp_path: Path) -> None:
    from taskloom.process.sweep import NESTED_HOME, remove_owned

    owned = tmp_path / "scratch"
    (owned / NESTED_HOME).mkdir(parents=True)
    (owned / NESTED_HOME / "taskloom.db").write_bytes(b"not a database at all" * 100)
    assert not await remove_owned(str(owned), grace=1.0)
    assert owned.exists()  # what that store recorded may still run: kept for a later sweep
