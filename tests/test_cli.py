"""The command line, driven as a user or a script would drive it."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from taskloom.tasks.runtime import TaskRuntime
from taskloom.tasks.shell import run_shell

pytestmark = pytest.mark.e2e


def taskloom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskloom", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_demo_runs_a_scripted_session_with_real_tasks() -> None:
    proc = taskloom("demo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "The tests pass" in out
    # The tests' end is notified; the watcher the model stopped is not (TaskStop said so).
    assert out.count("<task-notification>") == 1
    assert 'Background command "run the tests" completed (exit code 0)' in out
    assert "Successfully stopped task" in out and "was stopped" not in out
    listed = json.loads(taskloom("tasks", "--json").stdout)
    assert sorted((t["description"], t["status"]) for t in listed) == [
        ("file watcher", "killed"),
        ("run the tests", "completed"),
    ]


async def test_tasks_lists_a_running_session_from_another_process() -> None:
    async with TaskRuntime() as rt:
        out = await run_shell(
            rt, "echo hi; sleep 300", run_in_background=True, description="long job"
        )
        rt.store.flush()
        proc = subprocess.run(
            [sys.executable, "-m", "taskloom", "tasks", "--session", rt.session_id, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        rows = json.loads(proc.stdout)
        assert [(r["id"], r["status"], r["description"]) for r in rows] == [
            (out.task_id, "running", "long job")
        ]
        assert rows[0]["output_file"] == out.output_file
        table = subprocess.run(
            [sys.executable, "-m", "taskloom", "tasks"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.task_id in table.stdout and "running" in table.stdout
        assert re.search(r"long job", table.stdout)
        await rt.kill(out.task_id)


def test_all_and_unknown_session() -> None:
    assert taskloom("tasks", "--all").stdout.strip() == "No tasks in any session."
    proc = taskloom("tasks", "--session", "nope", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == []


def test_bad_flag_is_a_usage_error_with_exit_code_2() -> None:
    proc = taskloom("tasks", "--bogus")
    assert proc.returncode == 2
    assert "--bogus" in proc.stderr


def test_sigterm_stops_the_session_and_its_commands() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskloom", "demo"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "→ TaskOutput" in line:  # the tests are running; the session waits on them
            break
    proc.terminate()
    assert proc.wait(timeout=30) == 128 + 15
    proc.stdout.close()
    rows = json.loads(taskloom("tasks", "--json").stdout)
    assert len(rows) == 2
    assert all(r["status"] in ("completed", "failed", "killed") for r in rows), rows
    assert "killed" in {r["status"] for r in rows}
