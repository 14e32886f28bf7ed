"""Shell tasks: foreground, background, auto-background, stall watch, cap, exit policies."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from helpers import TIME_FACTOR, alive, file_contains, wait_until
from taskloom.errors import OutputError
from taskloom.process.kill import find_tree
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import WatchSettings, run_shell
from taskloom.tasks.types import TaskStatus
from taskloom.testing import FakeClock


async def test_foreground_command_returns_its_exit_code_without_notification() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "echo hello; echo oops >&2; exit 3", timeout=10)
        assert (out.status, out.exit_code, out.backgrounded) == ("failed", 3, False)
        assert Path(out.output_file).read_text() == "hello\noops\n"
        assert rt.drain() == []  # the caller got the result itself


async def test_the_outcome_tells_stderr_output_and_the_directory_it_ended_in(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    async with TaskRuntime() as rt:
        quiet = await run_shell(rt, "cd sub; grep x /dev/null", cwd=tmp_path, track_cwd=True)
        assert (quiet.exit_code, quiet.stderr_written) == (1, False)
        assert quiet.cwd == str((tmp_path / "sub").resolve())
        loud = await run_shell(rt, "echo a; echo b >&2; echo c", cwd=tmp_path, track_cwd=True)
        assert loud.stderr_written and loud.cwd == str(tmp_path.resolve())
        assert Path(loud.output_file).read_text() == "a\nb\nc\n"  # in the order written
        gone = await run_shell(rt, "cd sub && rmdir ../sub", cwd=tmp_path, track_cwd=True)
        assert gone.cwd == "" and not gone.stderr_written  # pwd could not tell: said quietly
        untracked = await run_shell(rt, "cd /", cwd=tmp_path)
        assert untracked.cwd is None
        # The side file is gone once read: only output files stay in the tasks directory.
        assert {p.suffix for p in Path(loud.output_file).parent.iterdir()} == {".output"}


async def test_auto_background_keeps_output_and_notifies_completion() -> None:
    async with TaskRuntime() as rt:
        started = time.monotonic()
        out = await run_shell(rt, "sleep 3; echo done", timeout=1.0, auto_background=True)
        assert 0.9 < time.monotonic() - started < 1.0 + 1.5 * TIME_FACTOR
        assert out.backgrounded and out.timed_out and out.status == "running"
        state = await rt.wait(out.task_id, timeout=10)
        assert state.status == TaskStatus.COMPLETED
        assert Path(out.output_file).read_text() == "done\n"
        notes = rt.drain()
        assert len(notes) == 1
        assert "completed (exit code 0)" in notes[0].text
        assert f"<output-file>{out.output_file}</output-file>" in notes[0].text


async def test_timeout_without_auto_background_kills() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(rt, "sleep 30", timeout=0.3, auto_background=False)
        assert out.timed_out and out.status == TaskStatus.KILLED and out.interrupted
        assert out.exit_code == 128 + 15  # SIGTERM, reported the way shells do
        assert not out.backgrounded
        assert find_tree(None, tag=out.task_id)[0] == []


async def test_background_moves_a_running_foreground_command() -> None:
    async with TaskRuntime() as rt:
        call = asyncio.create_task(
            run_shell(rt, "echo first; read line; echo got $line", timeout=60)
        )
        sub = rt.subscribe()
        task_id = None
        while task_id is None:
            event = await sub.get(timeout=10)
            assert event is not None
            if event.state.status == TaskStatus.RUNNING:
                task_id = event.state.id
        assert rt.background(task_id)
        out = await asyncio.wait_for(call, 10)
        assert out.backgrounded and not out.timed_out
        assert rt.get(task_id).is_backgrounded  # type: ignore[union-attr]
        await wait_until(file_contains(out.output_file, "first"), what="first output")
        await rt.kill(task_id)
        assert [n.task_id for n in rt.drain()] == [task_id]


async def test_cancelled_foreground_call_kills_its_command() -> None:
    async with TaskRuntime() as rt:
        call = asyncio.create_task(run_shell(rt, "sleep 30", timeout=60))
        sub = rt.subscribe()
        while True:
            event = await sub.get(timeout=10)
            assert event is not None
            if event.state.status == TaskStatus.RUNNING:
                break
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        state = rt.get(event.state.id)
        assert state is not None and state.status == TaskStatus.KILLED


async def test_stall_watchdog_notifies_once_for_a_prompt_and_never_for_silence() -> None:
    clock = FakeClock()
    async with TaskRuntime(clock=clock) as rt:
        prompt = await run_shell(
            rt,
            # Asks, then waits (stdin is /dev/null: a real read would end at once).
            "printf 'Continue? (y/n) '; sleep 300",
            run_in_background=True,
            description="ask",
        )
        silent = await run_shell(rt, "sleep 300", run_in_background=True)
        await wait_until(file_contains(prompt.output_file, "Continue? (y/n)"), what="prompt")
        for _ in range(120):  # two minutes of fake time, one watchdog tick a second
            await clock.advance(1.0)
        notes = rt.drain()
        assert [n.task_id for n in notes] == [prompt.task_id]
        assert notes[0].kind == "stall"
        assert "appears to be waiting for interactive input" in notes[0].text
        assert "<status>running</status>" in notes[0].text
        for _ in range(120):
            await clock.advance(1.0)
        assert rt.drain() == []
        assert not rt.get(prompt.task_id).terminal  # type: ignore[union-attr]
        for task in (prompt, silent):
            await rt.kill(task.task_id)


async def test_stall_watchdog_with_short_real_thresholds() -> None:
    async with TaskRuntime() as rt:
        rt.watchdog.tick = 0.05
        out = await run_shell(
            rt,
            "printf 'Are you sure you want to delete it? '; sleep 30",
            run_in_background=True,
            watch=WatchSettings(stall_after=0.3, check_every=0.05),
        )
        assert await rt.notifications.wait_pending(timeout=10)
        notes = rt.drain()
        assert [n.kind for n in notes] == ["stall"]
        await rt.kill(out.task_id)


async def test_a_command_that_reads_input_gets_end_of_file_at_once() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(
            rt,
            'cat; python3 -c "import sys; print(len(sys.stdin.read()))"; '
            'read -r answer; echo "read exit $?"',
            run_in_background=True,
        )
        state = await rt.wait(out.task_id, timeout=10)
        assert state.status == TaskStatus.COMPLETED
        assert Path(out.output_file).read_text() == "0\nread exit 1\n"


async def _blocked_reading(rt: TaskRuntime, command: str) -> tuple[str, str]:
    """Run ``command`` in the background with a short stall watch; its stall notice's text."""
    import sys

    rt.watchdog.tick = 0.05
    out = await run_shell(
        rt,
        command.replace("PYTHON", sys.executable),
        run_in_background=True,
        watch=WatchSettings(stall_after=0.3, check_every=0.05),
    )
    assert await rt.notifications.wait_pending(timeout=20)
    [note] = rt.drain()
    await rt.kill(out.task_id)
    return note.kind, note.text


