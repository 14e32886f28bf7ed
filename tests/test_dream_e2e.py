"""Dreaming through a real ``taskloom`` process: the ``dream`` request and ``autoDream`` of a
stream-json session, and an atomic replace killed with SIGKILL mid-write."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from helpers import TIME_FACTOR, clean_env
from taskloom.agents.dream_tools import TEMP_SUFFIX, sweep_leftovers
from taskloom.agents.memory import memory_dir

pytestmark = pytest.mark.e2e

AGENTS = json.dumps(
    {"notetaker": {"description": "Takes notes.", "prompt": "You take notes.", "memory": "project"}}
)


class Session:
    """A stream-json taskloom process, its output lines read as they come."""

    def __init__(self, tmp_path: Path, script: dict[str, Any], settings: dict[str, Any]) -> None:
        path = tmp_path / "script.yaml"
        path.write_text(yaml.safe_dump(script))
        argv = [sys.executable, "-m", "taskloom", "--input-format", "stream-json"]
        argv += ["--output-format", "stream-json", "--model", f"scripted:{path}"]
        argv += ["--agents", AGENTS, "--settings", json.dumps(settings)]
        env = clean_env(TASKLOOM_HOME=str(tmp_path / "home"))
        self.proc = subprocess.Popen(
            argv, cwd=tmp_path, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, line: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(line) + "\n")
        self.proc.stdin.flush()

    def until(self, want: Any, timeout: float = 60.0) -> dict[str, Any]:
        """The first line from now (or seen already) that ``want`` accepts."""
        for line in self.seen:
            if want(line):
                return line
        deadline = time.monotonic() + timeout * TIME_FACTOR
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            assert line is not None, f"taskloom ended first: {self.stderr()}"
            self.seen.append(line)
            if want(line):
                return line

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(60 * TIME_FACTOR)
        return code

    def stderr(self) -> str:
        self.proc.kill()
        self.proc.wait(30)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@pytest.fixture
def started() -> Iterator[list[Session]]:
    """The sessions a test starts; one still running when it ends (it failed) is killed."""
    found: list[Session] = []
    yield found
    for session in found:
        if session.proc.poll() is None:
            session.proc.kill()
            session.proc.wait(30)
        for stream in (session.proc.stdin, session.proc.stdout, session.proc.stderr):
            if stream is not None:
                stream.close()


def _memory(root: Path) -> Path:
    where = memory_dir("project", "notetaker", root)
    where.mkdir(parents=True)
    (where / "build.md").write_text("The build needs GO=1.\n")
    (where / "build-again.md").write_text("The build needs GO=1.\n")
    (where / "MEMORY.md").write_text("- build.md\n- build-again.md\n" * 150)  # 300 lines
    return where


def _dream_script(where: Path) -> list[dict[str, Any]]:
    index = str(where / "MEMORY.md")
    write = {"file_path": index, "content": "- build.md: GO=1\n", "reason": "duplicates"}
    delete = {"file_path": str(where / "build-again.md"), "reason": "same as build.md"}
    reads = [
        {"name": "MemoryRead", "input": {"file_path": index}},
        {"name": "MemoryRead", "input": {"file_path": delete["file_path"]}},
    ]
    return [
        {"tool_calls": reads},
        {"tool_calls": [{"name": "MemoryWrite", "input": write}]},
        {"tool_calls": [{"name": "MemoryDelete", "input": delete}]},
        {"text": "Merged the two build notes."},
    ]


def _ended(task_id: str) -> Any:
    def check(line: dict[str, Any]) -> bool:
        status = line.get("patch", {}).get("status")
        return line.get("task_id") == task_id and status in ("completed", "failed", "killed")

    return check


def test_a_dream_request_tidies_the_memory_and_answers_its_task_id(
    tmp_path: Path, started: list[Session]
) -> None:
    where = _memory(tmp_path)
    slow = {"text": "still thinking", "delay": 120}  # the second dream is at work till the end
    script = {"turns": [{"text": "hi"}], "subagents": {"dream": [*_dream_script(where), slow]}}
    session = Session(tmp_path, script, {})
    started.append(session)
    session.send({"type": "user", "message": {"role": "user", "content": "hello"}})
    session.until(lambda line: line["type"] == "result")
    session.send({"type": "control_request", "request_id": "r1", "request": {"subtype": "dream"}})
    answer = session.until(lambda line: line["type"] == "control_response")["response"]
    assert answer["subtype"] == "success", answer
    task_id = answer["response"]["task_id"]
    ended = session.until(_ended(task_id))
    assert ended["patch"]["status"] == "completed" and ended["dream"]["changes"] == 2
    # Another while none is at work starts; one while it works is refused, by name.
    session.send({"type": "control_request", "request_id": "r2", "request": {"subtype": "dream"}})
    again = session.until(lambda line: line.get("response", {}).get("request_id") == "r2")
    assert again["response"]["subtype"] == "success"
    session.send({"type": "control_request", "request_id": "r3", "request": {"subtype": "dream"}})
    refused = session.until(lambda line: line.get("response", {}).get("request_id") == "r3")
    assert "already at work" in refused["response"].get("error", ""), refused
    assert session.close() == 0
    assert (where / "MEMORY.md").read_text() == "- build.md: GO=1\n"
    assert sorted(p.name for p in where.iterdir()) == ["MEMORY.md", "build.md"]
    output = Path(session.until(lambda line: line.get("task_id") == task_id)["output_file"])
    assert "same as build.md" in output.read_text()


def test_auto_dream_starts_once_the_session_stays_idle(
    tmp_path: Path, started: list[Session]
) -> None:
    where = _memory(tmp_path)
    script = {"turns": [{"text": "hi"}], "subagents": {"dream": _dream_script(where)}}
    settings = {"autoDream": True, "dreamIdleSeconds": 0.2}
    session = Session(tmp_path, script, settings)
    started.append(session)
    session.send({"type": "user", "message": {"role": "user", "content": "hello"}})
    session.until(lambda line: line["type"] == "result")
    dream = session.until(
        lambda line: line.get("subtype") == "task_started" and line["task_type"] == "dream"
    )
    ended = session.until(_ended(dream["task_id"]))
    assert ended["dream"]["trigger"] == "idle" and ended["patch"]["status"] == "completed"
    assert session.close() == 0
    # The model was never told of it: one result, no task-notification turn.
    assert [line["type"] for line in session.seen].count("result") == 1


WRITER = """
import os, sys, time
from pathlib import Path
from taskloom.agents.dream_tools import replace_file
path, size = Path(sys.argv[1]), int(sys.argv[2])
if sys.argv[3] == "pause":  # stop between the temporary file's write and its rename
    def paused(*args):
        print("paused", flush=True)
        time.sleep(3600)
    os.replace = paused
