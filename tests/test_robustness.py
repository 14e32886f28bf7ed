"""Failure paths: clock steps, cancelled cleanup, failing writes, detached commands, caps."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import time
from pathlib import Path

import psutil
import pytest

from helpers import TIME_FACTOR, alive, file_contains, wait_until
from taskloom.errors import StoreError
from taskloom.process.identity import boot_id, is_same_process, process_start_time
from taskloom.process.kill import find_tree
from taskloom.settings import db_path
from taskloom.store import MailRow, Store
from taskloom.tasks.output import DiskTaskOutput
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.tasks.types import TaskStatus


def test_process_identity_ignores_wall_clock_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    start = process_start_time(me)
    assert start is not None
    assert is_same_process(me, start, boot_id())
    # A stepped clock moves psutil's idea of the boot time; our identity does not use it.
    real = psutil.boot_time()
    monkeypatch.setattr(psutil, "boot_time", lambda: real + 3600.0)
    assert is_same_process(me, start, boot_id())
    assert not is_same_process(me, start + 1.0, boot_id())
    assert not is_same_process(me, start, "another-boot")


async def test_cancelling_close_does_not_cut_the_cleanup_short() -> None:
    rt = TaskRuntime(kill_grace=1.0)
    await rt.start()
    # It survives TERM (the kill must escalate), and says it got it: the grace has begun.
    out = await run_shell(
        rt,
        "trap 'echo termed' TERM; echo armed; while :; do sleep 0.05; done",
        run_in_background=True,
    )
    await wait_until(file_contains(out.output_file, "armed"), what="trap installed")
    closing = asyncio.create_task(rt.close())
    await wait_until(file_contains(out.output_file, "termed"), what="the close's TERM")
    closing.cancel()  # inside the TERM grace period
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert find_tree(None, tag=out.task_id)[0] == []
    store = Store(db_path())
    record = store.get_task(out.task_id)
    session = store.get_session(rt.session_id)
    store.close()
    assert record is not None and record["status"] == "killed"
    assert session is not None and session.ended_at is not None


async def test_a_failure_while_finishing_still_ends_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def disk_full(self: DiskTaskOutput) -> bool:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(DiskTaskOutput, "enforce_cap", disk_full)
    async with TaskRuntime(output_cap=4096) as rt:
        rt.watchdog.tick = 0.05
        out = await run_shell(rt, "yes", run_in_background=True)
        state = await rt.wait(out.task_id, timeout=20)
        assert state.status == TaskStatus.KILLED
        assert [n.task_id for n in rt.drain()] == [out.task_id]


async def test_output_cap_applies_to_foreground_commands_too() -> None:
    async with TaskRuntime(output_cap=8192) as rt:
        rt.watchdog.tick = 0.05
        out = await run_shell(rt, "yes", timeout=30)
        assert out.status == TaskStatus.KILLED and not out.backgrounded
        data = Path(out.output_file).read_bytes()
        assert data.endswith(b"[output truncated: exceeded 8KB disk cap]\n")
        assert len(data) < 8192 + 100


async def test_detached_command_is_settled_when_it_ends_after_its_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rt = TaskRuntime()
    await rt.start()
    out = await run_shell(
        rt, "sleep 0.5", run_in_background=True, exit_policy="detach", description="nap"
    )
    pid = rt.get(out.task_id).pid  # type: ignore[union-attr]
    await rt.close()
    await wait_until(lambda: not alive(pid), what="detached command to end")
    await asyncio.sleep(0.05)  # give any stray callback a chance to misbehave
    assert "closed database" not in caplog.text
    async with TaskRuntime(session_id=rt.session_id) as resumed:
        state = resumed.get(out.task_id)
        assert state is not None and state.status == TaskStatus.COMPLETED
        notes = resumed.drain()
        assert [n.task_id for n in notes] == [out.task_id]
        assert 'Background command "nap" completed (exit code unknown)' in notes[0].text
        assert resumed.store.list_processes() == []


def test_a_failed_commit_keeps_its_writes_for_the_next_one() -> None:
    store = Store(db_path())
    store._conn.execute("PRAGMA busy_timeout = 50")
    blocker = sqlite3.connect(store.path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    started = time.monotonic()
    row = MailRow(
        id="n1",
        seq=0,
        session_id="s1",
        recipient="s1",
        sender="b00000001",
        kind="notification",
        topic="terminal",
        priority="later",
        body="<task-notification/>",
        summary="",
        created_at=1.0,
    )
    with pytest.raises(StoreError):
        store.add_mail(row)  # no loop running: commits at once, and fails
    assert time.monotonic() - started < 5 * TIME_FACTOR
    blocker.execute("ROLLBACK")
    blocker.close()
    store.flush()
    assert [n.id for n in store.undelivered_mail("s1")] == ["n1"]
    store.close()