async def test_a_silent_command_reading_its_own_terminal_is_reported() -> None:
    async with TaskRuntime() as rt:
        kind, text = await _blocked_reading(rt, "PYTHON -c 'import pty; pty.spawn([\"cat\"])'")
    assert kind == "stall" and "appears to be waiting for interactive input" in text
    assert "It has printed nothing for 0.3s" in text
    assert "(cat) is blocked reading its terminal (/dev/pts/" in text


async def test_a_silent_command_reading_a_pipe_nobody_of_it_writes_is_reported() -> None:
    read_end, write_end = os.pipe()  # this process writes it: no process of the command
    try:
        async with TaskRuntime() as rt:
            kind, text = await _blocked_reading(rt, f"cat < /proc/{os.getpid()}/fd/{read_end}")
    finally:
        os.close(read_end)
        os.close(write_end)
    assert kind == "stall"
    assert "(cat) is blocked reading its standard input, a pipe that no process" in text


async def test_a_command_reading_what_its_own_pipeline_writes_is_not_waiting_for_input() -> None:
    from taskloom.process.input_wait import waiting_for_input

    async with TaskRuntime() as rt:
        out = await run_shell(rt, "sleep 30 | cat", run_in_background=True)
        state = rt.get(out.task_id)
        assert state is not None and state.pid is not None
        procs: list[object] = []

        def cat_blocked() -> bool:
            procs[:] = find_tree(state.pid, leader=state.pid, tag=out.task_id)[0]
            names = {p.name(): p.pid for p in procs}  # type: ignore[attr-defined]
            if "cat" not in names:
                return False
            with open(f"/proc/{names['cat']}/syscall") as f:
                return f.read().split()[:2] == ["0", "0x0"]

        await wait_until(cat_blocked, what="cat blocked on its pipe")
        assert waiting_for_input(p.pid for p in procs) is None  # type: ignore[attr-defined]
        await rt.kill(out.task_id)


async def test_output_cap_stops_a_runaway_command() -> None:
    async with TaskRuntime(output_cap=64 * 1024) as rt:
        rt.watchdog.tick = 0.05
        out = await run_shell(rt, "yes", run_in_background=True)
        state = await rt.wait(out.task_id, timeout=20)
        assert state.status == TaskStatus.KILLED
        data = Path(out.output_file).read_bytes()
        assert data.endswith(b"\n[output truncated: exceeded 64KB disk cap]\n")
        assert len(data) == 64 * 1024 + len(b"\n[output truncated: exceeded 64KB disk cap]\n")


