"""Short-lived programs (process/run): recorded, killed at their deadline or on cancellation
with their whole tree, nothing left after a normal exit or a crash of ours, output bounded.

Real processes, a real store: trees are read with psutil, records through the store, and a
crash is a SIGKILL of a Python process that is running the helper.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from helpers import TIME_FACTOR, alive, run_processes, wait_until
from taskloom.process.run import ProgramError, run_program
from taskloom.process.spawn import TASK_ENV
from taskloom.process.sweep import sweep_orphans
from taskloom.settings import db_path
from taskloom.store import Store
from taskloom.tasks.runtime import TaskRuntime


def sleeps(seconds: int) -> list[psutil.Process]:
    """This test run's live ``sleep SECONDS`` processes, whatever their pid."""
    return run_processes(lambda p: p.info.get("cmdline") == ["sleep", str(seconds)])


def tree_of(pid: int, want: int, timeout: float = 10.0) -> list[int]:
    """``pid`` and the processes it started, once ``want`` of them are ``sleep`` (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        kids = psutil.Process(pid).children(recursive=True)
        if sum(k.name() == "sleep" for k in kids) >= want:
            return [pid, *(k.pid for k in kids)]
        assert time.monotonic() < deadline, f"fewer than {want} sleeps under {pid}"
        time.sleep(0.01)


# A program that ignores TERM and leaves children, one of them in a session of its own (so
# neither its group nor its pipes lead to it): it prints their pids, then waits for ever.
HANG = (
    "trap '' TERM; sleep 3411 & echo $!; setsid sleep 3411 </dev/null >/dev/null 2>&1 & echo $!;"
    " echo $$; while :; do sleep 1; done"
)


async def test_a_hung_program_is_killed_at_its_timeout_with_its_children() -> None:
    started = time.monotonic()
    with pytest.raises(ProgramError) as caught:
        await run_program(["sh", "-c", HANG], timeout=0.5, grace=0.3)
    elapsed = time.monotonic() - started
    # The deadline, the grace before SIGKILL, and slack for a loaded machine.
    assert 0.5 <= elapsed < 0.5 + 0.3 + 2.0 * TIME_FACTOR, elapsed
    error = caught.value
    assert error.timed_out and error.result is not None
    assert str(error).startswith("sh -c 'trap ") and str(error).endswith(": timed out after 0.5 s")
    pids = [int(line) for line in error.result.stdout.split()]
    assert len(pids) == 3
    assert [p for p in pids if alive(p)] == []
    assert sleeps(3411) == []
    assert error.result.exit_code == -signal.SIGKILL  # it ignored TERM
    assert error.result.survivors == ()


async def test_a_cancelled_call_leaves_no_process_and_no_record(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}; sleep 3412 & wait"
    async with TaskRuntime() as rt:
        call = asyncio.ensure_future(run_program(["sh", "-c", command], timeout=3600))
        await wait_until(pid_file.exists, what="the program to start")
        tree = tree_of(int(pid_file.read_text()), 1)
        # Recorded before it started, under the tag it carries.
        [record] = rt.store.list_tags()
        assert psutil.Process(tree[0]).environ()[TASK_ENV] == record.tag
        assert record.tag.startswith("sh-")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert [p for p in tree if alive(p)] == []
        assert rt.store.list_tags() == []


# Run in a Python process of its own, which the test SIGKILLs while the program runs.
CRASHING = """
import asyncio, sys
from pathlib import Path
from taskloom.process.registry import ProcessRecorder, bind_recorder
from taskloom.process.run import run_program
from taskloom.store import Store

async def main() -> None:
    store = Store(Path(sys.argv[1]))
    bind_recorder(ProcessRecorder(store, "crashing"))
    await run_program(["sh", "-c", sys.argv[2]], timeout=3600)

