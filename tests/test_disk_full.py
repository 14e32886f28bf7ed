"""A full disk: a command that ended by itself keeps its own status; one line, no traceback."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from helpers import clean_env, scripted_argv, wait_until
from taskloom.errors import StoreError
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.store._disk import RESERVE_BYTES, reserve_path
from taskloom.tasks.runtime import TaskRuntime

DISK_SIZE = "3m"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A private tmpfs of :data:`DISK_SIZE` (needs root), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def fill(path: Path) -> None:
    """Write ``path`` until the file system has no space left."""
    with open(path, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    with open(path, "ab", buffering=0) as f:  # the last partial block
        try:
            while True:
                f.write(b"\0")
        except OSError:
            pass


@pytest.mark.e2e
async def test_a_command_ending_on_a_full_disk_keeps_its_status_and_no_traceback_is_logged(
    tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = small_disk / "home"
    monkeypatch.setenv("TASKLOOM_HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(small_disk / "claude"))  # the transcript too
    filler = small_disk / "filler"
    transcript = "$CLAUDE_CONFIG_DIR/projects/*/$TASKLOOM_SESSION_ID.jsonl"
    # Once the run waits for it (the turn before is in the transcript), the command fills the
    # disk and ends by itself with status 3: its end is recorded while the disk is full.
    command = (
        f"n=0; until grep -q Waiting {transcript} || [ $n -ge 2000 ]; do sleep 0.01; n=$((n+1)); "
        f"done; head -c 64m /dev/zero > {filler}; exit 3"
    )
    script = {
        "turns": [
            {
                "tool_calls": [
                    {
                        "name": "Bash",
                        "input": {"command": command, "run_in_background": True},
                    }
                ]
            },
            {"text": "Waiting for it."},
            {"text": "It failed."},
        ]
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(script))
    proc = subprocess.run(
        scripted_argv(tmp_path / "s.yaml", "--dangerously-skip-permissions"),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=clean_env(TASKLOOM_HOME=str(home)),
    )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    task_id = next(e["task_id"] for e in events if e.get("subtype") == "task_started")
    assert filler.stat().st_size > 0
    assert "Traceback" not in proc.stderr, proc.stderr
    # What is said about the disk names the database and what to do, on one line each.
    disk_lines = [line for line in proc.stderr.splitlines() if "full" in line]
    assert disk_lines, proc.stderr
    assert all(str(db_path(home)) in ln and "free some space" in ln for ln in disk_lines)
    filler.unlink()
    # A later session settles whatever the store still says is running: nothing, here.
    async with TaskRuntime() as rt:
        record = rt.store.get_task(task_id)
    assert record is not None, proc.stderr
    assert (record["status"], record["exit_code"]) == ("failed", 3), proc.stderr


async def test_a_commit_failing_on_a_full_disk_logs_one_line_and_is_retried(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(small_disk / "taskloom.db", reserve_bytes=0)  # no reserve to fall back on
    try:
        store.upsert_task(_record("b00000001", "running"))
        store.flush()
        filler = small_disk / "filler"
        fill(filler)
        with caplog.at_level(logging.DEBUG, logger="taskloom"):
            for i in range(200):  # more than one page: the WAL must grow
                store.upsert_task(_record(f"b{i:08d}", "completed", pad=2000))
            await wait_until(lambda: "full" in caplog.text, what="the failed commit")
            # Two more tries fail meanwhile; they say so at debug level only.
            await wait_until(lambda: caplog.text.count("failed again") >= 2, what="two retries")
            filler.unlink()
            await wait_until(lambda: "succeed again" in caplog.text, what="the retry to succeed")
        records = [
            r for r in caplog.records if r.name.startswith("taskloom") and r.levelno >= logging.INFO
        ]
        assert [r.exc_info for r in records] == [None, None], caplog.text
        assert str(store.path) in records[0].getMessage()
        assert "free some space" in records[0].getMessage()
        assert store.get_task("b00000001")["status"] == "completed"  # type: ignore[index]
    finally:
        store.close()


def _record(task_id: str, status: str, pad: int = 0) -> dict[str, object]:
    return {
        "id": task_id,
        "session_id": "s1",
        "type": "local_bash",
        "status": status,
        "description": "x" * pad,
        "owner": "s1",
        "start_time": 1.0,
        "end_time": None,
        "output_file": "",
        "notified": False,
    }


def test_the_reserve_is_made_again_after_a_full_disk_and_serves_the_next_one(
    small_disk: Path,
) -> None:
    db = small_disk / "taskloom.db"
    reserve = reserve_path(db)
    store = Store(db)  # no loop running: every write below commits at once
    try:
        assert reserve.stat().st_size == RESERVE_BYTES
        store.upsert_task(_record("b00000001", "running"))
        # Each full disk: the end of a command is stored in the reserve's space. A record holds
        # its description twice (column and JSON): each such write is larger than everything
        # written before, so the WAL must grow for it, and still fits in the reserve.
        for n, pad in enumerate((100_000, 150_000)):
            fill(small_disk / "filler")
            store.upsert_task(_record("b00000001", f"ended {n}", pad=pad))
            assert store.get_task("b00000001")["status"] == f"ended {n}"  # type: ignore[index]
            assert not reserve.exists()  # given back; no room to make it again yet
            fill(small_disk / "filler2")
            with pytest.raises(StoreError, match="full"):
                store.upsert_task(_record("b00000002", "queued", pad=10_000))
            assert not reserve.exists()
            (small_disk / "filler").unlink()
            (small_disk / "filler2").unlink()
            store.flush()  # writes succeed again: the reserve is back for the next full disk
            assert reserve.stat().st_size == RESERVE_BYTES
    finally:
        store.close()


def test_a_reserve_that_does_not_fit_at_open_is_made_at_the_first_commit_with_room(
    small_disk: Path,
) -> None:
    db = small_disk / "taskloom.db"
    filler = small_disk / "filler"
    fill(filler)
    os.truncate(filler, filler.stat().st_size - RESERVE_BYTES // 2)  # room for the store only
    store = Store(db)
    try:
        assert not reserve_path(db).exists()
        filler.unlink()
        store.upsert_task(_record("b00000001", "running"))
        assert reserve_path(db).stat().st_size == RESERVE_BYTES
    finally:
        store.close()


def test_opening_the_store_on_a_full_disk_uses_the_reserve_or_says_what_to_do_in_one_line(
    small_disk: Path,
) -> None:
    db = small_disk / "taskloom.db"
    store = Store(db)
    store.upsert_task(_record("b00000001", "running"))
    store.close()  # the last connection: SQLite removes the WAL and shared-memory files
    filler = small_disk / "filler"
    fill(filler)
    # Their creation fails ("disk I/O error"): the reserve gives the room for it.
    store = Store(db)
    try:
        assert not reserve_path(db).exists()
        store.upsert_task(_record("b00000001", "completed"))
        assert store.get_task("b00000001")["status"] == "completed"  # type: ignore[index]
    finally:
        store.close()
    # No reserve left: one line that names the database and what to do. Both a database still
    # to be created (SQLITE_FULL) and an existing one (its WAL cannot be made) are refused so.
    fill(small_disk / "filler2")
    for path in (db, small_disk / "new.db"):
        with pytest.raises(StoreError) as failed:
            Store(path)
        message = str(failed.value)
        assert str(path) in message and "free some space" in message, message
        assert "\n" not in message