async def test_hundred_shells_finishing_together_give_one_batch_of_100(tmp_path: Path) -> None:
    # Each command waits for a line of its own on a pipe (a wait that costs nothing, where a
    # hundred polling loops would keep both cores busy starting sleeps); the test holds the
    # pipe open, so that none sees its end, and sends all the lines at once.
    go = tmp_path / "go"
    os.mkfifo(go)
    gate = os.open(go, os.O_RDWR | os.O_NONBLOCK)
    try:
        async with TaskRuntime() as rt:
            outs = [
                await run_shell(rt, f"read line < {go}; echo {i}", run_in_background=True)
                for i in range(100)
            ]
            os.write(gate, b"go\n" * 100)  # every command exits within ~10 ms of this
            states = await asyncio.gather(*(rt.wait(o.task_id, timeout=30) for o in outs))
            assert {s.status for s in states} == {TaskStatus.COMPLETED}
            ends = [s.end_time for s in states]
            assert max(ends) - min(ends) < 1.0 * TIME_FACTOR  # type: ignore[operator]
            batch = rt.drain()
            assert len(batch) == 100
            assert {n.task_id for n in batch} == {o.task_id for o in outs}
            assert rt.drain() == []
    finally:
        os.close(gate)


async def test_kill_shells_for_agent_only_touches_that_agents_shells() -> None:
    async with TaskRuntime() as rt:
        mine = await run_shell(rt, "sleep 300", run_in_background=True, owner="a1111111")
        also = await run_shell(rt, "sleep 300", run_in_background=True, agent_id="a1111111")
        other = await run_shell(rt, "sleep 300", run_in_background=True, owner="a2222222")
        killed = await rt.kill_shells_for_agent("a1111111")
        assert {s.id for s in killed} == {mine.task_id, also.task_id}
        assert not rt.get(other.task_id).terminal  # type: ignore[union-attr]


async def test_exit_policies_when_the_owner_closes() -> None:
    async with TaskRuntime() as rt:
        cancel = await run_shell(rt, "sleep 300", run_in_background=True, owner="a0000001")
        wait = await run_shell(
            rt,
            "sleep 0.5; echo waited",
            run_in_background=True,
            owner="a0000001",
            exit_policy="wait",
        )
        detach = await run_shell(
            rt, "sleep 300", run_in_background=True, owner="a0000001", exit_policy="detach"
        )
        detached_pid = rt.get(detach.task_id).pid  # type: ignore[union-attr]
        await rt.close_owner("a0000001", wait_limit=10)
        assert rt.get(cancel.task_id).status == TaskStatus.KILLED  # type: ignore[union-attr]
        assert rt.get(wait.task_id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
        assert Path(wait.output_file).read_text() == "waited\n"
        assert alive(detached_pid)
        # What its tasks said before it closed stays queued for the owner (it gets it if it
        # is resumed); the detached command, still running, has said nothing.
        assert rt.drain(owner="a0000001") == []  # set aside, not handed out
        kept = rt.mailbox.parked("a0000001")
        assert sorted(n.sender for n in kept) == sorted([cancel.task_id, wait.task_id])
    # A detached command outlives the session, and the next session's sweep spares it.
    async with TaskRuntime():
        assert alive(detached_pid)
    os.killpg(detached_pid, 9)
    await wait_until(lambda: not alive(detached_pid), what="detached command to die")


async def test_close_kills_running_tasks_and_leftover_descendants() -> None:
    rt = TaskRuntime()
    await rt.start()
    running = await run_shell(rt, "sleep 300", run_in_background=True)
    # A finished command that left a daemon behind: found by its tag at close.
    daemon = await run_shell(rt, "sleep 300 >/dev/null 2>&1 &", timeout=10)
    assert daemon.status == TaskStatus.COMPLETED
    # Bounded wait, not a single look: a process caught inside execve has an empty environ
    # for an instant (the kernel sets the new one last), so one scan under load can miss it.
    await wait_until(
        lambda: find_tree(None, tag=daemon.task_id)[0] != [], what="the daemon to be found by tag"
    )
    await rt.close()
    assert find_tree(None, tag=running.task_id)[0] == []
    assert find_tree(None, tag=daemon.task_id)[0] == []


async def test_planted_symlink_at_the_output_path_fails_the_command_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "victim"
    target.write_text("precious\n")
    async with TaskRuntime() as rt:
        # An attacker who guessed the next id plants a link where its output will go.
        monkeypatch.setattr(rt, "new_id", lambda task_type: "bguessed0")
        path = rt.output_path("bguessed0")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
        with pytest.raises(OutputError, match="refusing to write task output"):
            await run_shell(rt, "echo pwned", run_in_background=True)
        state = rt.get("bguessed0")
        assert state is not None and state.status == TaskStatus.FAILED
        assert rt.drain() == []  # the caller got the error; no notification repeats it
        assert rt.store.list_processes() == []  # nothing was started
    assert target.read_text() == "precious\n"
