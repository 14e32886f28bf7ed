"""Running git: the one way every caller does it (worktrees, the remote snapshot, the demos).

git is a short-lived program like any other (:func:`~taskloom.process.run.run_program`): it is
recorded for the orphan sweep before it starts, runs in a group of its own, has a deadline, and
leaves nothing running — the repository's hooks it runs (``post-checkout`` on ``worktree add``,
``reference-transaction`` on ``update-ref``) may hang or start daemons. It never asks anything:
no credential prompt, and ``GIT_OPTIONAL_LOCKS=0`` keeps ``git status`` from taking the index
lock of a worktree a session is working in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from taskloom.errors import ProcessError, clipped
from taskloom.process.run import ProgramError, run_program

#: Seconds one git command may take, unless its caller says otherwise.
GIT_TIMEOUT_S = 60.0
#: Seconds between SIGTERM and SIGKILL for what git's hooks leave running after git exits.
_KILL_GRACE_S = 1.0
#: Most characters of git's error output a message quotes.
_ERROR_CHARS = 2000
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


class GitError(ProcessError):
    """git could not be run, ran past its deadline, or failed; the message says which.

    Attributes:
        started: git was started (False: it could not be, e.g. it is not installed or the
            directory is missing).
        timed_out: It ran past its deadline and was killed.
    """

    def __init__(
        self,
        message: str,
        *,
        started: bool = True,
        timed_out: bool = False,
        exit_code: int | None = None,
        stderr: str = "",
    ) -> None:
        super().__init__(message, exit_code=exit_code, stderr=stderr)
        self.started = started
        self.timed_out = timed_out


async def git(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float = GIT_TIMEOUT_S,
) -> str:
    """Run ``git ARGS`` in ``cwd``; its stdout.

    Args:
        cwd: Where it runs.
        *args: Its arguments.
        env: Variables added to our environment (an index file, an identity).
        timeout: Seconds it may take before it and what it started are killed.

    Raises:
        GitError: It could not be started (``cannot run git in DIR: …``), timed out (``git
            CMD timed out after N s in DIR``) or exited non-zero (``git CMD SUB failed:`` and
            its error output).
    """
    try:
        run = await run_program(
            ["git", *args],
            timeout=timeout,
            cwd=cwd,
            env={**os.environ, **_GIT_ENV, **(env or {})},
            grace=_KILL_GRACE_S,
        )
    except ProgramError as exc:
        if exc.result is None:
            raise GitError(f"cannot run git in {cwd}: {exc.reason}", started=False) from exc
        raise GitError(
            f"git {args[0] if args else ''} timed out after {timeout:g} s in {cwd}",
            timed_out=True,
            exit_code=exc.result.exit_code,
        ) from exc
    if run.exit_code != 0:
        why = run.err_text().strip() or f"exit code {run.exit_code}"
        raise GitError(
            f"git {' '.join(args[:2])} failed: {clipped(why, _ERROR_CHARS)}",
            exit_code=run.exit_code,
            stderr=run.err_text(),
        )
    return run.out_text()


__all__ = ["GIT_TIMEOUT_S", "GitError", "git"]
