"""Taking a session is atomic: two resumes of one crashed session never both deliver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import TIME_FACTOR, alive, clean_env, wait_until
from taskloom.process.identity import boot_id
from taskloom.settings import db_path
from taskloom.store import ProcessRow, SessionRow, Store
from taskloom.tasks._recovery import settle_dead_sessions
from taskloom.tasks.claim import claim_session
from taskloom.tasks.ids import new_task_id
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.types import ShellTaskState, TaskStatus, TaskType

REPS = 20
#: Repetitions whose crashed session also left a TERM-ignoring orphan (the sweep then waits
#: its TERM grace, 2 s, before SIGKILL): enough to prove the sweep no longer opens a window.
ORPHAN_EVERY = 5

# Makes one crashed session per (home, session id): three background commands that ended
# and whose notifications were never delivered, optionally a command ignoring SIGTERM that
# is still running, and a transcript. Reports, then waits for the test's SIGKILL.
CRASH_SCRIPT = """
import asyncio, json, sys, time
import psutil
from taskloom.messages import Message, TextBlock
from taskloom.transcript import transcript_path
from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell
from taskloom.transcript import TranscriptWriter
from pathlib import Path

ORPHAN = "trap '' TERM; sleep 60 & echo armed; wait"

async def crash(spec):
    home, sid = Path(spec["home"]), spec["session_id"]
    rt = TaskRuntime(session_id=sid, home=home)
    await rt.start()
    ids = []
    for word in ("one", "two", "three"):
        ids.append((await run_shell(rt, f"echo {word}", run_in_background=True)).task_id)
    for task_id in ids:
        await rt.wait(task_id, timeout=10)
    info = {"undelivered": ids, "orphan_task": None, "orphan_pids": []}
    if spec["orphan"]:
        out = await run_shell(rt, ORPHAN, run_in_background=True)
        deadline = time.monotonic() + 10
        while b"armed" not in Path(out.output_file).read_bytes():
            assert time.monotonic() < deadline, "orphan never armed"
            await asyncio.sleep(0.01)
        leader = rt.get(out.task_id).pid
        kids = psutil.Process(leader).children(recursive=True)
        info.update(orphan_task=out.task_id, orphan_pids=[leader, *(k.pid for k in kids)])
    writer = TranscriptWriter(transcript_path(sid, home), sid)
    writer.append(Message.user("start"), origin="prompt")
    writer.append(Message(role="assistant", content=[TextBlock(text="Started.")]))
    writer.close()
    rt.store.flush()
    return sid, info

