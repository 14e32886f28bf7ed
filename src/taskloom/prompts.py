"""System prompts (our own wording)."""

from __future__ import annotations

import os
import sys
from datetime import date
from pathlib import Path

MAIN_PROMPT = """You are taskloom, a coding agent working in the user's repository through tools.

Work carefully and finish the task. Read before you edit. Prefer small, verifiable steps.
Run long commands (builds, test suites, servers) with run_in_background and keep working: you
are notified with a <task-notification> when a background task ends, so never poll with
sleep. Read a task's output with TaskOutput, stop what you no longer need with TaskStop, and
collect the results you depend on before giving your final answer. When you are done, answer
concisely with what you did and what you found."""


def environment(cwd: Path) -> str:
    """The environment block appended to system prompts."""
    is_git = any((p / ".git").exists() for p in (cwd, *cwd.parents))
    return (
        "<env>\n"
        f"Working directory: {cwd}\n"
        f"Is directory a git repo: {'Yes' if is_git else 'No'}\n"
        f"Platform: {_platform()}\n"
        f"Today's date: {date.today().isoformat()}\n"
        "</env>"
    )


def _platform() -> str:
    """``platform.system().lower()``: ``linux``, ``darwin``, ``windows``.

    Without importing :mod:`platform`, which costs milliseconds at every start-up.
    """
    if sys.platform == "win32":
        return "windows"
    return os.uname().sysname.lower()


def main_system_prompt(cwd: Path, append: str | None = None, *, replace: str | None = None) -> str:
    """The main thread's system prompt: ours with the environment, or ``replace`` as given."""
    parts = [MAIN_PROMPT, environment(cwd)] if replace is None else [replace]
    if append:
        parts.append(append)
    return "\n\n".join(p for p in parts if p)