n = 0
while True:
    replace_file(path, (b"a" if n % 2 else b"b") * size)
    n += 1
    print(n, flush=True)
"""


def test_an_atomic_replace_killed_before_its_rename_leaves_the_old_file(tmp_path: Path) -> None:
    size = 1024 * 1024
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"a" * size)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(size), "pause"],
        stdout=subprocess.PIPE, env=clean_env(), text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "paused\n"  # the new content is written, not renamed
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30 * TIME_FACTOR)
    proc.stdout.close()
    assert path.read_bytes() == b"a" * size  # as it was
    (left,) = tmp_path.glob(f".*{TEMP_SUFFIX}")
    assert left.read_bytes() == b"b" * size
    assert sweep_leftovers([tmp_path]) == [left]


def test_an_atomic_replace_killed_mid_write_leaves_a_whole_file(tmp_path: Path) -> None:
    size = 4 * 1024 * 1024
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"a" * size)
    for attempt in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(size), "loop"],
            stdout=subprocess.PIPE, env=clean_env(), text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        while int(proc.stdout.readline()) < 2 + attempt:  # killed in its next write
            pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30 * TIME_FACTOR)
        proc.stdout.close()
        data = path.read_bytes()
        assert data in (b"a" * size, b"b" * size), f"attempt {attempt}: a torn file"
        sweep_leftovers([tmp_path])
        assert not list(tmp_path.glob(f".*{TEMP_SUFFIX}"))