async def main():
    specs = json.loads(sys.argv[1])
    done = await asyncio.gather(*(crash(s) for s in specs))
    print(json.dumps(dict(done)), flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


def make_crashed_sessions(tmp_path: Path, specs: list[dict[str, Any]]) -> dict[str, Any]:
    """Run CRASH_SCRIPT for ``specs`` and SIGKILL it once it has reported."""
    script = tmp_path / "crash.py"
    script.write_text(CRASH_SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), json.dumps(specs)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
    finally:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
    assert line, "the crash script died before reporting"
    info: dict[str, Any] = json.loads(line)
    return info


#: The ``read`` system call's number as ``/proc/PID/syscall`` shows it, by architecture.
READ_SYSCALL = {"x86_64": 0, "aarch64": 63}


async def read_syscall_number() -> int:
    """``read``'s number here, checked on a ``cat`` waiting on stdin; else skip the test."""
    machine = platform.machine()
    number = READ_SYSCALL.get(machine) if sys.maxsize > 2**32 else None
    if number is None:
        pytest.skip(
            f"the number of the read system call on {machine} ({sys.maxsize.bit_length() + 1}"
            "-bit Python) is not known to this test, which must see both resumes blocked on "
            "reading stdin"
        )
    cat = await asyncio.create_subprocess_exec(
        "cat", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
    )
    try:
        await wait_until(
            lambda: blocked_reading_stdin(cat.pid, number),
            what=f"cat to show read ({number}) in /proc/{cat.pid}/syscall",
        )
    finally:
        cat.kill()
        await cat.wait()
    return number


def blocked_reading_stdin(pid: int, read_nr: int) -> bool:
    """Whether ``pid`` sits in read(0, ...): taskloom waiting for its prompt on stdin."""
    where = Path(f"/proc/{pid}")
    try:
        return (where / "syscall").read_text().startswith(f"{read_nr} 0x0 ")
    except OSError as exc:
        if not where.exists():  # it has just ended: the caller tells why
            return False
        # No such file (a kernel without it), or no ptrace access to our own children.
        pytest.skip(
            f"cannot read {where}/syscall ({exc}): this test must see both resumes blocked "
            "on reading stdin"
        )


async def race(
    argv: list[str], env: dict[str, str], cwd: Path, release: Path, read_nr: int
) -> list[Any]:
    """Start two resumes, let both go at the same instant, release the winner once one ends.

    Both read their prompt from stdin: once both are blocked on that read (all imports done),
    the prompt is written to both, so they reach the session claim together.
    """
    procs = [
        await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60 * TIME_FACTOR
        while not all(blocked_reading_stdin(p.pid, read_nr) for p in procs):
            assert all(p.returncode is None for p in procs), "a resume ended before its prompt"
            assert time.monotonic() < deadline, "the resumes never waited for their prompt"
            await asyncio.sleep(0.005)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go on")
            p.stdin.close()
        runs = [asyncio.ensure_future(p.communicate()) for p in procs]
        # The winner waits in a tool call until released: it still holds the session when the
        # loser tries, however slowly the loser runs. If both won, neither ends by itself.
        await asyncio.wait(runs, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        release.touch()
        outputs = [await asyncio.wait_for(r, 60) for r in runs]
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    return [
        (p.pid, p.returncode, out.decode(), err.decode())
        for p, (out, err) in zip(procs, outputs, strict=True)
    ]


def delivered(stdout: str) -> list[str]:
    """Task ids of the notifications a stream-json run delivered."""
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [e["task_id"] for e in events if e.get("subtype") == "task_notification"]


@pytest.mark.e2e
async def test_simultaneous_resumes_of_a_crashed_session_deliver_each_notification_once(
    tmp_path: Path,
) -> None:
    read_nr = await read_syscall_number()
    specs: list[dict[str, Any]] = [
        {
            "home": str(tmp_path / f"home{i}"),
            "session_id": str(uuid.uuid4()),
            "orphan": i % ORPHAN_EVERY == 0,
        }
        for i in range(REPS)
    ]
    crashed = make_crashed_sessions(tmp_path, specs)
    work = tmp_path / "work"
    work.mkdir()

    async def repetition(i: int, spec: dict[str, Any]) -> None:
        sid, info = spec["session_id"], crashed[spec["session_id"]]
        release = tmp_path / f"release{i}"
        wait = f"n=0; while [ ! -e {release} ] && [ $n -lt 3000 ]; do sleep 0.01; n=$((n+1)); done"
        script = tmp_path / f"turns{i}.yaml"
        script.write_text(
            yaml.safe_dump(
                {
                    "turns": [
                        {"tool_calls": [{"name": "Bash", "input": {"command": wait}}]},
                        {"text": "Carried on."},
                    ]
                }
            )
        )
        argv = [
            sys.executable,
            "-m",
            "taskloom",
            "-p",
            "--output-format",
            "stream-json",
            "--model",
            f"scripted:{script}",
            "--dangerously-skip-permissions",
            "--resume",
            sid,
        ]
        env = clean_env(TASKLOOM_HOME=spec["home"])
        runs = await race(argv, env, work, release, read_nr)
        (w_pid, w_code, w_out, _), (_, l_code, l_out, l_err) = sorted(runs, key=lambda r: r[1])
        where = f"repetition {i}: exit codes {[r[1] for r in runs]}"
        counts = Counter(delivered(w_out) + delivered(l_out))
        expected = [*info["undelivered"], *([info["orphan_task"]] if spec["orphan"] else [])]
        assert counts == Counter(expected), f"{where}: delivered {counts}, expected {expected}"
        assert (w_code, l_code) == (0, 1), f"{where}\n{runs[0][3]}\n{runs[1][3]}"
        assert f"session {sid} is in use by process {w_pid}" in l_err, where
        assert [p for p in info["orphan_pids"] if alive(p)] == [], where

    # Two repetitions (of two sessions each) at a time: each is a race of its own, on a session
    # of its own; what a pair of them adds is load, which can only widen a window.
    for first in range(0, REPS, 2):
        pair = range(first, min(first + 2, REPS))
        await asyncio.gather(*(repetition(i, specs[i]) for i in pair))


async def test_a_live_owner_keeps_its_session_and_a_reused_pid_loses_it() -> None:
    session_id = str(uuid.uuid4())
    code = (
        "import asyncio, sys\n"
        "from taskloom.errors import UserError\n"
        "from taskloom.tasks.runtime import TaskRuntime\n"
        "async def main():\n"
        "    try:\n"
        f"        await TaskRuntime(session_id={session_id!r}).start()\n"
        "    except UserError as exc:\n"
        "        print(exc)\n"
        "        sys.exit(1)\n"
        "asyncio.run(main())\n"
    )
    async with TaskRuntime(session_id=session_id) as first:
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert other.returncode == 1, other.stderr
        assert f"session {session_id} is in use by process {os.getpid()}" in other.stdout
        owner = first.store.get_session(session_id)
        assert owner is not None and owner.pid == os.getpid()
    # The record now names a live, unrelated process: the pid is reused (other start time).
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        with contextlib.closing(sqlite3.connect(db_path())) as conn, conn:
            conn.execute(
                "UPDATE sessions SET pid = ?, pid_start = 1.0, ended_at = NULL WHERE id = ?",
                (stranger.pid, session_id),
            )
        async with TaskRuntime(session_id=session_id) as rt:
            owner = rt.store.get_session(session_id)
            assert owner is not None and owner.pid == os.getpid()
        assert alive(stranger.pid)  # never signalled: it is not ours
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


async def test_a_session_ended_by_another_process_is_claimed_with_its_tasks_already_settled(
    tmp_path: Path,
) -> None:
    """A settler ends a crashed session; a resume claims it before anything else runs.

    Two stores on one database stand for the two processes. The steps run in the order that
    once lost a notification: the settler's compare-and-set ending the session, then at once
    (same loop iteration, so nothing queued has been committed) the resume's claim and reads.
    """
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)  # its pid names no live process of ours any more
    session_id = str(uuid.uuid4())
    killed_id, detached_id = new_task_id(TaskType.LOCAL_BASH), new_task_id(TaskType.LOCAL_BASH)
    settler, claimer = Store(db_path()), Store(db_path())
    try:
        settler.upsert_session(
            SessionRow(session_id, dead.pid, 1.0, str(tmp_path), 1.0, None, boot_id())
        )
        for task_id in (killed_id, detached_id):
            running = ShellTaskState(
                id=task_id,
                owner=session_id,
                session_id=session_id,
                status=TaskStatus.RUNNING,
                start_time=1.0,
                exit_policy="detach" if task_id == detached_id else "cancel",
            )
            settler.upsert_task(running.to_dict())
        # The detached command has ended too: its record names the dead pid.
        settler.add_process(
            ProcessRow(dead.pid, 1.0, dead.pid, session_id, detached_id, dead.pid, 1.0, boot_id())
        )
        settler.set_process_detached(detached_id)
        settler.flush()
        settle_dead_sessions(settler, settler.list_processes(), now=2.0)
        previous = claim_session(claimer, session_id, now=3.0)
        assert previous is not None and previous.ended_at == 2.0  # the settler won its CAS
        records = {r["id"]: r for r in claimer.list_tasks(session_id)}
        assert {i: (r["status"], r["notified"]) for i, r in records.items()} == {
            killed_id: ("killed", False),
            detached_id: ("completed", False),
        }
        # So the resume notifies both now, not at the next resume.
        async with TaskRuntime(session_id=session_id, store=claimer) as rt:
            pending = rt.notifications.pending()
            assert sorted(n.task_id for n in pending) == sorted([killed_id, detached_id])
    finally:
        settler.close()
        claimer.close()


async def test_a_start_stopped_during_the_sweep_gives_the_session_back(
    tmp_path: Path, home: Path
) -> None:
    sid = str(uuid.uuid4())
    info = make_crashed_sessions(tmp_path, [{"home": str(home), "session_id": sid, "orphan": True}])
    orphan = info[sid]["orphan_pids"]
    rt = TaskRuntime(session_id=sid)
    starting = asyncio.get_running_loop().create_task(rt.start())
    probe = Store(db_path())
    try:
        # Claimed (this process owns the row) while the sweep waits out the TERM-ignoring
        # orphan: nothing else says when the start is in the middle of its sweep.
        await wait_until(
            lambda: (s := probe.get_session(sid)) is not None and s.pid == os.getpid(),
            timeout=20,
            what="the claim",
        )
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        assert rt.store.closed
        released = probe.get_session(sid)
    finally:
        probe.close()
    assert released is not None and released.ended_at is not None
    # Given back: this process (or any other) can take it again, and the orphan is reaped.
    async with TaskRuntime(session_id=sid) as again:
        assert again.session_id == sid
    await wait_until(lambda: not any(alive(p) for p in orphan), timeout=20, what="the orphan")


async def test_a_crashed_session_s_detached_remote_agent_goes_on_and_its_resume_holds_it(
    tmp_path: Path,
) -> None:
    """A detached remote agent outlives its session's process: neither the settling of the
    crashed session nor the close of a resume that did not take it up ends it."""
    from taskloom.tasks.remote import RemoteAgentTaskState

    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    session_id = str(uuid.uuid4())
    ids = {p: new_task_id(TaskType.REMOTE_AGENT) for p in ("detach", "cancel")}
    store = Store(db_path())
    try:
        store.upsert_session(
            SessionRow(session_id, dead.pid, 1.0, str(tmp_path), 1.0, None, boot_id())
        )
        for policy, task_id in ids.items():
            running = RemoteAgentTaskState(
                id=task_id,
                owner=session_id,
                session_id=session_id,
                status=TaskStatus.RUNNING,
                start_time=1.0,
                exit_policy=policy,  # type: ignore[arg-type]
                actor=f"taskloom-{session_id}-{task_id}",
            )
            store.upsert_task(running.to_dict())
        store.flush()
        settle_dead_sessions(store, store.list_processes(), now=2.0)
        records = {r["id"]: r["status"] for r in store.list_tasks(session_id)}
        assert records == {ids["detach"]: "running", ids["cancel"]: "killed"}
        async with TaskRuntime(session_id=session_id, store=store) as rt:
            held = rt.get(ids["detach"])
            assert isinstance(held, RemoteAgentTaskState) and held.status == TaskStatus.RUNNING
            assert held.actor == f"taskloom-{session_id}-{ids['detach']}"
        # Nobody took it up here: it is still running for the next resume.
        assert store.get_task(ids["detach"])["status"] == "running"  # type: ignore[index]
    finally:
        store.close()


async def test_a_crashed_session_whose_processes_are_not_verified_gone_stays_open(
    tmp_path: Path,
) -> None:
    """Its remote agent is said to be killed only once nothing the sweep looks for is left:
    while a record of what it ran survives (a kill the sweep could not verify), the session
    stays open and the task running, for the next start to try again."""
    from taskloom.tasks.remote import RemoteAgentTaskState

    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    session_id = str(uuid.uuid4())
    task_id = new_task_id(TaskType.REMOTE_AGENT)
    store = Store(db_path())
    try:
        store.upsert_session(
            SessionRow(session_id, dead.pid, 1.0, str(tmp_path), 1.0, None, boot_id())
        )
        running = RemoteAgentTaskState(
            id=task_id, owner=session_id, session_id=session_id, status=TaskStatus.RUNNING,
            start_time=1.0,
        )  # fmt: skip
        store.upsert_task(running.to_dict())
        # What the sweep left: the record of the agent's worker and scratch checkout.
        left = store.record_tags(
            session_id, [task_id], owner_pid=dead.pid, owner_start=1.0, boot_id=boot_id(),
            path=str(tmp_path / "scratch"),
        )  # fmt: skip
        store.flush()
        settle_dead_sessions(store, store.list_processes(), now=2.0)
        assert [s.id for s in store.open_sessions()] == [session_id]
        assert store.get_task(task_id)["status"] == "running"  # type: ignore[index]
        store.forget_tags(left)  # a later sweep verified it gone
        settle_dead_sessions(store, store.list_processes(), now=3.0)
        assert session_id not in [s.id for s in store.open_sessions()]
        assert store.get_task(task_id)["status"] == "killed"  # type: ignore[index]
    finally:
        store.close()
