"""Small helpers shared by tests."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

#: Every process a test run starts inherits this variable, set to the run's own id by the
#: conftest; tests find their processes by it, never by looking at the whole machine.
RUN_MARK = "TASKLOOM_TEST_RUN"

#: Elapsed-time bounds in tests are multiplied by this: a slow or loaded machine sets
#: ``TASKLOOM_TEST_TIME_FACTOR`` above 1.
TIME_FACTOR = float(os.environ.get("TASKLOOM_TEST_TIME_FACTOR") or 1)


def run_processes(where: Callable[[psutil.Process], bool] | None = None) -> list[psutil.Process]:
    """Live processes (not zombies) of this test run, other than us, for which ``where`` holds.

    ``where`` sees processes with ``info`` filled for ``environ``, ``status`` and ``cmdline``.
    """
    mark = os.environ.get(RUN_MARK)
    me = os.getpid()
    found = []
    for proc in psutil.process_iter(["pid", "environ", "status", "cmdline"]):
        if proc.pid == me or proc.info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        env = proc.info.get("environ") or {}
        if mark is not None and env.get(RUN_MARK) == mark and (where is None or where(proc)):
            found.append(proc)
    return found


async def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Wait (bounded) for a condition that has no event to wait on, e.g. file content."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or cond}")
        await asyncio.sleep(0.01)


def file_contains(path: str | Path, text: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return text in Path(path).read_text(errors="replace")
        except FileNotFoundError:
            return False

    return check


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without any model provider's settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env.update(extra)
    return env


def harness(cwd: Path, model: Any, **options: Any) -> Any:
    """A ``taskloom.Harness`` on ``cwd`` and ``model`` allowing every call; ``options`` added."""
    import taskloom

    return taskloom.Harness(model=model, cwd=cwd, skip_permissions=True, **options)


def main_context(h: Any, cwd: Path | None = None) -> Any:
    """A ``ToolContext`` of the harness's main thread (the owner of the agents it spawns)."""
    from taskloom.tools.base import ToolContext

    return ToolContext(runtime=h.runtime, owner=h.session_id, cwd=cwd or h.cwd)


def scripted_argv(script: Path, *args: str) -> list[str]:
    """``taskloom -p go --output-format stream-json --model scripted:<script> ARGS``."""
    import sys

    return [
        sys.executable,
        "-m",
        "taskloom",
        "-p",
        "go",
        "--output-format",
        "stream-json",
        "--model",
        f"scripted:{script}",
        *args,
    ]


def write_turns(path: Path, turns: list[Any]) -> str:
    """Write a scripted-turn file and return the ``--model`` value that names it."""
    import yaml

    path.write_text(yaml.safe_dump({"turns": turns}))
    return f"scripted:{path}"


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60, stdin: str = ""
) -> Any:
    """``taskloom ARGS`` in ``cwd``, to its end; a ``subprocess.CompletedProcess[str]``."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "taskloom", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        input=stdin,
        env=env if env is not None else clean_env(),
    )


def json_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of a stream-json output, one a line."""
    import json

    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


#: What the model gets for a tool result too long to show inline (taskloom.tools.overflow).
PERSISTED = re.compile(
    r"<persisted-output>\nOutput too large \((?P<size>[^)]+)\)\. Full output saved to: "
    r"(?P<path>\S+)\n\nPreview \(first 2KB\):\n(?P<preview>.*?)(?P<more>\n\.\.\.)?\n"
    r"Read the rest with Read \(offset and limit\) or search it with Grep on that file\.\n"
    r"</persisted-output>",
    re.S,
)