asyncio.run(main())
"""


async def test_a_crash_of_ours_leaves_a_record_the_sweep_kills(tmp_path: Path, home: Path) -> None:
    pid_file = tmp_path / "pid"
    command = (
        f"echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file};"
        " sleep 3413 & setsid sleep 3413 </dev/null >/dev/null 2>&1 & wait"
    )
    db = db_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    ours = subprocess.Popen([sys.executable, "-c", CRASHING, str(db), command])
    try:
        await wait_until(lambda: pid_file.exists() or ours.poll() is not None, what="the program")
        assert ours.poll() is None, f"the helper's process ended with {ours.returncode}"
        tree = tree_of(int(pid_file.read_text()), 2)
    finally:
        ours.send_signal(signal.SIGKILL)
        ours.wait(timeout=10)
    # SIGKILL gave the helper no chance to clean up: the program's tree lives on.
    assert all(alive(p) for p in tree), tree
    store = Store(db)
    try:
        [record] = store.list_tags()
        assert record.tag.startswith("sh-") and record.owner_pid == ours.pid
        swept = await sweep_orphans(store, grace=0.2)
        assert [s.row for s in swept] == [record] and swept[0].report.verified
        assert [p for p in tree if alive(p)] == []
        assert sleeps(3413) == []
        assert store.list_tags() == []
    finally:
        store.close()


async def test_a_normal_exit_returns_at_once_and_ends_what_the_program_left(
    tmp_path: Path,
) -> None:
    # The background sleep holds stdout open: the call must not wait for it, nor leave it.
    async with TaskRuntime() as rt:
        started = time.monotonic()
        run = await run_program(["sh", "-c", "sleep 3414 & echo done; exit 3"], timeout=60)
        assert time.monotonic() - started < 3.0 * TIME_FACTOR
        assert (run.exit_code, run.stdout, run.stderr, run.cut) == (3, b"done\n", b"", False)
        assert sleeps(3414) == []
        assert rt.store.list_tags() == []


async def test_output_beyond_the_cap_is_cut_with_a_note() -> None:
    command = "head -c 300000 /dev/zero | tr '\\0' x; printf oops >&2"
    run = await run_program(["sh", "-c", command], timeout=60, max_stdout=1000, max_stderr=2)
    assert run.exit_code == 0
    assert run.stdout == b"x" * 1000 and run.stdout_dropped == 299_000
    assert run.stderr == b"oo" and run.stderr_dropped == 2
    assert run.out_text() == "x" * 1000 + "\n[output cut at 1000 bytes: 292 KiB more were dropped]"
    assert run.err_text() == "oo\n[output cut at 2 bytes: 2 bytes more were dropped]"
    assert run.cut_note() == (
        "stdout output cut at 1000 bytes: 292 KiB more were dropped; "
        "stderr output cut at 2 bytes: 2 bytes more were dropped"
    )


async def test_a_program_whose_output_never_ends_is_stopped_at_the_cap() -> None:
    started = time.monotonic()
    run = await run_program(["yes"], timeout=60, max_stdout=1 << 16, stop_at_cap=True)
    assert time.monotonic() - started < 3.0 * TIME_FACTOR
    assert run.stopped_at_cap and run.cut and len(run.stdout) == 1 << 16
    assert run.exit_code is not None and run.exit_code < 0  # stopped by a signal
    assert run.out_text().endswith("\n[output cut at 64 KiB: the program was stopped there]")
    assert run_processes(lambda p: p.info.get("cmdline") == ["yes"]) == []


async def test_stdin_is_given_and_a_missing_program_is_a_clear_error(tmp_path: Path) -> None:
    run = await run_program(["cat"], timeout=60, stdin=b"hello")
    assert (run.exit_code, run.stdout) == (0, b"hello")
    run = await run_program(["cat"], timeout=60)  # /dev/null: no wait for input
    assert (run.exit_code, run.stdout) == (0, b"")
    async with TaskRuntime() as rt:
        with pytest.raises(ProgramError) as caught:
            await run_program([str(tmp_path / "no-such-tool"), "--flag"], timeout=60)
        assert caught.value.result is None and not caught.value.timed_out
        assert str(caught.value).startswith("no-such-tool --flag: cannot start: ")
        assert rt.store.list_tags() == []  # nothing ran: nothing to sweep


async def test_an_untagged_program_carries_no_tag_not_even_an_inherited_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TASK_ENV, "inherited-tag")
    show = f"echo ${{{TASK_ENV}:-none}}"
    async with TaskRuntime() as rt:
        untagged = await run_program(["sh", "-c", show], timeout=60, tagged=False)
        assert untagged.stdout == b"none\n"
        tagged = await run_program(["sh", "-c", show], timeout=60, prefix="probe")
        assert tagged.stdout.decode().startswith("probe-")
        assert rt.store.list_tags() == []


async def test_a_call_cancelled_while_its_program_starts_ends_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    # The cancellation lands while asyncio still connects the program's pipes, after the
    # program started a child that holds them: asyncio alone would kill only the leader and
    # wait for the pipes to close, for as long as the child lives.
    command = "sleep 3413 & wait"
    async with TaskRuntime() as rt:
        call = asyncio.ensure_future(run_program(["sh", "-c", command], timeout=3600))
        leaders: list[psutil.Process] = []
        for _ in range(100):  # one step of the loop at a time, until sh is started
            await asyncio.sleep(0)
            leaders = [p for p in psutil.Process().children() if p.cmdline()[-1:] == [command]]
            if leaders:
                break
        [leader] = leaders
        # The event loop is held here until sh has started its child, so that the pipes are
        # not connected yet when the cancellation arrives.
        tree_of(leader.pid, 1)
        call.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(call), 10 * TIME_FACTOR)
        assert time.monotonic() - started < 10 * TIME_FACTOR
        assert run_processes(lambda p: "3413" in " ".join(p.info["cmdline"] or [])) == []
        assert rt.store.list_tags() == []
