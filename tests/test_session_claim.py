"""Taking a session is atomic: two resumes of one crashed session never both deliver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from helpers import alive, clean_env
from taskloom.settings import db_path
from taskloom.tasks.runtime import TaskRuntime

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
from taskloom.session import transcript_path
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


def blocked_reading_stdin(pid: int) -> bool:
    """Whether ``pid`` sits in read(0, ...): taskloom waiting for its prompt on stdin."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().startswith("0 0x0 ")
    except OSError:
        return False


async def race(argv: list[str], env: dict[str, str], cwd: Path, release: Path) -> list[Any]:
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
        deadline = time.monotonic() + 60
        while not all(blocked_reading_stdin(p.pid) for p in procs):
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


async def test_simultaneous_resumes_of_a_crashed_session_deliver_each_notification_once(
    tmp_path: Path,
) -> None:
    specs = [
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
    for i, spec in enumerate(specs):
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
        runs = await race(argv, env, work, release)
        (w_pid, w_code, w_out, _), (_, l_code, l_out, l_err) = sorted(runs, key=lambda r: r[1])
        where = f"repetition {i}: exit codes {[r[1] for r in runs]}"
        counts = Counter(delivered(w_out) + delivered(l_out))
        expected = [*info["undelivered"], *([info["orphan_task"]] if spec["orphan"] else [])]
        assert counts == Counter(expected), f"{where}: delivered {counts}, expected {expected}"
        assert (w_code, l_code) == (0, 1), f"{where}\n{runs[0][3]}\n{runs[1][3]}"
        assert f"session {sid} is in use by process {w_pid}" in l_err, where
        assert [p for p in info["orphan_pids"] if alive(p)] == [], where


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
