"""The process layer: verified tree kill, the orphan sweep, reused pids left alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from helpers import TIME_FACTOR, alive
from taskloom.process.kill import find_tree, kill_tree
from taskloom.process.spawn import spawn_shell
from taskloom.process.sweep import sweep_orphans
from taskloom.settings import db_path
from taskloom.store import ProcessRow, Store
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell

SCRIPT = Path(__file__).with_name("session_script.py")
ORPHAN_CMD = "sleep 300 & sleep 300 & setsid sleep 300 & wait"


def descendants(pid: int, want: int, timeout: float = 10.0) -> list[int]:
    """The pids under ``pid`` once ``want`` of them are ``sleep`` (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        kids = psutil.Process(pid).children(recursive=True)
        sleeps = [k for k in kids if k.name() == "sleep"]
        if len(sleeps) >= want:
            return [k.pid for k in kids]
        assert time.monotonic() < deadline, f"only {len(sleeps)} sleeps under {pid}"
        time.sleep(0.01)


async def test_kill_leaves_no_process_alive_within_3s() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, ORPHAN_CMD, run_in_background=True)
        state = rt.get(out.task_id)
        assert state is not None
        leader = state.pid  # type: ignore[attr-defined]
        tree = [leader, *descendants(leader, 3)]
        # One of them left the group: the kill must find it anyway.
        assert any(os.getpgid(p) != leader for p in tree if alive(p))
        started = time.monotonic()
        final = await rt.kill(out.task_id)
        elapsed = time.monotonic() - started
        assert final.status == "killed"
        assert elapsed < 3.0 * TIME_FACTOR, elapsed
        assert [p for p in tree if alive(p)] == []
        notes = rt.drain()
        assert [n.task_id for n in notes] == [out.task_id]
        assert "was stopped" in notes[0].text


async def test_kill_escalates_to_sigkill_for_a_process_ignoring_term(tmp_path: Path) -> None:
    out_file = tmp_path / "out"
    fd = os.open(out_file, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        child = spawn_shell(
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            output_fd=fd,
            task_id="bstubborn",
        )
    finally:
        os.close(fd)
    exited = child.wait()
    deadline = time.monotonic() + 10 * TIME_FACTOR
    while b"ready" not in out_file.read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    report = await kill_tree(child.pgid, leader=child.pid, tag="bstubborn", grace=0.3)
    assert report.verified and report.escalated
    assert time.monotonic() - started < 3.0 * TIME_FACTOR
    assert await exited == -signal.SIGKILL


def _start_session(mode: str, session_id: str) -> tuple[subprocess.Popen[str], dict]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), mode, session_id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "session script died before reporting"
    return proc, json.loads(line)


def _sigkill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    if proc.stdout:
        proc.stdout.close()


async def test_orphan_sweep_after_session_is_sigkilled() -> None:
    proc, info = _start_session("orphans", str(uuid.uuid4()))
    tree = [info["pid"], *info["children"]]
    _sigkill(proc)
    # The crashed session's command lives on, in its own session.
    assert all(alive(p) for p in tree)
    started = time.monotonic()
    async with TaskRuntime() as rt:  # a new session sweeps at start-up
        assert time.monotonic() - started < 3.0 * TIME_FACTOR
        assert [p for p in tree if alive(p)] == []
        record = rt.store.get_task(info["task_id"])
        assert record is not None and record["status"] == "killed"
        assert rt.store.list_processes() == []


async def test_sweep_never_kills_a_reused_pid() -> None:
    # An unrelated program that happens to hold a recorded pid: its start time differs.
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        store = Store(db_path())
        dead_owner = subprocess.Popen(["true"])
        dead_owner.wait()
        store.add_process(
            ProcessRow(
                pid=stranger.pid,
                pid_start=psutil.Process(stranger.pid).create_time() - 1000.0,
                pgid=stranger.pid,
                session_id="crashed",
                task_id="bxxxxxxxx",
                owner_pid=dead_owner.pid,
                owner_start=1.0,
            )
        )
        swept = await sweep_orphans(store, grace=0.2)
        assert len(swept) == 1 and swept[0].report.signalled == set()
        assert alive(stranger.pid)
        assert store.list_processes() == []  # the stale record is gone
        store.close()
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


async def test_sweep_leaves_live_sessions_alone() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "sleep 300", run_in_background=True)
        other = Store(db_path())
        swept = await sweep_orphans(other, grace=0.2)
        other.close()
        assert swept == []
        assert not rt.get(out.task_id).terminal  # type: ignore[union-attr]
    # Closing the session (exit policy cancel) killed it.
    assert find_tree(None, tag=out.task_id)[0] == []
