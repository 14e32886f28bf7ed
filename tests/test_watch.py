"""Watching a process end through a pidfd: at once, for a process that is not our child too."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

from helpers import TIME_FACTOR, alive
from taskloom.process.identity import process_start_time, zombie_status
from taskloom.process.watch import describe_status, wait_exit


async def test_the_end_of_a_process_that_is_not_our_child_is_seen_at_once() -> None:
    # sh starts sleep in the background and exits: the sleep is nobody's child of ours.
    out = subprocess.run(
        ["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
    )
    pid = int(out.stdout)
    start = process_start_time(pid)
    assert start is not None
    watcher = asyncio.ensure_future(wait_exit(pid, start))
    try:
        done, _ = await asyncio.wait([watcher], timeout=0.3)
        assert not done  # it runs: the watch waits
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        await asyncio.wait_for(watcher, 5)
        assert time.monotonic() - killed < 0.5 * TIME_FACTOR
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        watcher.cancel()


async def test_a_process_gone_or_replaced_returns_at_once() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        start = process_start_time(proc.pid)
        assert start is not None
        # The same pid with another start time is another process: not the one watched.
        await asyncio.wait_for(wait_exit(proc.pid, start + 100.0), 1)
    finally:
        proc.kill()
        proc.wait()
    await asyncio.wait_for(wait_exit(proc.pid, start), 1)  # gone: returns at once


async def test_how_a_process_ended_is_read_before_its_parent_reaps_it() -> None:
    # Our own children, not reaped until the watch returned: as tmux leaves a pane's command.
    killed = subprocess.Popen(["sleep", "30"])
    exited = subprocess.Popen(["sh", "-c", "exit 3"])
    try:
        start = process_start_time(killed.pid)
        watcher = asyncio.ensure_future(wait_exit(killed.pid, start))
        await asyncio.sleep(0)  # the watch is set up
        os.kill(killed.pid, signal.SIGKILL)
        status = await asyncio.wait_for(watcher, 5)
        assert describe_status(status) == "signal 9"
        assert describe_status(await asyncio.wait_for(wait_exit(exited.pid), 5)) == "exit code 3"
    finally:
        for proc in (killed, exited):
            if proc.poll() is None:
                proc.kill()
            proc.wait(5)
    # Reaped: nothing to read any more (and a pid used again is another process).
    assert zombie_status(killed.pid, start) is None
    assert describe_status(None) == ""
