"""System prompts (our own wording)."""

from __future__ import annotations

import functools
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
    """The environment block appended to system prompts.

    Its date is the session's (the process's) first: a prompt built after midnight, for an
    agent resumed or started then, keeps the bytes its cached prefix was written with.
    """
    is_git = any((p / ".git").exists() for p in (cwd, *cwd.parents))
    return (
        "<env>\n"
        f"Working directory: {cwd}\n"
        f"Is directory a git repo: {'Yes' if is_git else 'No'}\n"
        f"Platform: {_platform()}\n"
        f"Today's date: {session_date()}\n"
        "</env>"
    )


@functools.cache
def session_date() -> str:
    """The date the session started on (ISO), the same for all of the process's prompts."""
    return date.today().isoformat()


def _platform() -> str:
    """``platform.system().lower()``: ``linux``, ``darwin``, ``windows``.

    Without importing :mod:`platform`, which costs milliseconds at every start-up.
    """
    if sys.platform == "win32":
        return "windows"
    return os.uname().sysname.lower()


def main_system_prompt(
    cwd: Path, append: str | None = None, *, replace: str | None = None, instructions: str = ""
) -> str:
    """The main thread's system prompt: ours with the environment, or ``replace`` as given.

    Args:
        cwd: The session's working directory.
        append: Added at the end (``--append-system-prompt``).
        replace: Ours replaced by this (``--system-prompt``).
        instructions: The session's instruction files (CLAUDE.md, AGENTS.md: see
            :mod:`taskloom.instructions`), kept with a replaced prompt too, as Claude Code
            keeps them. Read once at the start: the prompt's bytes, the cached prefix,
            stay the same all session.
    """
    parts = [MAIN_PROMPT, environment(cwd)] if replace is None else [replace]
    parts += [instructions, append or ""]
    return "\n\n".join(p for p in parts if p)
